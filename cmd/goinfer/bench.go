package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	rtrace "runtime/trace"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"goinfer/internal/backend"
	"goinfer/internal/client"
	"goinfer/internal/cuda"
	"goinfer/internal/engine"
	_ "goinfer/internal/engine/cpu" // the engines bench can run
	"goinfer/internal/loadgen"
	"goinfer/internal/metrics"
	"goinfer/internal/preprocess"
	"goinfer/internal/tensor"
	"goinfer/internal/trace"
)

func init() {
	register(command{
		name:    "bench",
		summary: "the reference's inference-server benchmark: cold start, latency, throughput, GPU utilization",
		run:     runBench,
	})
}

// Defaults of the flags the cpu engine scales down (see benchHelp).
const (
	defaultNumIters  = 100
	defaultBatchSize = 32
	defaultImageSize = 250
	// The cpu engine's scaled-down workload: 21 requests of 4 images at
	// the reference's 250x250, ~85 images where the reference sends 3,232.
	cpuNumIters  = 20
	cpuBatchSize = 4
	// defaultNumWorkers was chosen by measurement on an H200 (results/
	// pipeline): compiled fp16 at batch 32, 1/2/3/4 workers gave 40.7k,
	// 46.2k, 52.8k and 50.5k img/s; at batch 256 all four were within 5% of
	// each other (68.5k-71.9k, bound by compute at 250x250). The
	// reference's README says 2, its code 4.
	defaultNumWorkers = 3
	// maxDefaultQueue caps the default queue depth (num_iters+1).
	maxDefaultQueue = 1 << 16
)

const benchHelp = `Usage: goinfer bench [flags]

Re-creates PyTorch's inference-server benchmark (benchmarks/inference/server.py)
in one Go process: a frontend generates all request tensors first, sends one
warmup request while the model loads in the background (its latency is the
cold start), then sends --num_iters requests of [batch_size, 3, image_size,
image_size]; the backend pipeline (H2D stage, --num_workers prediction workers
per device, D2H stage) answers them. It prints load and compile time, warmup
latency, latency mean +/- sample std, max, min, p50/p90/p99, throughput
(images / (last response - first send)), effective GFLOP/s and GPU
utilization and memory (sampled every 100 ms), and appends one row to
<results_dir>/<output_file> (created with a header; never rewritten; a file
with another header is refused). A run that is interrupted or has failed
requests writes no row.

The reference's flags keep their names and defaults, so
  goinfer bench --batch_size 32 --output_file x.csv --no-compile
works as 'python server.py ...' does.

Load modes: flood (default, the reference: all requests back to back),
--concurrency C (closed loop, C in flight) or --rate R (open loop, Poisson
arrivals at R requests/s; latency counts from each scheduled arrival).

On the cpu engine the reference's workload (3,232 images of 250x250 at
~2.4 GFLOP each) takes minutes, so when --engine resolves to cpu and
--num_iters / --batch_size are not given, bench uses --num_iters 20
--batch_size 4 instead and says so; flags given explicitly are always obeyed.

Flags:
`

// benchOptions are bench's flags.
type benchOptions struct {
	mf          modelFlags
	numIters    int
	batchSize   int
	numWorkers  int
	imageSize   int
	inputDType  string
	copyStreams bool
	devices     string
	concurrency int
	rate        float64
	queueDepth  int
	outputFile  string
	resultsDir  string
	experiment  string
	profile     bool
	profileFile string
	execTrace   string
	phases      bool
	pinInputs   bool
	url         string
	connections int
	sharedMem   string
	grpc        grpcFlags
	net         netFlags
	httpClient  string
	images      string // --images DIR
	topK        int
	set         map[string]bool // flags given on the command line
}

