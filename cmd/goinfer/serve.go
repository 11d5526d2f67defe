package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"goinfer/internal/backend"
	"goinfer/internal/cuda"
	"goinfer/internal/engine"
	_ "goinfer/internal/engine/cpu" // the engines serve can run
	classlabels "goinfer/internal/labels"
	"goinfer/internal/preprocess"
	"goinfer/internal/server"
	"goinfer/internal/server/batcher"
	"goinfer/internal/tensor"
)

func init() {
	register(command{
		name:    "serve",
		summary: "serve the model over KServe v2 (HTTP and gRPC) with dynamic batching",
		run:     runServe,
	})
}

const serveHelp = `Usage: goinfer serve [flags]

Serves the model over the KServe v2 / Open Inference Protocol: HTTP/REST on
--http (JSON, the binary tensor data extension, the classification extension)
and gRPC on --grpc (inference.GRPCInferenceService with server reflection and
grpc.health.v1), with Prometheus metrics at http://<--http>/metrics.

The server listens at once and loads in the background: /v2/health/live
answers 200 immediately, /v2/health/ready only once the model is loaded and
compiled for every --image_size and batch size.

Requests of the same image size are merged into batches of up to
--max_batch_size images: a batch goes when it is full, when its oldest
request has waited --max_queue_delay, or at once when the device is idle
(--dispatch_when_idle). At most --max_queue images wait; beyond that requests
are refused at once (HTTP 503 with Retry-After, gRPC RESOURCE_EXHAUSTED).

Request memory is bounded: a request takes the bytes it declares from
--max_inflight_bytes before its body is read (503 + Retry-After when they are
spent), bodies are read as they arrive, and a body still arriving after
--read_timeout is cut off with 408. At most --max_connections are open on
each listener.

SIGINT or SIGTERM make the server not ready and answer new HTTP requests
503 with Connection: close for --drain_grace (gRPC clients get GOAWAY), then
stop accepting, let the requests in flight finish within --drain_timeout,
and exit 0.

Examples:
  goinfer serve --checkpoint resnet18-f37072fd.pth
  goinfer serve --engine cpu --max_batch_size 8 --image_size 224 --log_format json

Flags:
`

// serveOptions are serve's flags.
type serveOptions struct {
	mf               modelFlags
	modelName        string
	httpAddr         string
	grpcAddr         string
	numWorkers       int
	devices          string
	copyStreams      bool
	imageSizes       string
	inputDType       string
	maxBatch         int
	batchSizes       string
	padBatches       bool
	maxQueueDelay    time.Duration
	dispatchWhenIdle bool
	breakdown        bool
	maxQueue         int
	maxInflight      int
	maxRequestBytes  int64
	maxInflightBytes int64
	requestTimeout   time.Duration
	drainTimeout     time.Duration
	drainGrace       time.Duration
	readHeaderTO     time.Duration
	readTO           time.Duration
	idleTO           time.Duration
	maxConns         int
	grpcMaxStreams   uint
	httpTransport    string
	labels           string
	logFormat        string
	logLevel         string
	pprofAddr        string
	pinnedPoolBytes  int64
	allowShm         bool
	grpc             grpcFlags
	net              netFlags
	images           bool
	imageCrop        int
	maxImages        int
	maxImagePixels   int
	decodeWorkers    int
	imageDecoder     string
	set              map[string]bool
}

// Defaults of serve's batching flags; on the cpu engine a smaller batch
// keeps each forward in the tens of milliseconds.
const (
	defaultServeMaxBatch = 64
	cpuServeMaxBatch     = 8
)

