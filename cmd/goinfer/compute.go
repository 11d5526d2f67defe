package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"goinfer/internal/engine"
	_ "goinfer/internal/engine/cpu" // the engines compute can measure
	cudaengine "goinfer/internal/engine/cuda"
	"goinfer/internal/tensor"
)

func init() {
	register(command{
		name:    "compute",
		summary: "compute-only benchmark: forwards with the input already on the device, per batch size, image size and precision",
		run:     runComputeCmd,
	})
}

// computeConfig is what `goinfer compute` measures.
type computeConfig struct {
	src        source
	engine     string
	batchSizes []int
	imageSizes []int
	precisions []engine.Precision
	compile    []bool
	iters      int
	warmup     int
	inputDType tensor.DType
	device     int
	threads    int
	noWinograd bool
	expandFuse string
	tuneAll    bool
	profile    bool
	// profileIters is the forwards of --profile's breakdown (0: iters/10,
	// at least 3).
	profileIters int
	tuneCache    string
	// stem, stemChannels and kernelFile are the cuda engine's experiment
	// knobs (engine.Options.Stem, StemChannels, KernelFile).
	stem         string
	stemChannels int
	kernelFile   string
	graphKernels string
	experiments  string // engine.Options.GraphExperiments
	splitBatch   int    // engine.Options.SplitBatch
	progress     func(format string, args ...any)
}

// computeRow is one measured cell.
type computeRow struct {
	Engine      string
	Device      string
	Precision   string
	Compiled    bool
	Image       int
	Batch       int
	ImgPerSec   float64
	MsPerFwd    float64 // device time of the timed loop / iterations
	P50, P90    float64 // per-forward device time, ms
	LoadSec     float64
	CompileSec  float64
	Weights     int64
	Workspace   int64
	Activations int64
	Layers      []engine.LayerTime
}

func runComputeCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("compute", "compute [flags]", stderr)
	mf := modelFlags{fs: fs}
	fs.StringVar(&mf.checkpoint, "checkpoint", "", "model `FILE` (.onnx, .pth, .pt, .safetensors); default: seeded random weights of --arch")
	fs.StringVar(&mf.arch, "arch", "resnet18", "architecture of a state dict or of the random weights (`goinfer model archs`)")
	fs.Uint64Var(&mf.seed, "seed", 0, "seed for random weights and inputs")
	eng := fs.String("engine", "auto", "engine: auto, cpu or cuda")
	batches := fs.String("batch_sizes", "1,32,64,128,256", "comma-separated batch sizes")
	images := fs.String("image_sizes", "224,250", "comma-separated square image sizes")
	precs := fs.String("precisions", "", "comma-separated precisions (fp32,tf32,fp16,bf16); default: all four on cuda, fp32 on cpu")
	comp := fs.String("compile", "both", "compiled, eager or both: true, false or both")
	iters := fs.Int("iters", 100, "timed forwards per cell")
	warmup := fs.Int("warmup", 10, "untimed forwards per cell before timing")
	inDType := fs.String("input_dtype", "fp32", "input dtype on the device: fp32, fp16 or uint8 (converted to the compute precision on the device)")
	device := fs.Int("device", 0, "GPU ordinal")
	threads := fs.Int("threads", 0, "cpu engine threads (0: all cores)")
	tuneCache := fs.String("tuning_cache", "", "`DIR` where the cuda engine keeps its autotuning results between runs (as for bench and serve); empty: measure every time")
	wino := fs.Bool("winograd", true, "cpu engine: run 3x3 stride-1 convolutions as Winograd F(4x4,3x3) where it pays (false: direct GEMMs, for A/B)")
	expandFuse := fs.String("cpu_fuse_expand", "off", "cpu engine: when an inverted residual block's pointwise expansion and the depthwise convolution after it run as one step, band by band of rows, where the expanded map is large: off (two steps), auto (batches of several images, a split batch's chunks included) or on (every batch)")
	tuneAll := fs.Bool("tune_all", false, "cuda engine, compiled ResNet path: time every candidate algorithm and math type, not only those within reach of cuDNN's best (slower compile; checks that the shortlist loses nothing)")
	stem := fs.String("stem", "", "cuda engine, compiled ResNet path, fp16/bf16: how the image reaches the first convolution: s2d (space to depth, the default), pad (zero channels up to --stem_channels) or none; for A/B runs")
	stemChannels := fs.Int("stem_channels", 0, "cuda engine: the channel count --stem pad pads the image to (0: 8)")
	graphKernels := fs.String("graph_kernels", "", "cuda engine, general graphs: load tools/kernels/graph.cu's kernels from this fatbin, cubin or PTX `FILE` instead of the embedded ones (to measure kernels built with nvcc before committing them)")
	kernelFile := fs.String("kernels", "", "cuda engine, ResNet path: load the elementwise kernels from this PTX, cubin or fatbin `FILE` instead of the embedded ones (to try kernels without rebuilding)")
	experiments := fs.String("graph_experiments", "", graphExperimentsHelp)
	split := engine.SplitAuto
	fs.Var((*splitFlag)(&split), "cpu_split_batch", "cpu engine, ONNX/general graphs: run a batch as `N`-image chunks, one per thread at a time (auto: where the model's images are independent and its activations outweigh its weights; 0: off), as bench, predict and serve do")
	profileIters := fs.Int("profile_iters", 0, "with --profile, the forwards (cuda: the calls of each layer's graph) the breakdown is measured over (0: --iters/10, at least 3)")
	profile := fs.Bool("profile", false, "also print a per-layer breakdown of each cell's forward, and the same summed by op kind (cuda engine: each layer timed on its own as a CUDA graph of repeated calls; cpu engine, ONNX and general graphs: each planned step timed with the wall clock over --profile_iters forwards run as Forward runs them, each step's median, fused nodes as one step, a split batch's steps summed over its chunks and divided by the threads)")
	output := fs.String("output", "", "also write the markdown report to `FILE`")
	csvOut := fs.String("csv", "", "also write the rows as CSV to `FILE`")
	layersCSV := fs.String("profile_csv", "", "with --profile, also write every cell's per-layer times as CSV to `FILE` (tools/cpu/layer_profile.py reads it)")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	cfg := computeConfig{engine: *eng, iters: *iters, warmup: *warmup, device: *device, threads: *threads, noWinograd: !*wino, expandFuse: *expandFuse, tuneAll: *tuneAll, profile: *profile, profileIters: *profileIters, tuneCache: *tuneCache,
		stem: *stem, stemChannels: *stemChannels, kernelFile: *kernelFile, graphKernels: *graphKernels, experiments: *experiments, splitBatch: split,
		progress: func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }}
	var err error
	if cfg.batchSizes, err = parseInts("batch_sizes", *batches); err != nil {
		return err
	}
	if cfg.imageSizes, err = parseInts("image_sizes", *images); err != nil {
		return err
	}
	if cfg.inputDType, err = parseInputDType(*inDType); err != nil {
		return err
	}
	switch strings.ToLower(*comp) {
	case "both":
		cfg.compile = []bool{false, true}
	case "true", "yes", "1":
		cfg.compile = []bool{true}
	case "false", "no", "0":
		cfg.compile = []bool{false}
	default:
		return fmt.Errorf("--compile %q: want true, false or both", *comp)
	}
	if cfg.iters < 1 || cfg.warmup < 0 {
		return fmt.Errorf("--iters must be at least 1 and --warmup not negative")
	}
	mf.modelDir = "."
	if cfg.src, err = mf.resolve(ctx, stderr); err != nil {
		return err
	}
	mf.engine = cfg.engine
	e, _, err := mf.selectEngine(stderr, cfg.src)
	if err != nil {
		return err
	}
	cfg.engine = e.Name()
	p := *precs
	if p == "" {
		p = "fp32"
		if e.Name() == "cuda" {
			p = "fp32,tf32,fp16,bf16"
		}
	}
	for _, s := range strings.Split(p, ",") {
		pr, err := engine.ParsePrecision(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("--precisions: %w", err)
		}
		cfg.precisions = append(cfg.precisions, pr)
	}
	rows, err := runCompute(ctx, e, cfg, stderr)
	if len(rows) == 0 && err != nil {
		return err
	}
	md := computeMarkdown(rows, cfg, os.Args)
	fmt.Fprint(stdout, md)
	if *output != "" {
		if werr := os.WriteFile(*output, []byte(md), 0o644); werr != nil {
			return fmt.Errorf("--output: %w", werr)
		}
	}
	if *csvOut != "" {
		if werr := writeComputeCSV(*csvOut, rows); werr != nil {
			return fmt.Errorf("--csv: %w", werr)
		}
	}
	if *layersCSV != "" {
		if werr := writeLayersCSV(*layersCSV, rows); werr != nil {
			return fmt.Errorf("--profile_csv: %w", werr)
		}
	}
	return err
}