func (o *benchOptions) register(fs *flag.FlagSet) {
	fs.IntVar(&o.numIters, "num_iters", defaultNumIters, "requests to send after the warmup one")
	fs.IntVar(&o.batchSize, "batch_size", defaultBatchSize, "images per request")
	o.mf.register(fs, true)
	fs.StringVar(&o.outputFile, "output_file", "output.csv", "results CSV `FILE` in --results_dir (an absolute path is used as is); one row is appended per run")
	fs.IntVar(&o.numWorkers, "num_workers", defaultNumWorkers, "prediction workers per device, each with its own stream")
	fs.BoolVar(&o.profile, "profile", false, "write a Chrome trace (Perfetto, chrome://tracing) of every stage and device stream to --profile_file")
	fs.StringVar(&o.profileFile, "profile_file", "trace.json", "trace `FILE` for --profile")
	fs.BoolVar(&o.phases, "phases", false, "print how long each step of the cold start took (reading the model, device set-up, weight upload, tuning, capture) and when it ended, on stderr")
	fs.StringVar(&o.execTrace, "exec_trace", "", "write a Go execution trace (runtime/trace: goroutines, syscalls, network waits; `go tool trace FILE`) of the whole run to `FILE`")
	fs.IntVar(&o.imageSize, "image_size", defaultImageSize, "image height and width in `PIXELS`")
	fs.StringVar(&o.inputDType, "input_dtype", "fp32", "request `DTYPE`: fp32 (normal values), fp16 (normal values) or uint8 (raw pixels, normalized on the device)")
	fs.BoolVar(&o.copyStreams, "copy_streams", true, "run the H2D and D2H copies as their own stages on their own streams; --no-copy_streams copies on each worker's stream (the reference before its copy-stream change)")
	fs.StringVar(&o.devices, "devices", "", "comma-separated GPU `ORDINALS` to run one pipeline on each, requests going to whichever has room (default: --device)")
	fs.IntVar(&o.concurrency, "concurrency", 0, "closed loop: keep `C` requests in flight instead of flooding")
	fs.Float64Var(&o.rate, "rate", 0, "open loop: send `R` requests per second (Poisson arrivals) instead of flooding")
	fs.BoolVar(&o.pinInputs, "pin_inputs", true, "once the warmup is answered (untimed, so the cold start still includes creating the GPU context), move the request tensors into page-locked memory, as a server receiving into pinned buffers would, so the H2D stage copies them to the GPU directly; --no-pin_inputs keeps them in ordinary memory and the H2D stage stages each request through pinned buffers, as the reference's H2D thread does (one more host copy). No effect on the cpu engine")
	fs.IntVar(&o.queueDepth, "queue_depth", 0, "request queue capacity (0: num_iters+1, at most 65536, so that a flood is queued at once as in the reference)")
	fs.StringVar(&o.experiment, "experiment", "", "`NAME` written in the CSV row's experiment column (sweeps set it)")
	fs.StringVar(&o.resultsDir, "results_dir", "results", "`DIR` of the results CSV")
	fs.StringVar(&o.url, "url", "", "benchmark a running server instead: http://HOST:PORT or grpc://HOST:PORT (KServe v2; model flags are then unused)")
	fs.StringVar(&o.sharedMem, "shared_memory", "none", "with a --url on this host, how tensors travel (`MODE`): none, in the messages; system, through POSIX shared memory: request tensors generated in registered objects, logits back through one per request in flight (Triton's system shared memory extension, as perf_analyzer --shared-memory system; the server needs --allow_shared_memory)")
	o.grpc.register(fs, "client (with a grpc:// --url)")
	o.net.register(fs, "client (with a --url)")
	fs.StringVar(&o.httpClient, "http_client", client.HTTPLean, "with an http:// --url, the `CLIENT` inference requests go through: lean (persistent HTTP/1.1 connections, each request written in one system call) or nethttp (Go's net/http)")
	o.registerImages(fs)
	fs.IntVar(&o.connections, "connections", 0, "with a grpc:// --url: TCP connections to spread requests over (0: one per 4 requests in flight, 1 to 16)")
}