func (o *serveOptions) register(fs *flag.FlagSet) {
	o.mf.register(fs, true)
	fs.StringVar(&o.modelName, "model_name", "", "`NAME` the model is served as (default: the checkpoint's file name without extension and hash suffix, e.g. resnet18; the architecture for random weights)")
	fs.StringVar(&o.httpAddr, "http", "127.0.0.1:8000", "HTTP/REST listen `ADDR` (empty: no HTTP)")
	fs.StringVar(&o.grpcAddr, "grpc", "127.0.0.1:8001", "gRPC listen `ADDR` (empty: no gRPC)")
	fs.IntVar(&o.numWorkers, "num_workers", defaultNumWorkers, "prediction workers per device, each with its own stream")
	fs.StringVar(&o.devices, "devices", "", "comma-separated GPU `ORDINALS` to run one pipeline on each (default: --device)")
	fs.BoolVar(&o.copyStreams, "copy_streams", true, "run the H2D and D2H copies on their own streams")
	fs.StringVar(&o.imageSizes, "image_size", strconv.Itoa(defaultImageSize), "image height and width in `PIXELS` the model is compiled for; a comma-separated list serves several sizes (requests of other sizes are refused)")
	fs.StringVar(&o.inputDType, "input_dtype", "fp32", "`DTYPE` the engine takes: fp32, fp16 or uint8; requests may send FP32, FP16 or UINT8 pixels whatever it is (converted while batched), except FP32/FP16 into a uint8 engine")
	fs.IntVar(&o.maxBatch, "max_batch_size", defaultServeMaxBatch, fmt.Sprintf("largest batch run on the device, in images (default %d on cpu); larger requests are split", cpuServeMaxBatch))
	fs.StringVar(&o.batchSizes, "batch_sizes", "auto", "batch `SIZES` to compile (autotune, capture CUDA graphs), comma-separated; auto: powers of two up to --max_batch_size, and it")
	fs.BoolVar(&o.padBatches, "pad_batches", true, "pad a batch up to the next compiled size when the engine runs compiled sizes faster (cuda with --compile)")
	fs.DurationVar(&o.maxQueueDelay, "max_queue_delay", 2*time.Millisecond, "longest a request waits for others to share its batch")
	fs.BoolVar(&o.dispatchWhenIdle, "dispatch_when_idle", true, "send a partial batch at once when no batch is on the device, instead of waiting --max_queue_delay")
	fs.BoolVar(&o.breakdown, "latency_breakdown", false, "record when each inference request passes each step (arrival, body read, batch formed, device copy and forward, logits back, answer) and serve the medians per step at GET /debug/latency on the HTTP port (?reset=1 clears them)")
	fs.IntVar(&o.maxQueue, "max_queue", 256, "images that may wait for a batch; beyond it requests are refused with 503 / RESOURCE_EXHAUSTED")
	fs.IntVar(&o.maxInflight, "max_inflight_batches", 0, "batches submitted to the pipeline and not yet answered (0: enough to fill every device's pipeline)")
	fs.Int64Var(&o.maxRequestBytes, "max_request_bytes", 256<<20, "largest request body or gRPC message in `BYTES`; larger ones get 413 / RESOURCE_EXHAUSTED")
	fs.Int64Var(&o.maxInflightBytes, "max_inflight_bytes", 0, "bytes that all requests in flight may hold together; a request takes what it declares before its body is read, and is refused with 503 + Retry-After / RESOURCE_EXHAUSTED when it does not fit; a quarter is kept for requests of up to 8 MiB (0: 2 x --max_request_bytes)")
	fs.DurationVar(&o.readHeaderTO, "read_header_timeout", 10*time.Second, "how long a client may take to send an HTTP request's headers")
	fs.DurationVar(&o.readTO, "read_timeout", time.Minute, "how long a client may take to send a whole HTTP request, body included, or a gRPC inference message; a body still arriving then is cut off with 408, a gRPC message with CANCELED")
	fs.DurationVar(&o.idleTO, "idle_timeout", 2*time.Minute, "how long an HTTP keep-alive connection may wait for its next request")
	fs.StringVar(&o.httpTransport, "http_transport", server.HTTPTransportFast, "`TRANSPORT` of the HTTP port: fast (inference requests on goinfer's own HTTP/1.1 loop, which answers with one write and starts no goroutine per request; every other request, and any connection after one, through net/http) or nethttp (net/http for everything)")
	fs.IntVar(&o.maxConns, "max_connections", 1024, "connections open at once on each of --http and --grpc; further clients wait in the kernel's accept backlog")
	fs.UintVar(&o.grpcMaxStreams, "grpc_max_concurrent_streams", 256, "RPCs one gRPC connection may have open at once")
	fs.BoolVar(&o.allowShm, "allow_shared_memory", false, "let clients on this host register POSIX shared memory regions and pass tensors through them (Triton's system shared memory extension; Linux); off by default, since the server then maps any object the client names that its user can open")
	fs.Int64Var(&o.pinnedPoolBytes, "pinned_memory_pool_bytes", 256<<20, "page-locked host memory in `BYTES` that request tensors are received into, so that they reach the GPU without a host copy (cuda engine; 0: none)")
	fs.DurationVar(&o.requestTimeout, "request_timeout", 0, "bound on each inference request, queueing included (0: only the client's deadline)")
	fs.DurationVar(&o.drainTimeout, "drain_timeout", 30*time.Second, "how long SIGTERM waits for the requests in flight, --drain_grace included")
	fs.DurationVar(&o.drainGrace, "drain_grace", time.Second, "after SIGTERM, how long HTTP connections stay open answering 503 with Connection: close (readiness false; gRPC gets GOAWAY at once) before they are closed")
	fs.StringVar(&o.labels, "labels", "", "class names `FILE` for classification results (JSON list, imagenet_class_index.json, or one name per line)")
	fs.BoolVar(&o.images, "images", true, "accept encoded images (JPEG, PNG) in the BYTES input \"image\", decoded and preprocessed on the host (ImageNet's eval transform scaled to --image_crop) and batched with tensor requests of that size")
	fs.IntVar(&o.imageCrop, "image_crop", 0, "served image size in `PIXELS` that encoded images are center-cropped to (0: 224 where served, else the largest --image_size)")
	fs.IntVar(&o.maxImages, "max_images", server.DefaultMaxImages, "most encoded images one request may send")
	fs.IntVar(&o.maxImagePixels, "max_image_pixels", 40<<20, "largest image accepted, in `PIXELS` (width x height), checked on its header before decoding")
	fs.IntVar(&o.decodeWorkers, "decode_workers", 0, "images decoded at once on the host over all requests (0: GOMAXPROCS)")
	fs.StringVar(&o.imageDecoder, "image_decoder", "auto", "where encoded images are decoded and preprocessed (`WHERE`): cpu (Go, on the host, into request tensors), gpu (nvJPEG and a resize kernel in each GPU pipeline's copy stage, straight into the batch's device input, overlapping other batches' forwards), or auto (gpu on the cuda engine when nvJPEG loads and the input is fp32/fp16, else cpu)")
	fs.StringVar(&o.logFormat, "log_format", "text", "log format: text or json")
	fs.StringVar(&o.logLevel, "log_level", "info", "log level: debug, info, warn or error")
	o.grpc.register(fs, "server")
	o.net.register(fs, "server")
	fs.StringVar(&o.pprofAddr, "pprof", "", "serve Go's profiling endpoints (/debug/pprof/) on `ADDR`, e.g. 127.0.0.1:6060 (empty: off); never expose it publicly")
}