func parseInts(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("--%s: %q is not a positive integer", flagName, f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--%s is empty", flagName)
	}
	return out, nil
}

// runCompute measures every cell; a cell that fails (out of memory, an
// unsupported precision) is reported on stderr and skipped, so one bad cell
// does not lose the others. The error is the first failure.
func runCompute(ctx context.Context, e engine.Engine, cfg computeConfig, stderr io.Writer) ([]computeRow, error) {
	// The ResNet graph runs at any size; a general graph is bound to its
	// image size when read.
	var g netGraph
	var err error
	if !cfg.src.general() {
		if g, err = readNetGraph(ctx, cfg.src, 0); err != nil {
			return nil, err
		}
	}
	var rows []computeRow
	var first error
	for _, size := range cfg.imageSizes {
		if cfg.src.general() {
			if g, err = readNetGraph(ctx, cfg.src, size); err != nil {
				return rows, err
			}
			if h, w := g.inputSize(size, size); h != size || w != size {
				err := fmt.Errorf("image size %d: the model takes %dx%d images only (--image_sizes %d)", size, h, w, h)
				fmt.Fprintf(stderr, "compute: %v\n", err)
				if first == nil {
					first = err
				}
				continue
			}
		}
		for _, p := range cfg.precisions {
			for _, compile := range cfg.compile {
				for _, bs := range cfg.batchSizes {
					if err := ctx.Err(); err != nil {
						return rows, err
					}
					r, err := computeCell(ctx, e, g, cfg, size, p, compile, bs)
					if err != nil {
						fmt.Fprintf(stderr, "compute: %s %s compile=%v %dx%d batch %d: %v\n", e.Name(), p, compile, size, size, bs, err)
						if first == nil {
							first = err
						}
						continue
					}
					fmt.Fprintf(stderr, "%s %s compile=%-5v %d batch %3d: %9.0f img/s  %.3f ms/forward  (compile %.2f s)\n",
						r.Engine, r.Precision, r.Compiled, r.Image, r.Batch, r.ImgPerSec, r.MsPerFwd, r.CompileSec)
					rows = append(rows, r)
				}
			}
		}
	}
	return rows, first
}