// check validates the flag values; its errors are usage errors.
func (o *benchOptions) check() error {
	switch {
	case o.numIters < 1:
		return fmt.Errorf("--num_iters %d: must be at least 1", o.numIters)
	case o.batchSize < 1:
		return fmt.Errorf("--batch_size %d: must be at least 1", o.batchSize)
	case o.numWorkers < 1:
		return fmt.Errorf("--num_workers %d: must be at least 1", o.numWorkers)
	case o.imageSize < 1:
		return fmt.Errorf("--image_size %d: must be positive", o.imageSize)
	case o.connections < 0:
		return fmt.Errorf("--connections %d: must not be negative", o.connections)
	case o.concurrency < 0:
		return fmt.Errorf("--concurrency %d: must be positive", o.concurrency)
	case o.rate < 0 || math.IsNaN(o.rate) || math.IsInf(o.rate, 0):
		return fmt.Errorf("--rate %v: must be a positive number of requests per second", o.rate)
	case o.concurrency > 0 && o.rate > 0:
		return errors.New("--concurrency and --rate are mutually exclusive: pick a closed loop or an open loop")
	case o.queueDepth < 0:
		return fmt.Errorf("--queue_depth %d: must not be negative", o.queueDepth)
	case o.outputFile == "":
		return errors.New("--output_file is empty")
	case o.profile && o.profileFile == "":
		return errors.New("--profile_file is empty")
	case o.set["devices"] && o.set["device"]:
		return errors.New("--device and --devices are mutually exclusive")
	case o.sharedMem != "none" && o.sharedMem != "system":
		return fmt.Errorf("--shared_memory %q: want none or system", o.sharedMem)
	case o.httpClient != client.HTTPLean && o.httpClient != client.HTTPNetHTTP:
		return fmt.Errorf("--http_client %q: want %s or %s", o.httpClient, client.HTTPLean, client.HTTPNetHTTP)
	case o.sharedMem == "system" && o.url == "":
		return errors.New("--shared_memory system needs --url: shared memory is how a client passes tensors to a server on its host")
	}
	if err := o.net.check(); err != nil {
		return err
	}
	if err := o.grpc.check(); err != nil {
		return err
	}
	if err := o.checkImages(); err != nil {
		return err
	}
	if _, err := o.deviceList(); err != nil {
		return err
	}
	if _, err := parseInputDType(o.inputDType); err != nil {
		return err
	}
	return nil
}

// deviceList is --devices, or --device alone.
func (o *benchOptions) deviceList() ([]int, error) {
	if o.devices == "" {
		return []int{o.mf.device}, nil
	}
	var out []int
	seen := map[int]bool{}
	for _, f := range strings.Split(o.devices, ",") {
		d, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("--devices %q: %q is not a GPU ordinal", o.devices, f)
		}
		if seen[d] {
			return nil, fmt.Errorf("--devices %q: device %d given twice", o.devices, d)
		}
		seen[d] = true
		out = append(out, d)
	}
	return out, nil
}

func (o *benchOptions) loadConfig() loadgen.Config {
	c := loadgen.Config{NumIters: o.numIters, Seed: o.mf.seed}
	switch {
	case o.concurrency > 0:
		c.Mode, c.Concurrency = loadgen.Concurrency, o.concurrency
	case o.rate > 0:
		c.Mode, c.Rate = loadgen.Rate, o.rate
	}
	return c
}