// modelNameRE is what a model name may look like: it appears in URL paths.
var modelNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// servePlan is the validated configuration.
type servePlan struct {
	sizes      []int
	devices    []int
	dtype      string
	batchSizes []int // compiled sizes, ascending, last = max batch
	imageCrop  int   // the size encoded images are preprocessed to
}

func (o *serveOptions) check() (servePlan, error) {
	var p servePlan
	switch {
	case o.httpAddr == "" && o.grpcAddr == "":
		return p, errors.New("--http and --grpc are both empty: nothing to serve on")
	case o.numWorkers < 1:
		return p, fmt.Errorf("--num_workers %d: must be at least 1", o.numWorkers)
	case o.maxBatch < 1:
		return p, fmt.Errorf("--max_batch_size %d: must be at least 1", o.maxBatch)
	case o.maxQueueDelay < 0:
		return p, fmt.Errorf("--max_queue_delay %v: must not be negative", o.maxQueueDelay)
	case o.maxQueue < 1:
		return p, fmt.Errorf("--max_queue %d: must be at least 1", o.maxQueue)
	case o.maxInflight < 0:
		return p, fmt.Errorf("--max_inflight_batches %d: must not be negative", o.maxInflight)
	case o.maxRequestBytes < 1:
		return p, fmt.Errorf("--max_request_bytes %d: must be positive", o.maxRequestBytes)
	case o.pinnedPoolBytes < 0:
		return p, fmt.Errorf("--pinned_memory_pool_bytes %d: must not be negative", o.pinnedPoolBytes)
	case o.requestTimeout < 0:
		return p, fmt.Errorf("--request_timeout %v: must not be negative", o.requestTimeout)
	case o.maxImages < 1:
		return p, fmt.Errorf("--max_images %d: must be at least 1", o.maxImages)
	case o.maxImagePixels < 1:
		return p, fmt.Errorf("--max_image_pixels %d: must be at least 1", o.maxImagePixels)
	case o.imageDecoder != "auto" && o.imageDecoder != "cpu" && o.imageDecoder != "gpu":
		return p, fmt.Errorf("--image_decoder %q: want auto, cpu or gpu", o.imageDecoder)
	case o.decodeWorkers < 0:
		return p, fmt.Errorf("--decode_workers %d: must not be negative", o.decodeWorkers)
	case o.drainTimeout <= 0:
		return p, fmt.Errorf("--drain_timeout %v: must be positive", o.drainTimeout)
	case o.drainGrace < 0 || o.drainGrace >= o.drainTimeout:
		return p, fmt.Errorf("--drain_grace %v: must be at least 0 and below --drain_timeout %v", o.drainGrace, o.drainTimeout)
	case o.maxInflightBytes < 0:
		return p, fmt.Errorf("--max_inflight_bytes %d: must not be negative", o.maxInflightBytes)
	case o.maxInflightBytes > 0 && o.maxInflightBytes-o.maxInflightBytes/4 < o.maxRequestBytes:
		return p, fmt.Errorf("--max_inflight_bytes %d: must be at least 4/3 of --max_request_bytes %d (a quarter is kept for small requests), or a request of the largest size could never be served", o.maxInflightBytes, o.maxRequestBytes)
	case o.httpTransport != server.HTTPTransportFast && o.httpTransport != server.HTTPTransportNetHTTP:
		return p, fmt.Errorf("--http_transport %q: want %s or %s", o.httpTransport, server.HTTPTransportFast, server.HTTPTransportNetHTTP)
	case o.readHeaderTO <= 0 || o.readTO <= 0 || o.idleTO <= 0:
		return p, errors.New("--read_header_timeout, --read_timeout and --idle_timeout must be positive")
	case o.maxConns < 1:
		return p, fmt.Errorf("--max_connections %d: must be at least 1", o.maxConns)
	case o.grpcMaxStreams < 1 || o.grpcMaxStreams > 1<<31:
		return p, fmt.Errorf("--grpc_max_concurrent_streams %d: must be between 1 and 2^31", o.grpcMaxStreams)
	case o.modelName != "" && !modelNameRE.MatchString(o.modelName):
		return p, fmt.Errorf("--model_name %q: use letters, digits, '_', '.' and '-'", o.modelName)
	case o.logFormat != "text" && o.logFormat != "json":
		return p, fmt.Errorf("--log_format %q: want text or json", o.logFormat)
	case o.set["devices"] && o.set["device"]:
		return p, errors.New("--device and --devices are mutually exclusive")
	}
	if err := o.net.check(); err != nil {
		return p, err
	}
	if err := o.grpc.check(); err != nil {
		return p, err
	}
	if _, err := parseLogLevel(o.logLevel); err != nil {
		return p, err
	}
	var err error
	if p.sizes, err = parseInts("image_size", o.imageSizes); err != nil {
		return p, err
	}
	slices.Sort(p.sizes)
	p.sizes = slices.Compact(p.sizes)
	if p.imageCrop, err = o.pickImageCrop(p.sizes); err != nil {
		return p, err
	}
	if p.devices, err = (&benchOptions{mf: o.mf, devices: o.devices}).deviceList(); err != nil {
		return p, err
	}
	if _, err := parseInputDType(o.inputDType); err != nil {
		return p, err
	}
	if p.batchSizes, err = compiledBatchSizes(o.batchSizes, o.maxBatch); err != nil {
		return p, err
	}
	return p, nil
}

