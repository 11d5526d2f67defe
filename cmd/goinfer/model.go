package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"goinfer/internal/checkpoint"
	"goinfer/internal/ir"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
	"goinfer/internal/torchvision"
)

func init() {
	register(command{
		name:    "model",
		summary: "make seeded random checkpoints (model init) and describe checkpoints (model inspect)",
		run:     runModel,
	})
}

const modelUsage = `Usage: goinfer model <subcommand> [flags]

Subcommands:
  init     write seeded random weights for an architecture (.safetensors, .pth or .pt)
  inspect  print a checkpoint's architecture, parameter count, dtypes and format;
           for a .onnx model: inputs, outputs, opsets, producer, op counts, parameters, MACs

Run 'goinfer model <subcommand> -h' for its flags.
`

func runModel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, modelUsage)
		return errUsage
	}
	switch args[0] {
	case "init":
		return runModelInit(ctx, args[1:], stdout, stderr)
	case "inspect":
		return runModelInspect(args[1:], stdout, stderr)
	case "archs":
		return runModelArchs(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stderr, modelUsage)
		return flag.ErrHelp
	}
	fmt.Fprintf(stderr, "goinfer model: unknown subcommand %q\n\n%s", args[0], modelUsage)
	return errUsage
}

func runModelInit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("model init", "model init --arch NAME --out FILE [flags]", stderr)
	arch := fs.String("arch", "resnet18", "architecture: "+strings.Join(model.KnownArchNames(), ", ")+", or any other of `goinfer model archs` (--width and --layers apply to ResNets only)")
	out := fs.String("out", "", "output `FILE`; the extension picks the format: .safetensors, .pth or .pt")
	seed := fs.Uint64("seed", 0, "random seed: the same seed gives the same weights on every machine")
	classes := fs.Int("classes", 1000, "output classes")
	width := fs.Int("width", 64, "base width (the stem's channels; 64 in torchvision, smaller for narrow test models)")
	layers := fs.String("layers", "", "blocks per stage, comma-separated (e.g. 1,1,1,1), overriding the architecture's")
	dtype := fs.String("dtype", "fp32", "weight dtype: fp32, fp16 or bf16")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if *out == "" {
		fmt.Fprintln(stderr, "--out is required")
		fs.Usage()
		return errUsage
	}
	if _, err := checkpoint.FormatOf(*out); err != nil {
		return err
	}
	dt, err := tensor.ParseDType(*dtype)
	if err != nil || (dt != tensor.Float32 && dt != tensor.Float16 && dt != tensor.BFloat16) {
		return fmt.Errorf("--dtype %q: want fp32, fp16 or bf16", *dtype)
	}
	var sd *checkpoint.StateDict
	desc := *arch
	if !isResNet(*arch) && torchvision.Known(*arch) {
		if *layers != "" || *width != 64 {
			return fmt.Errorf("--width and --layers narrow ResNets only; %s is built as torchvision defines it", *arch)
		}
		if sd, err = torchvision.RandomStateDict(*arch, *classes, uint32(*seed)); err != nil {
			return err
		}
	} else {
		a, err := initArch(*arch, *classes, *width, *layers)
		if err != nil {
			return err
		}
		if sd, err = model.Init(ctx, a, *seed); err != nil {
			return err
		}
		desc = describeArch(a)
	}
	if dt != tensor.Float32 {
		if sd, err = checkpoint.CastFloats(sd, dt); err != nil {
			return err
		}
	}
	if err := checkpoint.Save(*out, sd); err != nil {
		return err
	}
	st, err := os.Stat(*out)
	if err != nil {
		return err
	}
	trainable, buffers := countParams(sd)
	fmt.Fprintf(stdout, "wrote %s: %s, seed %d, %s parameters (+ %s buffer values), %d tensors, %s, %s\n",
		*out, desc, *seed, commas(trainable), commas(buffers), sd.Len(), dt, sizeString(st.Size()))
	return nil
}

// initArch is a named architecture, optionally narrowed (--width) or
// re-layered (--layers) with the same block type, groups and width ratio.
func initArch(name string, classes, width int, layers string) (model.Arch, error) {
	if classes < 1 {
		return model.Arch{}, fmt.Errorf("--classes %d: want at least 1", classes)
	}
	if width < 1 || width > 4096 {
		return model.Arch{}, fmt.Errorf("--width %d: want 1 to 4096", width)
	}
	a, err := model.KnownArch(name, classes)
	if err != nil {
		return model.Arch{}, err
	}
	blocks := a.Blocks()
	if layers != "" {
		blocks = nil
		for _, f := range strings.Split(layers, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > 64 {
				return model.Arch{}, fmt.Errorf("--layers %q: want positive block counts such as 2,2,2,2", layers)
			}
			blocks = append(blocks, n)
		}
	}
	if width == 64 && layers == "" {
		return a, nil
	}
	// KnownArch's first stage has planes = 64; recover torchvision's
	// groups and width_per_group from it so narrow variants keep the ratio.
	s := a.Stages[0]
	groups, wpg := s.Groups, 64
	if a.Block == model.Bottleneck {
		wpg = s.Width * 64 / (64 * s.Groups)
	}
	if a.Block == model.Bottleneck && width*wpg/64*groups < 1 {
		return model.Arch{}, fmt.Errorf("--width %d is too narrow for %s", width, name)
	}
	return model.NewArch(a.Block, blocks, width, classes, groups, wpg), nil
}