// resultsPath is where the CSV row goes.
func (o *benchOptions) resultsPath() string {
	if filepath.IsAbs(o.outputFile) {
		return o.outputFile
	}
	return filepath.Join(o.resultsDir, o.outputFile)
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o benchOptions
	fs := newFlagSet("bench", "bench [flags]", stderr)
	o.register(fs)
	set, err := parseWithHelp(fs, benchHelp, args)
	if err != nil {
		return err
	}
	o.set = set
	if err := o.check(); err != nil {
		fmt.Fprintf(stderr, "goinfer bench: %v\n", err)
		return errUsage
	}

	if o.phases {
		engine.ReportPhases(os.Stderr)
	}
	if o.execTrace != "" {
		stop, err := startExecTrace(o.execTrace)
		if err != nil {
			return err
		}
		defer stop()
	}
	if o.url != "" && o.images != "" {
		return runRemoteImageBench(ctx, &o, stdout, stderr)
	}
	if o.url != "" {
		return runRemoteBench(ctx, &o, stdout, stderr)
	}
	src, err := o.mf.resolve(ctx, stderr)
	if err != nil {
		return err
	}
	eng, prec, err := o.mf.selectEngine(stderr, src)
	if err != nil {
		return err
	}
	if eng.Name() == "cpu" {
		o.scaleForCPU(stderr)
	}
	devices, _ := o.deviceList()
	dtype, _ := parseInputDType(o.inputDType)
	prog := newProgress(stderr)

	// A general graph is read before the inputs are made, since its input
	// shape is its own; the time counts in the cold start's load time. The
	// ResNet graph is read by whichever device loader gets there first,
	// while the warmup request waits, as the reference does.
	var pre netGraph
	channels := 3
	if src.general() {
		if pre, err = readNetGraph(ctx, src, o.imageSize); err != nil {
			return err
		}
		h, w := pre.inputSize(o.imageSize, o.imageSize)
		if h != w {
			return fmt.Errorf("the model takes %dx%d images; bench sends square ones", h, w)
		}
		if h != o.imageSize && o.set["image_size"] {
			return fmt.Errorf("--image_size %d: the model takes %dx%d images", o.imageSize, h, w)
		}
		o.imageSize = h
		if channels, err = pre.channels(); err != nil {
			return err
		}
	}
	shape := loadgen.Shape{BatchSize: o.batchSize, Channels: channels, Height: o.imageSize, Width: o.imageSize, DType: dtype, Seed: o.mf.seed}
	var inputs *loadgen.Inputs
	var images map[*tensor.Tensor][][]byte // --images: each request's encoded images
	if o.images != "" {
		files, err := readImageDir(o.images)
		if err != nil {
			return err
		}
		inputs, images = imageBatches(files, o.batchSize, o.numIters, o.imageSize)
		prog.line("%d image files from %s in %d distinct batches of %d, decoded to %dx%d in the pipeline", len(files), o.images, len(inputs.Tensors), o.batchSize, o.imageSize, o.imageSize)
	}

	graph := sync.OnceValues(func() (*netGraph, error) {
		if src.general() {
			return &pre, nil
		}
		g, err := readNetGraph(ctx, src, o.imageSize)
		return &g, err
	})
	var macs int64
	loads := make([]backend.LoadFunc, len(devices))
	for i, d := range devices {
		opts := engine.Options{Compile: o.mf.compile, Precision: prec, MaxBatch: o.batchSize, BatchSizes: []int{o.batchSize},
			Height: o.imageSize, Width: o.imageSize, InputDType: dtype, Device: d, Threads: o.mf.threads, SplitBatch: o.mf.splitBatch, TuningCache: o.mf.tuneCache, GraphExperiments: o.mf.experiments,
			Progress: func(format string, args ...any) { prog.line(format, args...) }}
		loads[i] = func(ctx context.Context) (engine.Model, error) {
			ph := engine.StartPhases(fmt.Sprintf("bench loader %d", i))
			// The device's context and library handles need no model:
			// made while the graph is read or built.
			if p, ok := eng.(engine.Preparer); ok {
				p.Prepare(d)
			}
			held, err := graph()
			if err != nil {
				return nil, err
			}
			g := *held
			owned := len(devices) == 1 && g.resnet != nil
			if owned {
				// This load is the graph's only reader: compiling may
				// fold the batch norms into its weights in place.
				g.resnet.Owned = true
			}
			ph.Done("model graph")
			if i == 0 {
				if macs, err = g.macs(o.imageSize, o.imageSize); err != nil {
					return nil, err
				}
			}
			m, err := g.load(ctx, eng, opts)
			if err == nil && owned {
				// The graph (the weights as read, and what building and
				// calibrating them left) is garbage once loaded: collected
				// now, its pages take the pipeline's buffers that come
				// next, where fresh pages would cost a fault each.
				*held, g = netGraph{}, netGraph{}
				runtime.GC()
			}
			return m, err
		}
	}
	queue := o.queueDepth
	if queue == 0 {
		queue = min(o.numIters+1, maxDefaultQueue)
	}
	bcfg := backend.Config{NumWorkers: o.numWorkers, QueueDepth: queue, CopyStreams: o.copyStreams,
		MaxBatch: o.batchSize, Profile: o.profile}
	if images != nil {
		var spec *preprocess.Spec
		if pre.general != nil {
			spec = pre.general.Preprocess
		}
		if bcfg.NewDecoder, err = benchDecoders(&o, eng.Name(), devices, spec); err != nil {
			return err
		}
		bcfg.NewPostprocessor = benchPostprocessors(eng.Name(), devices)
	}
	b := backend.New(bcfg)
	loadStart := time.Now()
	if err := b.StartDevices(ctx, loads...); err != nil {
		return err
	}
	generated := inputs == nil
	if generated {
		// Made while the model loads, as the reference's frontend makes
		// its requests while its backend loads: the load's sequential
		// stretches (drawing seeded weights) leave cores free.
		prog.line("generating the request tensors: %d x %s[%d %d %d %d] (%s each)", o.numIters+1, dtype, o.batchSize, channels, o.imageSize, o.imageSize, mibString(shape.Bytes()))
		if inputs, err = loadgen.Generate(ctx, shape, o.numIters+1); err != nil {
			stop, cancel := context.WithCancel(context.Background())
			cancel()
			return errors.Join(err, b.Close(stop))
		}
	}
	// Freed after benchTarget has stopped the backend, which reads them.
	defer func() {
		if err := inputs.Close(); err != nil {
			fmt.Fprintf(stderr, "goinfer bench: freeing the request tensors: %v\n", err)
		}
	}()
	lt := &localTarget{b: b, macs: &macs, read: pre.read}
	var t target = lt
	if images != nil {
		t = &localImageTarget{localTarget: lt, batches: images, dtype: dtype, shape: tensor.Shape{o.batchSize, channels, o.imageSize, o.imageSize}, k: o.topK}
	}
	lcfg := o.loadConfig()
	if generated {
		lcfg.ColdStart = loadStart
	}
	if o.pinInputs && eng.Name() != "cpu" && images == nil {
		lcfg.PinAfterWarmup = b.AllocHost
	}
	lcfg.KeepResponses = o.profile
	probe, window, closeProbe := gpuSource(eng.Name(), devices, stderr)
	defer closeProbe()
	lcfg.Probe, lcfg.UtilWindow = probe, window
	return benchTarget(ctx, t, inputs, lcfg, &o, src, stdout, stderr, prog)
}

