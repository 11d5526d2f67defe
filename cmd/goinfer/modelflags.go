package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"goinfer/internal/checkpoint"
	"goinfer/internal/engine"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
	"goinfer/internal/torchvision"
)

// modelFlags are the flags every command that runs a model shares: where
// the weights come from and how the engine runs them.
type modelFlags struct {
	checkpoint string
	modelDir   string
	download   bool
	arch       string
	seed       uint64
	engine     string
	precision  string
	compile    bool
	threads    int
	splitBatch int
	device     int
	tuneCache  string
	// experiments: engine.Options.GraphExperiments.
	experiments string
	fs          *flag.FlagSet // to tell flags given from defaults
}

// given reports whether the flag was set on the command line.
func (m *modelFlags) given(name string) bool {
	set := false
	if m.fs != nil {
		m.fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	}
	return set
}

func (m *modelFlags) register(fs *flag.FlagSet, compileDefault bool) {
	m.fs = fs
	fs.StringVar(&m.checkpoint, "checkpoint", "", "model `FILE`: an ONNX model (.onnx), or a PyTorch state dict (.pth, .pt or .safetensors) of a ResNet or of the torchvision architecture --arch names (torchvision's own file names say theirs); overrides --model_dir")
	fs.StringVar(&m.modelDir, "model_dir", ".", "`DIR` to look for "+checkpoint.ResNet18File+" in, as the reference does")
	fs.BoolVar(&m.download, "download", false, "fetch "+checkpoint.ResNet18File+" from download.pytorch.org into --model_dir when it is missing (checked against its sha256)")
	fs.StringVar(&m.arch, "arch", "resnet18", "torchvision architecture (resnet18, mobilenet_v3_large, efficientnet_b0, convnext_tiny, vit_b_16, ...: `goinfer model archs` lists them) of a --checkpoint state dict, and of the seeded random weights used when no checkpoint is found")
	fs.Uint64Var(&m.seed, "seed", 0, "seed for random weights and generated inputs")
	fs.StringVar(&m.engine, "engine", "auto", "engine: auto (cuda if usable, else cpu), cpu or cuda")
	fs.StringVar(&m.precision, "precision", "", "arithmetic: fp32, tf32, fp16 or bf16 (default: fp32 on cpu, fp16 on cuda)")
	fs.BoolVar(&m.compile, "compile", compileDefault, "fold batch norms, fuse epilogues, autotune and capture CUDA graphs (slower start, faster steady state); --no-compile runs eagerly")
	fs.IntVar(&m.threads, "threads", 0, "cpu engine threads (0: all cores)")
	m.splitBatch = engine.SplitAuto
	fs.Var((*splitFlag)(&m.splitBatch), "cpu_split_batch", "cpu engine, ONNX/general graphs: run a batch larger than `N` (a multiple of it) as N-image chunks, one per thread at a time, instead of every layer over the whole batch; only for models whose images are independent (0: off; auto: chunks where the model's images are independent and its activations outweigh its weights, with at least two chunks per thread)")
	fs.IntVar(&m.device, "device", 0, "GPU ordinal for the cuda engine")
	fs.StringVar(&m.tuneCache, "tuning_cache", "", "`DIR` where the cuda engine keeps its autotuning results between runs (one file per GPU model, driver and cuDNN), so that --compile on the same machine skips the measurements and starts faster; empty: measure every time, as a cold start")
	fs.StringVar(&m.experiments, "graph_experiments", "", graphExperimentsHelp)
}

// selectEngine resolves --engine and --precision, printing auto's choice.
// For a model known to be a general graph (src), auto picks an engine that
// runs general graphs.
func (m *modelFlags) selectEngine(stderr io.Writer, src source) (engine.Engine, engine.Precision, error) {
	e, note, err := engine.Select(m.engine)
	if err != nil {
		return nil, 0, err
	}
	if _, ok := e.(engine.GraphLoader); !ok && src.general() && (m.engine == "auto" || m.engine == "") {
		if cpu, cerr := engine.Get("cpu"); cerr == nil {
			e, note = cpu, fmt.Sprintf("engine: cpu (auto: the %s engine runs the ResNet graphs only so far)", e.Name())
		}
	}
	fmt.Fprintln(stderr, note)
	p := engine.FP32
	if e.Name() == "cuda" {
		p = engine.FP16
	}
	if m.precision != "" {
		if p, err = engine.ParsePrecision(m.precision); err != nil {
			return nil, 0, err
		}
	}
	return e, p, nil
}

// source says where the weights came from, for summaries and CSV rows.
type source struct {
	Path   string // empty for random weights
	Random bool
	Seed   uint64
	Arch   string
	// TorchVision is the torchvision architecture (beyond the ResNets) the
	// weights are for, when known before reading them.
	TorchVision string
}

func (s source) String() string {
	if s.Random {
		return fmt.Sprintf("seeded random %s weights (seed %d)", s.Arch, s.Seed)
	}
	return s.Path
}

