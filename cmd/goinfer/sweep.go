package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/term"

	"goinfer/internal/sweep"
)

func init() {
	register(command{
		name:    "sweep",
		summary: "run bench over batch sizes x compile x experiments, repeated, into one CSV",
		run: func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("finding the goinfer binary to run bench with: %w", err)
			}
			return runSweep(ctx, args, stdout, stderr, []string{exe, "bench"}, nil)
		},
	})
}

// passFlag holds a bench flag given to sweep, to forward to each run.
type passFlag struct {
	def    string
	val    string
	set    bool
	isBool bool
}

func (p *passFlag) String() string {
	if p == nil {
		return ""
	}
	if p.set {
		return p.val
	}
	return p.def
}

func (p *passFlag) Set(s string) error {
	p.val, p.set = s, true
	return nil
}

func (p *passFlag) IsBoolFlag() bool { return p.isBool }

// runSweep is the sweep command; benchCmd is how to start `goinfer bench`
// (the running binary, or a test binary standing in as it) and env is added
// to the children's environment.
func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer, benchCmd, env []string) error {
	fs := newFlagSet("sweep", "sweep [flags] [bench flags]", stderr)
	batchSizes := fs.String("batch_sizes", "1,32,64,128,256", "comma-separated batch sizes")
	compile := fs.String("compile", "both", "compile settings to run: both, true or false")
	experiments := fs.String("experiments", strings.Join(sweep.DefaultExperiments, ","), "comma-separated experiments (see below)")
	repeats := fs.Int("repeats", 10, "runs per configuration (each in a fresh process)")
	resultsDir := fs.String("results_dir", "results", "`DIR` of the results CSV")
	outputFile := fs.String("output_file", "sweep.csv", "results CSV `FILE` in --results_dir; rows are appended, and configurations it already holds --repeats rows for are skipped")
	timeout := fs.Duration("timeout", 30*time.Minute, "limit for each run (0: none)")
	verbose := fs.Bool("verbose", false, "show each run's own output")
	dryRun := fs.Bool("dry_run", false, "print the runs still to do and exit")
	pass := map[string]*passFlag{}
	for _, bf := range sweep.BenchFlags() {
		p := &passFlag{def: bf.Default, isBool: bf.Bool}
		pass[bf.Name] = p
		fs.Var(p, bf.Name, "bench: "+bf.Usage)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: goinfer sweep [flags] [bench flags]

Runs 'goinfer bench' for every experiment x batch size x compile setting,
--repeats times each, every run in a fresh process (so each warmup latency is
a real cold start), appending one row per run to --results_dir/--output_file.
Runs go repeat by repeat across the grid. Rerunning the same command resumes:
configurations with --repeats rows in the CSV are skipped. Ctrl-C stops the
current run and keeps every finished row. Then: goinfer report.

Flags (bench flags are forwarded to every run; an experiment's own flags win):
`)
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\nExperiments (the reference's: original, copy_streams, workers2-4; default: %s):\n%s",
			strings.Join(sweep.DefaultExperiments, ","), sweep.Help())
	}
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}

	cfg := sweep.Config{Repeats: *repeats}
	var err error
	if cfg.BatchSizes, err = sweep.ParseInts(*batchSizes); err != nil {
		return fmt.Errorf("--batch_sizes: %w", err)
	}
	if cfg.Compile, err = sweep.ParseCompile(*compile); err != nil {
		return fmt.Errorf("--compile: %w", err)
	}
	if cfg.Experiments, err = sweep.LookupExperiments(sweep.ParseList(*experiments)); err != nil {
		return fmt.Errorf("--experiments: %w", err)
	}
	fs.Visit(func(f *flag.Flag) {
		if p, ok := pass[f.Name]; ok && p.set {
			cfg.Bench = append(cfg.Bench, sweep.Flag{Name: f.Name, Value: p.val})
		}
	})
	if err := cfg.Validate(); err != nil {
		return err
	}
	csvPath := filepath.Join(*resultsDir, *outputFile)

	if *dryRun {
		return printPlan(stdout, cfg, csvPath, benchCmd)
	}

	isTerm, width := false, 0
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		isTerm = true
		if w, _, err := term.GetSize(int(f.Fd())); err == nil {
			width = w
		}
	}
	rn := &sweep.Runner{
		Command: benchCmd, Env: env, CSV: csvPath, Log: stderr,
		Terminal: isTerm, Width: width, Verbose: *verbose, Timeout: *timeout,
	}
	start := time.Now()
	res, err := rn.Run(ctx, cfg)
	fmt.Fprintf(stderr, "sweep: %d runs done in %s, %d failed, %d skipped; %d of %d in %s\n",
		res.Ran, time.Since(start).Round(time.Second), len(res.Failed), res.Skipped,
		res.DoneBefore+res.Ran, res.Total, csvPath)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "results: %s\nnext: goinfer report %s\n", csvPath, csvPath)
	return nil
}

// printPlan lists the runs a sweep would make.
func printPlan(w io.Writer, cfg sweep.Config, csvPath string, benchCmd []string) error {
	rows, err := sweep.ReadCSV(csvPath)
	if err != nil {
		return err
	}
	plan, err := cfg.Plan(rows)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%d of %d runs to do (%s holds the rest):\n", len(plan), cfg.Total(), csvPath)
	name := "goinfer"
	if len(benchCmd) > 0 {
		name = filepath.Base(benchCmd[0])
	}
	for _, r := range plan {
		fmt.Fprintf(w, "%s %s %s  # repeat %d\n", name, strings.Join(benchCmd[1:], " "), strings.Join(r.Args, " "), r.Repeat)
	}
	return nil
}