// scaleForCPU replaces the reference's defaults, which take minutes on a
// CPU, with a workload of seconds, unless they were given explicitly.
func (o *benchOptions) scaleForCPU(stderr io.Writer) {
	var changed []string
	if !o.set["num_iters"] {
		o.numIters = cpuNumIters
		changed = append(changed, fmt.Sprintf("--num_iters %d", cpuNumIters))
	}
	if !o.set["batch_size"] {
		o.batchSize = cpuBatchSize
		changed = append(changed, fmt.Sprintf("--batch_size %d", cpuBatchSize))
	}
	if len(changed) > 0 {
		fmt.Fprintf(stderr, "cpu engine: using %s instead of the reference's GPU-sized defaults (%d x %d images); give the flags to override\n",
			strings.Join(changed, " "), defaultNumIters, defaultBatchSize)
	}
}

// target is what bench measures: the in-process pipeline, or a remote
// server reached through a client that implements backend.Submitter.
type target interface {
	backend.Submitter
	// describe returns the model's description, the load and compile time
	// of the cold start, the number of devices and the MACs of one image,
	// once the warmup has been answered; unknown values are zero.
	describe() (info engine.Info, load, compile time.Duration, devices int, macs int64)
	// addTrace adds the target's side of the run to a --profile trace.
	addTrace(tr *trace.Trace, resps []backend.Response)
	// close stops the target: drain, or cancel when ctx is done.
	close(ctx context.Context) error
}

