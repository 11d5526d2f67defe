// Command goinfer is a GPU inference server and benchmark for ResNet-family
// image classifiers: it loads PyTorch checkpoints, runs them on NVIDIA GPUs
// through cuDNN/cuBLAS (or on the CPU in pure Go), reproduces PyTorch's
// inference-server benchmark, and serves the model over KServe v2.
//
// Usage:
//
//	goinfer <command> [flags]
//
// Run `goinfer help` for the list of commands and `goinfer <command> -h`
// for each command's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand. run gets the arguments after the command name
// and the streams to print to; it returns an error to print, or errUsage
// when the flag package has already said what was wrong.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is the registry of subcommands; each file registers its own.
var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("duplicate command " + c.name)
	}
	commands[c.name] = c
}

// errUsage means the flag package already printed the problem and usage.
var errUsage = errors.New("usage error")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches to a subcommand and maps its result to an exit code:
// 0 success, 1 failure, 2 bad usage. A panic is reported as one error line
// (its stack goes to stderr only with GOINFER_DEBUG=1), never a trace dump.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "goinfer: internal error: %v\n", r)
			if os.Getenv("GOINFER_DEBUG") != "" {
				stderr.Write(debug.Stack())
			} else {
				fmt.Fprintln(stderr, "goinfer: set GOINFER_DEBUG=1 for the stack trace, and please report it")
			}
			code = 1
		}
	}()
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return exitCode(c.run(ctx, []string{"-h"}, stdout, stderr), stderr, c.name)
			}
		}
		usage(stdout)
		return 0
	case "version", "--version":
		fmt.Fprintln(stdout, versionString())
		return 0
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "goinfer: unknown command %q\n", name)
		usage(stderr)
		return 2
	}
	return exitCode(c.run(ctx, args[1:], stdout, stderr), stderr, c.name)
}

func exitCode(err error, stderr io.Writer, name string) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(stderr, "goinfer %s: interrupted\n", name)
		return 130
	}
	fmt.Fprintf(stderr, "goinfer %s: %v\n", name, err)
	return 1
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "goinfer: a GPU inference server and benchmark for ResNet image classifiers.")
	fmt.Fprintln(w, "\nUsage: goinfer <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "  version   print the version")
	fmt.Fprintln(w, "\nRun 'goinfer <command> -h' for a command's flags.")
}

func versionString() string {
	v := "devel"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v = s.Value[:12]
			}
		}
		return fmt.Sprintf("goinfer %s (%s)", v, bi.GoVersion)
	}
	return "goinfer " + v
}

// newFlagSet returns a flag set that reports errors instead of exiting and
// prints its usage with a one-line description first.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("goinfer "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: goinfer %s\n\n", synopsis)
		fmt.Fprintln(stderr, "Flags:")
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args, accepting the reference's argparse spellings:
// "--no-NAME" for a boolean NAME (BooleanOptionalAction) and, for every
// flag, "--name" as well as "-name". Positional arguments are rejected
// unless allowArgs is set.
func parseFlags(fs *flag.FlagSet, args []string, allowArgs bool) error {
	args = rewriteNegations(fs, args)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if !allowArgs && fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected argument %q (flags start with --)\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}

// parseWithHelp makes fs's usage print help before the flags, parses args
// (no positional arguments) and returns the names of the flags given, so
// that commands can tell an explicit value from a default.
func parseWithHelp(fs *flag.FlagSet, help string, args []string) (map[string]bool, error) {
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), help)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, false); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set, nil
}

// boolFlag is how the flag package marks boolean flags.
type boolFlag interface{ IsBoolFlag() bool }

func rewriteNegations(fs *flag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		name, neg := strings.CutPrefix(strings.TrimLeft(a, "-"), "no-")
		if neg && strings.HasPrefix(a, "-") && !strings.Contains(name, "=") {
			if f := fs.Lookup(name); f != nil {
				if b, ok := f.Value.(boolFlag); ok && b.IsBoolFlag() && fs.Lookup("no-"+name) == nil {
					out = append(out, "--"+name+"=false")
					continue
				}
			}
		}
		out = append(out, a)
	}
	return out
}