func computeCell(ctx context.Context, e engine.Engine, g netGraph, cfg computeConfig, size int, p engine.Precision, compile bool, bs int) (computeRow, error) {
	opts := engine.Options{Compile: compile, Precision: p, MaxBatch: bs, BatchSizes: []int{bs}, Height: size, Width: size,
		InputDType: cfg.inputDType, Device: cfg.device, Threads: cfg.threads, NoWinograd: cfg.noWinograd, ExpandFusion: cfg.expandFuse, TuneAll: cfg.tuneAll, TuningCache: cfg.tuneCache, Progress: cfg.progress,
		Stem: cfg.stem, StemChannels: cfg.stemChannels, KernelFile: cfg.kernelFile, GraphKernelFile: cfg.graphKernels, GraphExperiments: cfg.experiments, SplitBatch: cfg.splitBatch}
	t0 := time.Now()
	m, err := g.load(ctx, e, opts)
	if err != nil {
		return computeRow{}, err
	}
	defer m.Close()
	inst, err := m.NewInstance(ctx)
	if err != nil {
		return computeRow{}, err
	}
	defer inst.Close()
	info := m.Info()
	r := computeRow{Engine: info.Engine, Device: info.Device, Precision: p.String(), Compiled: compile, Image: size, Batch: bs,
		CompileSec: info.CompileTime.Seconds(), LoadSec: (time.Since(t0) - info.CompileTime).Seconds(), Weights: info.WeightBytes}
	r.Activations = inst.MemoryBytes()
	if mm, ok := inst.(cudaengine.Memoryer); ok {
		s := mm.Memory()
		r.Workspace, r.Activations = s.Workspace, s.Activations
	}

	dev := m.Device()
	in, err := dev.Alloc(bs * info.InputBytes())
	if err != nil {
		return r, err
	}
	defer in.Free()
	out, err := dev.Alloc(bs * info.OutputBytes())
	if err != nil {
		return r, err
	}
	defer out.Free()
	host, err := dev.AllocHost(bs * info.InputBytes())
	if err != nil {
		return r, err
	}
	defer host.Free()
	fillInput(host.Bytes(), cfg.inputDType, cfg.src.Seed)
	s := inst.Stream()
	if err := s.CopyToDevice(in, 0, host.Bytes()); err != nil {
		return r, err
	}
	for i := 0; i < cfg.warmup; i++ {
		if err := inst.Forward(in, out, bs); err != nil {
			return r, err
		}
	}
	evs := make([]engine.Event, cfg.iters+1)
	for i := range evs {
		if evs[i], err = dev.NewEvent(); err != nil {
			return r, err
		}
		defer evs[i].Close()
	}
	// Back-to-back forwards keep the device busy; an event between each
	// pair splits the device time per forward.
	if err := s.Record(evs[0]); err != nil {
		return r, err
	}
	for i := 1; i <= cfg.iters; i++ {
		if err := inst.Forward(in, out, bs); err != nil {
			return r, err
		}
		if err := s.Record(evs[i]); err != nil {
			return r, err
		}
	}
	if err := s.Synchronize(); err != nil {
		return r, err
	}
	total, err := evs[cfg.iters].Since(evs[0])
	if err != nil {
		return r, err
	}
	per := make([]float64, cfg.iters)
	for i := 1; i <= cfg.iters; i++ {
		d, err := evs[i].Since(evs[i-1])
		if err != nil {
			return r, err
		}
		per[i-1] = d.Seconds() * 1e3
	}
	sort.Float64s(per)
	r.MsPerFwd = total.Seconds() * 1e3 / float64(cfg.iters)
	r.ImgPerSec = float64(bs*cfg.iters) / total.Seconds()
	r.P50 = quantile(per, 0.5)
	r.P90 = quantile(per, 0.9)
	if cfg.profile {
		if pr, ok := inst.(engine.Profiler); ok {
			if r.Layers, err = pr.ProfileLayers(bs, cfg.profileRuns()); err != nil {
				return r, err
			}
		}
	}
	return r, nil
}

// profileRuns is the forwards --profile measures over.
func (c computeConfig) profileRuns() int {
	if c.profileIters > 0 {
		return c.profileIters
	}
	return max(3, c.iters/10)
}