// localTarget is the in-process backend.
type localTarget struct {
	b    *backend.Backend
	macs *int64 // set by the first loader
	// read is the time spent reading a general graph before the devices
	// started loading it: part of the cold start's load time.
	read time.Duration
}

func (t *localTarget) Submit(r backend.Request) error { return t.b.Submit(r) }

func (t *localTarget) describe() (engine.Info, time.Duration, time.Duration, int, int64) {
	devs := t.b.Devices()
	if len(devs) == 0 {
		return engine.Info{}, 0, 0, 0, 0
	}
	// Devices load concurrently: the cold start is the slowest one's.
	var load, compile time.Duration
	for _, d := range devs {
		total := d.Load + d.Setup
		if total > load+compile {
			compile = d.Info.CompileTime
			load = total - compile
		}
	}
	info := devs[0].Info
	if len(devs) > 1 {
		info.Device = fmt.Sprintf("%d x %s", len(devs), info.Device)
	}
	return info, load + t.read, compile, len(devs), *t.macs
}

func (t *localTarget) addTrace(tr *trace.Trace, resps []backend.Response) { t.b.AddTrace(tr, resps) }

func (t *localTarget) close(ctx context.Context) error { return t.b.Close(ctx) }

// benchTarget runs the warmup and the timed requests against t, prints the
// summary and appends the CSV row.
func benchTarget(ctx context.Context, t target, inputs *loadgen.Inputs, lcfg loadgen.Config, o *benchOptions, src source,
	stdout, stderr io.Writer, prog *progress) (err error) {
	defer func() {
		// Drain on success; on failure or Ctrl-C, cancel what is left.
		cctx := context.Background()
		if err != nil {
			c, cancel := context.WithCancel(cctx)
			cancel()
			cctx = c
		}
		if cerr := t.close(cctx); err == nil && cerr != nil {
			err = cerr
		} else if err != nil && cerr != nil && !errors.Is(cerr, context.Canceled) {
			fmt.Fprintf(stderr, "goinfer bench: while stopping: %v\n", cerr)
		}
	}()

	prog.line("warmup: 1 request of %d images, the model loading meanwhile", o.batchSize)
	ph := engine.StartPhases("bench")
	lcfg.Warmed = func(d time.Duration) {
		ph.Done("warmup answered")
		prog.line("warmup answered in %.3f s; sending %d requests (%s)", d.Seconds(), lcfg.NumIters, lcfg.ModeString())
	}
	lcfg.Progress = prog.count
	res, err := loadgen.Run(ctx, t, inputs, lcfg)
	prog.done()
	if err != nil {
		return err
	}
	info, load, compile, ndev, macs := t.describe()

	row := metrics.Row{
		BatchSize: o.batchSize, Compile: o.mf.compile,
		LoadTime: load.Seconds(), CompileTime: compile.Seconds(),
		WarmupLatency: res.Warmup, AverageLatency: res.Stats.Mean,
		MaxLatency: res.Stats.Max, MinLatency: res.Stats.Min,
		Throughput: res.Throughput, GPUUtil: res.GPU.MeanUtil,
		Experiment: o.experiment, Engine: info.Engine, Device: info.Device, Arch: info.Arch,
		Precision: info.Precision.String(), InputDType: inputDTypeName(inputs.Shape.DType),
		NumWorkers: o.numWorkers, CopyStreams: o.copyStreams, NumDevices: ndev,
		ImageSize: o.imageSize, NumIters: o.numIters, Mode: lcfg.ModeString(),
		StdLatency: res.Stats.Std, P50Latency: res.Stats.P50, P90Latency: res.Stats.P90, P99Latency: res.Stats.P99,
		GFLOPS: math.NaN(), GPUMemPeak: res.GPU.PeakMemMiB,
		Seed: o.mf.seed, Timestamp: time.Now().UTC().Format(time.RFC3339),
	}
	if macs > 0 {
		row.GFLOPS = metrics.GFLOPS(macs, res.Throughput)
	}
	if o.images != "" {
		row.InputDType = "encoded" // JPEG/PNG bytes, decoded by the server
	}
	printSummary(stdout, row, res, info, src)

	if o.profile {
		tr := trace.New()
		t.addTrace(tr, res.Responses)
		if err := tr.WriteFile(o.profileFile); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Trace: %s (open it in https://ui.perfetto.dev or chrome://tracing)\n", o.profileFile)
	}
	if res.Errors > 0 {
		return fmt.Errorf("%d of %d requests failed (first: %w); no row written to %s", res.Errors, o.numIters, res.FirstError, o.resultsPath())
	}
	if err := metrics.AppendRow(o.resultsPath(), row); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Results appended to %s\n", o.resultsPath())
	return nil
}

// printSummary prints the run the way the reference does, with goinfer's
// additions.
func printSummary(w io.Writer, r metrics.Row, res *loadgen.Result, info engine.Info, src source) {
	compiled := "eager"
	if r.Compile {
		compiled = "compiled"
	}
	where := info.Device
	if !strings.HasPrefix(where, info.Engine) {
		where = info.Engine + " engine on " + where
	}
	fmt.Fprintf(w, "Model: %s from %s; %s, %s, %s input\n", info.Arch, src, where, info.Precision, r.InputDType)
	fmt.Fprintf(w, "Run: %d requests of %d x 3 x %d x %d (%s), %d worker(s) per device, copy streams %v, %s\n",
		r.NumIters, r.BatchSize, r.ImageSize, r.ImageSize, r.Mode, r.NumWorkers, r.CopyStreams, compiled)
	fmt.Fprintf(w, "Load time: %.5f s\n", r.LoadTime)
	fmt.Fprintf(w, "Compile time: %.5f s\n", r.CompileTime)
	fmt.Fprintf(w, "Warmup latency: %.5f s\n", r.WarmupLatency)
	fmt.Fprintf(w, "Average latency (exclude warmup): %.5f +/- %s s\n", r.AverageLatency, orNA("%.5f", r.StdLatency))
	fmt.Fprintf(w, "Max latency: %.5f s\n", r.MaxLatency)
	fmt.Fprintf(w, "Min latency: %.5f s\n", r.MinLatency)
	fmt.Fprintf(w, "p50 / p90 / p99 latency: %.5f / %.5f / %.5f s\n", r.P50Latency, r.P90Latency, r.P99Latency)
	fmt.Fprintf(w, "Throughput (exclude warmup): %.5f samples per second\n", r.Throughput)
	if len(res.Devices) > 1 {
		for _, d := range res.Devices {
			fmt.Fprintf(w, "  device %d: %d requests, %.5f samples per second\n", d.Device, d.Requests, d.Throughput)
		}
	}
	fmt.Fprintf(w, "Effective compute: %s GFLOP/s\n", orNA("%.1f", r.GFLOPS))
	fmt.Fprintf(w, "Average GPU utilization: %s\n", orNA("%.5f", r.GPUUtil))
	fmt.Fprintf(w, "Peak GPU memory: %s\n", orNA("%.0f MiB", r.GPUMemPeak))
	if res.Errors > 0 {
		fmt.Fprintf(w, "Errors: %d of %d requests (first: %v)\n", res.Errors, r.NumIters, res.FirstError)
	}
}

func orNA(format string, v float64) string {
	if math.IsNaN(v) {
		return "N/A"
	}
	return fmt.Sprintf(format, v)
}

func mibString(n int) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// gpuSource picks the GPU sampler's data sources: none on the cpu engine;
// else NVML (a library call per sample), else nvidia-smi (a process per
// sample, as the reference). On NVML the run's utilization comes from the
// driver's sample buffer read after the run (window is nil otherwise):
// polled, NVML reports its last sample period, up to a second, and a run
// shorter than that would read mostly the idle time before it. Devices are
// CUDA ordinals used as NVML and nvidia-smi indices, as the reference's
// "nvidia-smi --id=0" does; they agree unless CUDA_VISIBLE_DEVICES or
// CUDA_DEVICE_ORDER reorder the GPUs. Without a source the figures are N/A.
// The returned func releases it.
func gpuSource(engineName string, devices []int, stderr io.Writer) (probe metrics.Probe, window metrics.WindowUtil, release func()) {
	if engineName == "cpu" {
		return nil, nil, func() {}
	}
	if nv, err := cuda.OpenNVML(); err == nil {
		probes := make([]metrics.Probe, len(devices))
		histories := make([]metrics.UtilHistory, len(devices))
		for i, d := range devices {
			probes[i] = func(context.Context) (metrics.GPUSample, error) {
				util, _, err := nv.Utilization(d)
				if err != nil {
					return metrics.GPUSample{}, err
				}
				used, _, err := nv.Memory(d)
				if err != nil {
					return metrics.GPUSample{}, err
				}
				return metrics.GPUSample{Util: float64(util), MemMiB: float64(used) / (1 << 20)}, nil
			}
			histories[i] = func(since time.Time) ([]metrics.UtilSample, error) {
				s, err := nv.UtilizationSamples(d, since)
				if err != nil {
					return nil, err
				}
				out := make([]metrics.UtilSample, len(s))
				for j, x := range s {
					out[j] = metrics.UtilSample{At: x.At, Percent: x.Percent}
				}
				return out, nil
			}
		}
		// The reading holding the run's last moments comes at most a sample
		// period later; a little more for the driver to publish it.
		const settle = metrics.MaxSamplePeriod + 250*time.Millisecond
		return metrics.MultiProbe(probes...), metrics.HistoryWindow(settle, histories...), func() { nv.Close() }
	}
	p, err := metrics.NvidiaSMIProbe(devices)
	if err != nil {
		fmt.Fprintf(stderr, "GPU utilization will be N/A: neither NVML nor %v\n", err)
		return nil, nil, func() {}
	}
	return p, nil, func() {}
}

// progress reports long phases on stderr: one line per phase, and on a
// terminal a live request counter redrawn at most ten times a second.
type progress struct {
	w    io.Writer
	tty  bool
	mu   sync.Mutex
	last time.Time
	live bool // a counter is on the current line
}

func newProgress(w io.Writer) *progress {
	f, ok := w.(*os.File)
	return &progress{w: w, tty: ok && term.IsTerminal(int(f.Fd()))}
}

func (p *progress) line(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	fmt.Fprintf(p.w, format+"\n", args...)
}

func (p *progress) count(done, total int) {
	if !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); done == total || now.Sub(p.last) >= 100*time.Millisecond {
		p.last = now
		fmt.Fprintf(p.w, "\r  %d/%d responses", done, total)
		p.live = true
	}
}

func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
}

func (p *progress) clear() {
	if p.live {
		fmt.Fprint(p.w, "\r\033[K")
		p.live = false
	}
}

// inputDTypeName is the CSV spelling of a request dtype.
func inputDTypeName(dt tensor.DType) string {
	switch dt {
	case tensor.Float16:
		return "fp16"
	case tensor.Uint8:
		return "uint8"
	}
	return "fp32"
}

// startExecTrace starts a Go execution trace into path; stop ends it.
func startExecTrace(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--exec_trace: %w", err)
	}
	if err := rtrace.Start(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--exec_trace: %w", err)
	}
	return func() {
		rtrace.Stop()
		f.Close()
	}, nil
}