// resolve finds the checkpoint: --checkpoint, else the reference's file in
// --model_dir, else (with --download) fetches it, else random weights with a
// notice on stderr.
func (m *modelFlags) resolve(ctx context.Context, stderr io.Writer) (source, error) {
	if m.checkpoint != "" {
		if _, err := os.Stat(m.checkpoint); err != nil {
			return source{}, fmt.Errorf("checkpoint: %w", err)
		}
		src := source{Path: m.checkpoint}
		if !isONNX(m.checkpoint) && m.given("arch") && !isResNet(m.arch) {
			if !torchvision.Known(m.arch) {
				return source{}, fmt.Errorf("--arch %q: unknown architecture (known: %s)", m.arch, strings.Join(torchvision.Archs(), ", "))
			}
			src.TorchVision = m.arch
		} else if w, named, _ := torchvision.FromFileName(m.checkpoint); named && !isResNet(w.Arch) {
			src.TorchVision = w.Arch
		}
		return src, nil
	}
	p := filepath.Join(m.modelDir, checkpoint.ResNet18File)
	_, err := os.Stat(p)
	switch {
	case err == nil:
		return source{Path: p}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return source{}, fmt.Errorf("model_dir: %w", err)
	case m.download:
		fmt.Fprintf(stderr, "downloading %s to %s\n", checkpoint.ResNet18URL, m.modelDir)
		got, err := checkpoint.Download(ctx, checkpoint.ResNet18URL, m.modelDir, stderr)
		if err != nil {
			return source{}, err
		}
		return source{Path: got}, nil
	}
	src := source{Random: true, Seed: m.seed, Arch: m.arch}
	if !isResNet(m.arch) {
		if !torchvision.Known(m.arch) {
			_, err := model.KnownArch(m.arch, 1000)
			return source{}, fmt.Errorf("%w; torchvision architectures: %s", err, strings.Join(torchvision.Archs(), ", "))
		}
		src.TorchVision = m.arch
	}
	fmt.Fprintf(stderr, "notice: no checkpoint at %s: using seeded random %s weights (seed %d); pass --checkpoint FILE, or --download for torchvision's weights\n", p, m.arch, m.seed)
	return src, nil
}

// isResNet reports whether arch is one of the ResNets the ResNet graph
// (and so every engine, the cuda one included) runs.
func isResNet(arch string) bool {
	_, err := model.KnownArch(arch, 1000)
	return err == nil
}

// loadGraph reads the weights src names and builds the eager ResNet graph.
func loadGraph(ctx context.Context, src source) (*model.Graph, error) {
	if src.Random {
		a, err := model.KnownArch(src.Arch, 1000)
		if err != nil {
			return nil, err
		}
		// The graph Init calibrates is the one FromStateDict would build:
		// building it again would copy every weight once more.
		_, g, err := model.InitGraph(ctx, a, src.Seed)
		return g, err
	}
	sd, err := checkpoint.Load(src.Path)
	if err != nil {
		return nil, err
	}
	defer sd.Close()
	g, err := model.FromStateDict(sd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src.Path, err)
	}
	return g, nil
}

// loadTimes splits a cold start the way the reference reports it.
type loadTimes struct {
	Load    time.Duration // reading weights, building the graph, uploading
	Compile time.Duration // compile-only work the engine reported
}

// loadModel reads the model src names and loads it onto e: the whole cold
// start before the first forward. A general graph whose image size is
// fixed overrides opts.Height and opts.Width.
func loadModel(ctx context.Context, e engine.Engine, src source, opts engine.Options) (engine.Model, loadTimes, error) {
	g, err := readNetGraph(ctx, src, opts.Height)
	if err != nil {
		return nil, loadTimes{}, err
	}
	if g.resnet != nil {
		g.resnet.Owned = true // read for this load alone
	}
	return loadNetGraph(ctx, e, g, opts)
}

// loadNetGraph loads a model already read onto e; its read time counts in
// the load time.
func loadNetGraph(ctx context.Context, e engine.Engine, g netGraph, opts engine.Options) (engine.Model, loadTimes, error) {
	t0 := time.Now()
	opts.Height, opts.Width = g.inputSize(opts.Height, opts.Width)
	m, err := g.load(ctx, e, opts)
	if err != nil {
		return nil, loadTimes{}, err
	}
	total := time.Since(t0) + g.read
	ct := m.Info().CompileTime
	return m, loadTimes{Load: total - ct, Compile: ct}, nil
}

// parseInputDType reads --input_dtype.
func parseInputDType(s string) (tensor.DType, error) {
	switch strings.ToLower(s) {
	case "fp32", "float32", "":
		return tensor.Float32, nil
	case "fp16", "float16":
		return tensor.Float16, nil
	case "uint8", "u8":
		return tensor.Uint8, nil
	}
	return 0, fmt.Errorf("unknown --input_dtype %q (want fp32, fp16 or uint8)", s)
}

// splitFlag is --cpu_split_batch: "auto" (engine.SplitAuto) or a chunk
// size, 0 for off.
type splitFlag int

// String implements flag.Value.
func (f *splitFlag) String() string {
	if f == nil || int(*f) == engine.SplitAuto {
		return "auto"
	}
	return strconv.Itoa(int(*f))
}

// Set implements flag.Value.
func (f *splitFlag) Set(s string) error {
	if s == "auto" {
		*f = engine.SplitAuto
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("want auto, 0 (off) or a chunk size, not %q", s)
	}
	*f = splitFlag(n)
	return nil
}

// graphExperimentsHelp is the --graph_experiments usage of compute and of the
// model flags.
const graphExperimentsHelp = "cuda engine, for A/B runs: comma-separated changes to turn off or force: ResNet path nomma (cuDNN only, no split tensor-core convolutions), forcemma, mmanosplit; general graphs noidentity, noprologue, nofindmath, noltune, nolnvec (layer norms without the vectorised kernel), nolngroup (nor the several-rows-a-warp one that batch 256's short rows take; lngroup forces it), nodwrows (no row-split depthwise kernel among those timed), nodwslide (no sliding-window depthwise kernel), nodwsmem (no shared-memory depthwise kernel), nopdl (no programmatic dependent launches), noattnsplit (no key-split attention at small batches), and findlog (print cudnnFind's ranking of each convolution)"