// compiledBatchSizes reads --batch_sizes: "auto" is 1, 2, 4, ... up to
// max, and max.
func compiledBatchSizes(s string, max int) ([]int, error) {
	var sizes []int
	if s == "auto" {
		for b := 1; b < max; b *= 2 {
			sizes = append(sizes, b)
		}
	} else {
		var err error
		if sizes, err = parseInts("batch_sizes", s); err != nil {
			return nil, err
		}
		for _, b := range sizes {
			if b > max {
				return nil, fmt.Errorf("--batch_sizes: %d is above --max_batch_size %d", b, max)
			}
		}
	}
	sizes = append(sizes, max)
	slices.Sort(sizes)
	return slices.Compact(sizes), nil
}

func parseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log_level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// defaultModelName derives the served name from the weights: the file name
// without its extension and torch hub hash suffix ("resnet18-f37072fd.pth"
// is "resnet18"), or the architecture of random weights.
func defaultModelName(src source) string {
	if src.Random {
		return src.Arch
	}
	name := filepath.Base(src.Path)
	name = strings.TrimSuffix(name, filepath.Ext(name))
	if i := strings.LastIndexByte(name, '-'); i > 0 && isHexHash(name[i+1:]) {
		name = name[:i]
	}
	// Anything URL-unfriendly becomes '_'.
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) == 0 || !modelNameRE.Match(b) {
		return "model"
	}
	return string(b)
}