func runModelInspect(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("model inspect", "model inspect FILE", stderr)
	if err := parseFlags(fs, args, true); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "model inspect takes exactly one checkpoint FILE")
		fs.Usage()
		return errUsage
	}
	path := fs.Arg(0)
	if isONNX(path) {
		return inspectONNX(path, stdout)
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	format, err := sniffFormat(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	sd, err := checkpoint.Load(path) // verifies a torch.hub hash suffix
	if err != nil {
		return err
	}
	defer sd.Close()
	g, err := model.FromStateDict(sd)
	if errors.Is(err, model.ErrNotResNet) {
		return inspectTorchVision(path, format, st.Size(), stdout, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	a := g.Arch
	hash := "no torch.hub hash suffix in the file name"
	if checkpoint.HasHubHash(path) {
		hash = "verified: the sha256 matches the hash suffix of the file name"
	}
	trainable, buffers := countParams(sd)
	counts := sd.DTypeCounts()
	dts := make([]string, 0, len(counts))
	for dt, n := range counts {
		dts = append(dts, fmt.Sprintf("%d %s", n, dt))
	}
	sort.Strings(dts)

	w := func(k, f string, v ...any) { fmt.Fprintf(stdout, "%-12s "+f+"\n", append([]any{k + ":"}, v...)...) }
	w("file", "%s", path)
	w("format", "%s, %s", format, sizeString(st.Size()))
	w("hub hash", "%s", hash)
	w("arch", "%s", a.Name())
	w("blocks", "%s %v", a.Block, a.Blocks())
	w("widths", "%v (stem %d, %dx%d conv, %d input channels)", a.Widths(), a.Stem, a.StemK, a.StemK, a.InChannels)
	if a.Block == model.Bottleneck && len(a.Stages) > 0 && a.Stages[0].Groups > 1 {
		w("groups", "%d", a.Stages[0].Groups)
	}
	w("classes", "%d", a.Classes)
	w("parameters", "%s (+ %s buffer values: batch-norm statistics)", commas(trainable), commas(buffers))
	w("tensors", "%d (%s)", sd.Len(), strings.Join(dts, ", "))
	if macs, err := g.MACs(224, 224); err == nil {
		w("compute", "%.2f GMAC per 224x224 image", float64(macs)/1e9)
	}
	return nil
}

// sniffFormat reads a file's first bytes to name its format.
func sniffFormat(path string) (checkpoint.Format, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	head := make([]byte, 16)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", err
	}
	return checkpoint.DetectFormat(head[:n])
}

// countParams splits a state dict's values into trainable parameters and
// buffers (running statistics, num_batches_tracked), as torchvision counts.
func countParams(sd *checkpoint.StateDict) (trainable, buffers int64) {
	for _, n := range sd.Names() {
		t, _ := sd.Get(n)
		if strings.HasSuffix(n, ".running_mean") || strings.HasSuffix(n, ".running_var") || strings.HasSuffix(n, ".num_batches_tracked") {
			buffers += int64(t.NumElements())
		} else {
			trainable += int64(t.NumElements())
		}
	}
	return trainable, buffers
}

func describeArch(a model.Arch) string {
	return fmt.Sprintf("%s (%s blocks %v, widths %v, %d classes)", a.Name(), a.Block, a.Blocks(), a.Widths(), a.Classes)
}

// commas formats n with thousands separators.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 0 {
		return "-" + commas(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func sizeString(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// runModelArchs lists --arch's architectures: the engines that run each
// and torchvision's default weights (file, parameters, preprocessing).
func runModelArchs(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("model archs", "model archs", stderr)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "arch\tengines\tdefault weights\tparameters\tpreprocessing")
	for _, a := range torchvision.Archs() {
		engines := "cpu"
		if isResNet(a) {
			engines = "cpu, cuda"
		}
		file, params, pre := "-", "-", "-"
		if w, ok := torchvision.DefaultWeights(a); ok {
			file, params, pre = w.File, commas(w.Params), w.Preprocess.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", a, engines, file, params, pre)
	}
	return tw.Flush()
}

// inspectTorchVision describes a state dict of a torchvision architecture
// beyond the ResNets, found by its file name or its keys.
func inspectTorchVision(path string, format checkpoint.Format, size int64, stdout io.Writer, notResNet error) error {
	g, err := torchvision.Load(path, "", torchvision.Options{})
	if err != nil {
		return fmt.Errorf("%s: %w; as another torchvision architecture: %w", path, notResNet, err)
	}
	ins, outs, err := ir.Signature(g)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	w := func(k, f string, v ...any) { fmt.Fprintf(stdout, "%-14s "+f+"\n", append([]any{k + ":"}, v...)...) }
	w("file", "%s", path)
	w("format", "%s, %s", format, sizeString(size))
	w("arch", "%s (torchvision)", g.Meta["arch"])
	if wt := g.Meta["weights"]; wt != "" {
		w("weights", "%s", wt)
	}
	for _, in := range ins {
		w("input", "%s %s", in.Name, in.Type)
	}
	for _, out := range outs {
		w("output", "%s %s", out.Name, out.Type)
	}
	if g.Preprocess != nil {
		w("preprocessing", "%s", g.Preprocess)
	}
	w("parameters", "%s", commas(g.ParamCount()))
	if b, err := ir.Bind(g, 1); err == nil {
		if macs, err := ir.MACs(b); err == nil {
			w("compute", "%.2f GMAC per image", float64(macs)/1e9)
		}
	}
	return nil
}