// quantile of sorted values, linear interpolation.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	pos := q * float64(len(sorted)-1)
	lo := int(pos)
	if lo+1 >= len(sorted) {
		return sorted[lo]
	}
	return sorted[lo] + (pos-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// fillInput writes seeded pseudo-random input: standard-normal-ish values
// for float dtypes, pixels for uint8.
func fillInput(b []byte, dt tensor.DType, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	switch dt {
	case tensor.Uint8:
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
	case tensor.Float16:
		for i := 0; i+1 < len(b); i += 2 {
			h := tensor.Float32ToF16(float32(r.NormFloat64()))
			b[i], b[i+1] = byte(h), byte(h>>8)
		}
	default:
		f := tensor.BytesF32(b)
		for i := range f {
			f[i] = float32(r.NormFloat64())
		}
	}
}

const mib = 1 << 20

// computeMarkdown renders the rows as the committed results table, with
// what was measured where and how.
func computeMarkdown(rows []computeRow, cfg computeConfig, argv []string) string {
	var b strings.Builder
	dev := "unknown device"
	if len(rows) > 0 {
		dev = rows[0].Device
	}
	fmt.Fprintf(&b, "## goinfer compute: %s\n\n", dev)
	fmt.Fprintf(&b, "- date: %s\n- command: `%s`\n- weights: %s\n- input: %s NCHW already on the device (conversion to the compute layout and dtype included in each forward); %d warm-up and %d timed forwards per cell\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), strings.Join(argv, " "), cfg.src, cfg.inputDType, cfg.warmup, cfg.iters)
	b.WriteString("| engine | precision | compile | image | batch | img/s | ms/forward | p50 ms | p90 ms | compile s | weights MiB | workspace MiB | activations MiB |\n")
	b.WriteString("|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %v | %d | %d | %.0f | %.3f | %.3f | %.3f | %.2f | %.1f | %.1f | %.1f |\n",
			r.Engine, r.Precision, r.Compiled, r.Image, r.Batch, r.ImgPerSec, r.MsPerFwd, r.P50, r.P90, r.CompileSec,
			float64(r.Weights)/mib, float64(r.Workspace)/mib, float64(r.Activations)/mib)
	}
	for _, r := range rows {
		if len(r.Layers) == 0 {
			continue
		}
		writeLayers(&b, r)
	}
	return b.String()
}

// writeLayers renders a cell's per-layer times, then the same summed by
// kind, largest first: the table to set beside another runtime's per-op
// profile.
func writeLayers(b *strings.Builder, r computeRow) {
	fmt.Fprintf(b, "\n### per-layer time: %s %s compile=%v %d batch %d\n\n", r.Engine, r.Precision, r.Compiled, r.Image, r.Batch)
	b.WriteString("| op | kind | algorithm | ms | share |\n|---|---|---|---:|---:|\n")
	var total time.Duration
	for _, l := range r.Layers {
		total += l.Time
	}
	share := func(d time.Duration) float64 { return 100 * d.Seconds() / total.Seconds() }
	for _, l := range r.Layers {
		fmt.Fprintf(b, "| %s | %s | %s | %.4f | %.1f%% |\n", l.Name, l.Kind, l.Algo, l.Time.Seconds()*1e3, share(l.Time))
	}
	fmt.Fprintf(b, "| total | | | %.4f | |\n", total.Seconds()*1e3)
	fmt.Fprintf(b, "\n### by kind: %s %s compile=%v %d batch %d\n\n", r.Engine, r.Precision, r.Compiled, r.Image, r.Batch)
	b.WriteString("| kind | layers | ms | share |\n|---|---:|---:|---:|\n")
	for _, k := range layersByKind(r.Layers) {
		fmt.Fprintf(b, "| %s | %d | %.4f | %.1f%% |\n", k.Kind, k.Count, k.Time.Seconds()*1e3, share(k.Time))
	}
}

// kindTime is the time of all layers of one kind.
type kindTime struct {
	Kind  string
	Count int
	Time  time.Duration
}

// layersByKind sums layers by kind, largest time first (ties by kind).
func layersByKind(layers []engine.LayerTime) []kindTime {
	idx := map[string]int{}
	var res []kindTime
	for _, l := range layers {
		i, ok := idx[l.Kind]
		if !ok {
			i = len(res)
			idx[l.Kind] = i
			res = append(res, kindTime{Kind: l.Kind})
		}
		res[i].Count++
		res[i].Time += l.Time
	}
	sort.Slice(res, func(i, j int) bool {
		if res[i].Time != res[j].Time {
			return res[i].Time > res[j].Time
		}
		return res[i].Kind < res[j].Kind
	})
	return res
}

// writeLayersCSV writes each row's per-layer times, one line a layer.
func writeLayersCSV(path string, rows []computeRow) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"engine", "precision", "compile", "image", "batch", "index", "name", "kind", "algorithm", "ms"})
	for _, r := range rows {
		for i, l := range r.Layers {
			w.Write([]string{r.Engine, r.Precision, strconv.FormatBool(r.Compiled), strconv.Itoa(r.Image), strconv.Itoa(r.Batch),
				strconv.Itoa(i), l.Name, l.Kind, l.Algo, fmt.Sprintf("%.5f", l.Time.Seconds()*1e3)})
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeComputeCSV(path string, rows []computeRow) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"engine", "device", "precision", "compile", "image", "batch", "img_per_s", "ms_per_forward", "p50_ms", "p90_ms", "load_s", "compile_s", "weights_bytes", "workspace_bytes", "activations_bytes"})
	for _, r := range rows {
		w.Write([]string{r.Engine, r.Device, r.Precision, strconv.FormatBool(r.Compiled), strconv.Itoa(r.Image), strconv.Itoa(r.Batch),
			fmt.Sprintf("%.1f", r.ImgPerSec), fmt.Sprintf("%.4f", r.MsPerFwd), fmt.Sprintf("%.4f", r.P50), fmt.Sprintf("%.4f", r.P90),
			fmt.Sprintf("%.3f", r.LoadSec), fmt.Sprintf("%.3f", r.CompileSec),
			strconv.FormatInt(r.Weights, 10), strconv.FormatInt(r.Workspace, 10), strconv.FormatInt(r.Activations, 10)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