func isHexHash(s string) bool {
	if len(s) < 6 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o serveOptions
	fs := newFlagSet("serve", "serve [flags]", stderr)
	o.register(fs)
	set, err := parseWithHelp(fs, serveHelp, args)
	if err != nil {
		return err
	}
	o.set = set
	plan, err := o.check()
	if err != nil {
		fmt.Fprintf(stderr, "goinfer serve: %v\n", err)
		return errUsage
	}
	level, _ := parseLogLevel(o.logLevel)
	hopts := &slog.HandlerOptions{Level: level}
	var log *slog.Logger
	if o.logFormat == "json" {
		log = slog.New(slog.NewJSONHandler(stderr, hopts))
	} else {
		log = slog.New(slog.NewTextHandler(stderr, hopts))
	}
	return serve(ctx, &o, plan, log, stderr)
}

// serve runs the server until ctx ends. Its phases: resolve the weights,
// listen, load and compile in the background while answering health
// checks, serve, drain.
func serve(ctx context.Context, o *serveOptions, plan servePlan, log *slog.Logger, stderr io.Writer) error {
	src, err := o.mf.resolve(ctx, stderr)
	if err != nil {
		return err
	}
	eng, prec, err := o.mf.selectEngine(stderr, src)
	if err != nil {
		return err
	}
	if eng.Name() == "cpu" && !o.set["max_batch_size"] {
		o.maxBatch = cpuServeMaxBatch
		if plan.batchSizes, err = compiledBatchSizes(o.batchSizes, o.maxBatch); err != nil {
			return err
		}
		log.Info("cpu engine: using a smaller --max_batch_size; give the flag to override", "max_batch_size", o.maxBatch)
	}
	dtype, _ := parseInputDType(o.inputDType)
	name := o.modelName
	if name == "" {
		name = defaultModelName(src)
	}
	var labels []string
	if o.labels != "" {
		if labels, err = readLabels(o.labels); err != nil {
			return err
		}
	}

	cfg := server.Config{
		ModelName: name, ServerVersion: versionString(), MaxRequestBytes: o.maxRequestBytes,
		RequestTimeout: o.requestTimeout, DrainTimeout: o.drainTimeout, MaxBatch: o.maxBatch, Logger: log,
		MaxInflightBytes: o.maxInflightBytes, DrainGrace: o.drainGrace,
		ReadHeaderTimeout: o.readHeaderTO, ReadTimeout: o.readTO, IdleTimeout: o.idleTO,
		MaxConnections: o.maxConns, GRPCMaxConcurrentStreams: uint32(o.grpcMaxStreams),
		PinnedPoolBytes:   o.pinnedPoolBytes,
		AllowSharedMemory: o.allowShm,
		BusyPoll:          o.net.busyPoll,
		SocketBuffer:      o.net.socketBuffer,
		GRPCWindow:        o.grpc.windowOption(),
		GRPCReadBuffer:    o.grpc.readBufferOption(),
		GRPCWriteBuffer:   o.grpc.writeBufferOption(),
		GRPCTransport:     o.grpc.transport,
		HTTPTransport:     o.httpTransport,
		LatencyBreakdown:  o.breakdown,
		MaxImages:         o.maxImages,
	}
	if eng.Name() == "cuda" {
		if nv, err := cuda.OpenNVML(); err == nil {
			defer nv.Close()
			cfg.GPUStats = nvmlStats(nv, plan.devices)
		} else {
			log.Warn("GPU metrics unavailable", "err", err)
		}
	}
	srv, err := server.New(cfg)
	if err != nil {
		return err
	}
	var hl, gl net.Listener
	if o.httpAddr != "" {
		if hl, err = net.Listen("tcp", o.httpAddr); err != nil {
			return fmt.Errorf("--http %s: %w", o.httpAddr, err)
		}
	}
	if o.grpcAddr != "" {
		if gl, err = net.Listen("tcp", o.grpcAddr); err != nil {
			if hl != nil {
				hl.Close()
			}
			return fmt.Errorf("--grpc %s: %w", o.grpcAddr, err)
		}
	}
	if o.pprofAddr != "" {
		pl, err := startPprof(o.pprofAddr)
		if err != nil {
			for _, l := range []net.Listener{hl, gl} {
				if l != nil {
					l.Close()
				}
			}
			return err
		}
		defer pl.Close()
		log.Info("profiling endpoints", "addr", pl.Addr().String()+"/debug/pprof/")
	}
	serveCtx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(serveCtx, hl, gl) }()

	// The backends live until the drain is over, not until the signal:
	// requests in flight still need them.
	lifeCtx, endLife := context.WithCancel(context.Background())
	defer endLife()
	log.Info("loading", "model", name, "weights", src.String(), "engine", eng.Name(), "precision", prec.String(),
		"compile", o.mf.compile, "image_sizes", plan.sizes, "batch_sizes", plan.batchSizes, "devices", plan.devices)
	l := &serveLoader{o: o, plan: plan, eng: eng, prec: prec, src: src, log: log, srv: srv}
	if l.gpuImages, err = o.gpuImages(eng.Name(), dtype, log); err != nil {
		return err
	}
	m, loadErr := l.load(ctx, lifeCtx, dtype, labels)
	if loadErr == nil {
		loadErr = srv.SetModel(m)
	}
	if loadErr != nil && ctx.Err() == nil {
		srv.SetLoadError(loadErr)
		log.Error("model failed to load; shutting down", "err", loadErr)
		stopServing()
	} else if loadErr == nil {
		log.Info("ready", "model", name, "http", addrOf(hl), "grpc", addrOf(gl))
	}

	err = <-served
	// Batchers first (a no-op when Serve has closed them), then backends.
	dctx, cancel := context.WithTimeout(context.Background(), o.drainTimeout)
	defer cancel()
	errs := []error{err}
	for _, b := range l.batchers {
		if cerr := b.Close(dctx); cerr != nil {
			errs = append(errs, cerr)
		}
	}
	for _, b := range l.backends {
		if cerr := b.Close(dctx); cerr != nil {
			errs = append(errs, cerr)
		}
	}
	// Only now is no device reading the pinned request buffers.
	if cerr := srv.Close(); cerr != nil {
		errs = append(errs, cerr)
	}
	if loadErr != nil && ctx.Err() == nil {
		errs = append(errs, loadErr)
	}
	err = errors.Join(errs...)
	if err == nil {
		log.Info("stopped")
	}
	return err
}

// startPprof serves net/http/pprof's handlers on their own listener, so
// that they never share the inference port; closing the listener stops it.
func startPprof(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	go (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(l)
	return l, nil
}

func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

// serveLoader loads one backend per image size and puts batchers in front.
type serveLoader struct {
	o    *serveOptions
	plan servePlan
	// spec is the preprocessing a general graph carries (nil: ImageNet's).
	spec *preprocess.Spec
	eng  engine.Engine
	prec engine.Precision
	src  source
	log  *slog.Logger
	srv  *server.Server

	backends []*backend.Backend
	batchers []*batcher.Batcher
	// gpuImages says that encoded images are decoded on the GPU by the
	// backend of the --image_crop lane (--image_decoder).
	gpuImages bool
}

// load returns the model once every size is loaded and compiled, or an
// error (ctx's when it ends first). Backends and batchers it made are in
// l.backends and l.batchers either way, for the caller to close.
func (l *serveLoader) load(ctx, lifeCtx context.Context, dtype tensor.DType, labels []string) (*server.Model, error) {
	o, plan := l.o, l.plan
	start := time.Now()
	// The ResNet graph serves every size; a general graph is bound to its
	// image size when read, so each size reads its own.
	resnet := sync.OnceValues(func() (netGraph, error) { return readNetGraph(ctx, l.src, 0) })
	var first netGraph
	graphFor := func(size int) func() (netGraph, error) {
		switch {
		case !l.src.general():
			return resnet
		case size == plan.sizes[0]:
			return func() (netGraph, error) { return first, nil }
		}
		return sync.OnceValues(func() (netGraph, error) { return readNetGraph(ctx, l.src, size) })
	}
	if l.src.general() {
		var err error
		if first, err = readNetGraph(ctx, l.src, plan.sizes[0]); err != nil {
			return nil, err
		}
		if h, w := first.inputSize(plan.sizes[0], plan.sizes[0]); h != plan.sizes[0] || w != plan.sizes[0] {
			if h != w || len(plan.sizes) > 1 || o.set["image_size"] {
				return nil, fmt.Errorf("the model takes %dx%d images only; serve it with --image_size %d", h, w, h)
			}
			plan.sizes = []int{h}
			l.plan.sizes, l.plan.imageCrop = plan.sizes, h
		}
		l.spec = first.general.Preprocess
	}
	inflight := o.maxInflight
	if inflight == 0 {
		// Enough to fill every slot of every device's pipeline, plus one
		// being assembled.
		inflight = len(plan.devices)*(o.numWorkers+3) + 1
	}
	for _, size := range plan.sizes {
		loads := make([]backend.LoadFunc, len(plan.devices))
		for i, d := range plan.devices {
			opts := engine.Options{Compile: o.mf.compile, Precision: l.prec, MaxBatch: o.maxBatch, BatchSizes: plan.batchSizes,
				Height: size, Width: size, InputDType: dtype, Device: d, Threads: o.mf.threads, SplitBatch: o.mf.splitBatch, TuningCache: o.mf.tuneCache, GraphExperiments: o.mf.experiments,
				Progress: func(format string, args ...any) {
					l.log.Info(fmt.Sprintf(format, args...), "device", d, "image_size", size)
				}}
			graph := graphFor(size)
			loads[i] = func(ctx context.Context) (engine.Model, error) {
				if p, ok := l.eng.(engine.Preparer); ok {
					p.Prepare(d) // the context and handles while the graph is built
				}
				g, err := graph()
				if err != nil {
					return nil, err
				}
				return g.load(ctx, l.eng, opts)
			}
		}
		b := backend.New(backend.Config{NumWorkers: o.numWorkers, QueueDepth: inflight, CopyStreams: o.copyStreams, MaxBatch: o.maxBatch,
			NewDecoder: l.decoders(size), NewPostprocessor: l.postprocessors()})
		l.backends = append(l.backends, b)
		if err := b.StartDevices(lifeCtx, loads...); err != nil {
			return nil, err
		}
	}
	m := &server.Model{Labels: labels}
	for i, b := range l.backends {
		select {
		case <-b.Ready():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if err := b.Err(); err != nil {
			return nil, fmt.Errorf("image size %d: %w", plan.sizes[i], err)
		}
		info := b.Info()
		devs := b.Devices()
		var load, compile time.Duration
		for _, d := range devs {
			load, compile = max(load, d.Load+d.Setup-d.Info.CompileTime), max(compile, d.Info.CompileTime)
		}
		l.log.Info("loaded", "image_size", plan.sizes[i], "arch", info.Arch, "engine", info.Engine, "device", info.Device,
			"precision", info.Precision.String(), "compiled", info.Compiled, "input", info.Input().String(), "output", info.Output().String(),
			"load_s", load.Seconds(), "compile_s", compile.Seconds())
		bcfg := batcher.Config{
			Channels: info.Input().Shape[0], Height: plan.sizes[i], Width: plan.sizes[i], DType: info.Input().DType,
			Classes: info.OutputElems(), MaxBatch: o.maxBatch, MaxDelay: o.maxQueueDelay, IdleDispatch: o.dispatchWhenIdle,
			MaxQueue: o.maxQueue, MaxInflight: inflight, Observe: l.srv.ObserveBatch,
			Encoded: l.decoders(plan.sizes[i]) != nil, Stages: o.breakdown,
		}
		// Compiled sizes are faster than their neighbours only where the
		// engine captured them (CUDA graphs); the cpu engine runs any size
		// at the same cost per image, so padding would only waste work.
		if o.padBatches && o.mf.compile && info.Engine == "cuda" {
			bcfg.PreferredSizes = plan.batchSizes
		}
		if info.Engine != "cpu" {
			// The model is loaded: page-locked memory of its device, so
			// merged batches reach the GPU without staging.
			bcfg.AllocHost = b.AllocHost
			// Portable page-locked memory: any lane's device copies from it.
			m.AllocHost = b.AllocHost
			// Shared memory regions page-locked (portable) the same way.
			m.RegisterHost = b.RegisterHost
		}
		bt, err := batcher.New(b, bcfg)
		if err != nil {
			return nil, err
		}
		l.batchers = append(l.batchers, bt)
		m.Info = info
		m.Lanes = append(m.Lanes, server.Lane{Height: plan.sizes[i], Width: plan.sizes[i], Batcher: bt})
	}
	if err := l.imageInput(m); err != nil {
		return nil, err
	}
	if m.Labels == nil && m.Info.OutputElems() == classlabels.ImageNetClasses {
		m.Labels = classlabels.ImageNet() // ImageNet's names ship in the binary
	} else if err := classlabels.Check(m.Labels, m.Info.OutputElems()); m.Labels != nil && err != nil {
		return nil, fmt.Errorf("--labels %s: %w", l.o.labels, err)
	}
	l.log.Info("model loaded", "took_s", time.Since(start).Seconds())
	return m, nil
}

// nvmlStats reads utilization and memory of the served GPUs at scrapes.
func nvmlStats(nv *cuda.NVML, devices []int) func() []server.GPUStat {
	return func() []server.GPUStat {
		var out []server.GPUStat
		for _, d := range devices {
			util, _, err := nv.Utilization(d)
			if err != nil {
				continue
			}
			used, total, err := nv.Memory(d)
			if err != nil {
				continue
			}
			name, _ := nv.Name(d)
			out = append(out, server.GPUStat{Index: d, Name: name, Utilization: float64(util), MemoryUsed: int64(used), MemoryTotal: int64(total)})
		}
		return out
	}
}
