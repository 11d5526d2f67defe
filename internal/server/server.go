// Package server serves one image classifier over the KServe v2 / Open
// Inference Protocol: HTTP/REST (JSON, plus the binary tensor data and
// classification extensions) and gRPC (inference.GRPCInferenceService, with
// server reflection and grpc.health.v1), in front of dynamic batchers
// (package batcher). It exports Prometheus metrics at /metrics and drains
// gracefully.
//
// The server starts before the model is loaded: it is live at once and
// ready only once SetModel hands it the compiled model, so orchestrators can
// tell "starting" from "dead".
//
// The model has one input, "input", a [batch, channels, height, width]
// tensor of FP32 (or FP16, or UINT8 raw pixels that are normalized with the
// ImageNet mean and std), and one output, "logits", FP32 [batch, classes].
// Metadata reports the input's height and width when the model serves one
// image size, and -1 (any) for dimensions that differ between the sizes it
// serves, so that clients that shape their requests from the metadata never
// send a size the engine was not compiled for.
package server

import (
	"context"
	"errors"
	"fmt"
	"goinfer/internal/h2grpc"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"goinfer/internal/busypoll"
	"goinfer/internal/engine"
	"goinfer/internal/kservepb"
	"goinfer/internal/server/batcher"
	"goinfer/internal/tensor"
)

// Extensions lists the protocol extensions the server implements, as
// GET /v2 and ServerMetadata report them.
func Extensions() []string {
	return []string{"binary_tensor_data", "classification", "model_repository"}
}

// extensions are the extensions this server reports: Extensions, and
// system_shared_memory when it is allowed.
func (s *Server) extensions() []string {
	ext := Extensions()
	if s.shm.enabled() == nil {
		ext = append(ext, "system_shared_memory")
	}
	return ext
}

// Config configures a Server.
type Config struct {
	// ModelName is the name clients use in URLs and requests (required).
	ModelName string
	// ModelVersion is the one version served (default "1"). Requests that
	// name no version get it.
	ModelVersion string
	// ServerName and ServerVersion are reported by GET /v2 and
	// ServerMetadata (defaults "goinfer" and "devel").
	ServerName, ServerVersion string
	// MaxRequestBytes bounds a request body or gRPC message (default 64 MiB).
	MaxRequestBytes int64
	// MaxInflightBytes bounds the bytes that all requests in flight hold
	// together (default 2 x MaxRequestBytes). A request takes what it
	// declares before its body is read and is refused with 503 +
	// Retry-After / RESOURCE_EXHAUSTED when that does not fit. A quarter
	// is kept for requests of up to 8 MiB. It must be at least 4/3 of
	// MaxRequestBytes, so that a request of the largest size can fit.
	MaxInflightBytes int64
	// ReadHeaderTimeout bounds the reading of an HTTP request's headers
	// (default 10 s); ReadTimeout the whole request, body included (default
	// 60 s: a body still arriving then is cut off with 408, a gRPC
	// inference message with CANCELED); IdleTimeout
	// how long a keep-alive connection may wait for its next request
	// (default 2 min).
	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration
	// BusyPoll makes every connection's reads poll the socket for up to
	// this long before the goroutine sleeps in the network poller (see
	// package busypoll): a request, or the rest of its body, that arrives
	// within it is read without waking a sleeping thread, at the price of
	// a core kept busy meanwhile (0: off).
	BusyPoll time.Duration
	// SocketBuffer, when > 0, sets the kernel send and receive buffers of
	// every accepted connection, in bytes.
	SocketBuffer int
	// LatencyBreakdown records when each inference request passed each
	// step from its arrival to its answer (the batcher's and backend's
	// steps need batcher.Config.Stages) and serves the medians per step
	// at GET /debug/latency (?reset=1 drops them after writing).
	LatencyBreakdown bool
	// MaxConnections bounds the connections open on each listener (default
	// 1024; negative: unbounded). Further clients wait in the kernel's
	// accept backlog.
	MaxConnections int
	// GRPCMaxConcurrentStreams bounds the RPCs one gRPC connection may have
	// open at once (default 256).
	GRPCMaxConcurrentStreams uint32
	// RequestTimeout bounds each inference request, queueing included
	// (0: only the client's own deadline).
	RequestTimeout time.Duration
	// DrainTimeout bounds the graceful stop of Serve (default 30 s).
	DrainTimeout time.Duration
	// DrainGrace is how long a drain keeps HTTP connections open after
	// readiness goes false, answering new requests 503 with
	// "Connection: close" so that clients leave them before they are
	// closed (zero: no grace). It is part of DrainTimeout.
	DrainGrace time.Duration
	// MaxBatch sizes the batch-size histogram's buckets (default 64).
	MaxBatch int
	// Logger receives structured logs (default slog.Default()).
	Logger *slog.Logger
	// GPUStats, if set, is read at each /metrics scrape for the
	// goinfer_gpu_* gauges.
	GPUStats func() []GPUStat
	// GRPCReadBuffer and GRPCWriteBuffer size the buffers between gRPC's
	// HTTP/2 framer and the socket, in bytes (default 1 MiB); negative:
	// none, the framer reads and writes the socket directly.
	GRPCReadBuffer, GRPCWriteBuffer int
	// GRPCWindow is the HTTP/2 flow-control window, in bytes, the server
	// grants each stream and each connection (default 16 MiB); negative:
	// gRPC-Go's own 64 KiB, grown by its bandwidth estimator.
	GRPCWindow int32
	// GRPCTransport picks what serves gRPC: GRPCTransportGRPCGo (default,
	// every service) or GRPCTransportH2 (the unary methods of the inference
	// and health services with large HTTP/2 frames, for latency; streaming
	// RPCs and reflection are not served).
	GRPCTransport string
	// HTTPTransport picks what serves HTTP: HTTPTransportFast (default:
	// inference requests on internal/h1's loop, the rest through net/http)
	// or HTTPTransportNetHTTP (net/http for everything).
	HTTPTransport string
	// PinnedPoolBytes bounds the page-locked memory request tensors are
	// received into when the model has a host allocator (Model.AllocHost);
	// requests beyond it use ordinary memory and are copied once more.
	// Zero: no pinned pool.
	PinnedPoolBytes int64
	// AllowSharedMemory lets clients on this host register POSIX shared
	// memory regions and pass tensors through them (Triton's system
	// shared memory extension). Off by default: a client can then make the
	// server map any shared memory object its user can open.
	AllowSharedMemory bool
	// MaxImages bounds the encoded images one request may send through
	// the image input (default DefaultMaxImages).
	MaxImages int
}

// Lane is one image size the model serves: a batcher in front of a backend
// that was compiled for Height x Width.
type Lane struct {
	Height, Width int
	Batcher       *batcher.Batcher
}

// Model is a loaded, compiled model ready to serve.
type Model struct {
	// Info describes the model; Classes, InChannels and InputDType are used.
	Info engine.Info
	// Platform is reported in the model metadata (default "goinfer_<engine>").
	Platform string
	// Labels, if it has Classes entries, names classes in classification
	// results ("score:index:label").
	Labels []string
	// Lanes are the image sizes served; at least one.
	Lanes []Lane
	// AllocHost, if set, allocates host memory the backends copy to the
	// device directly (page-locked on a GPU): request tensors are then
	// received into a pool of it (Config.PinnedPoolBytes) and reach the
	// device without a copy on the host.
	AllocHost func(n int) (engine.HostBuffer, error)
	// RegisterHost, if set, page-locks memory the server did not allocate
	// (engine.HostRegisterer): shared memory regions are then read by the
	// device directly instead of being copied.
	RegisterHost func(b []byte) (engine.HostBuffer, error)
	// Images, if set, lets requests send encoded images (ImageInputName)
	// instead of a tensor; they are decoded and preprocessed here.
	Images *Images
}

// registerHost is the model's RegisterHost for an input of dtype dt: nil
// when the model cannot page-lock memory or converts dt on the host,
// since then the host reads the tensor.
func (st *modelState) registerHost(dt tensor.DType) func([]byte) (engine.HostBuffer, error) {
	if dt != st.model.Info.Input().DType {
		return nil
	}
	return st.model.RegisterHost
}

// modelState is what the server knows about its model at one moment.
type modelState struct {
	model  *Model
	lanes  map[[2]int]*batcher.Batcher
	input  tensorMeta
	output tensorMeta
	images *imageState // nil: the model takes no encoded images
}

type tensorMeta struct {
	name     string
	datatype string
	shape    []int64 // with -1 for the batch dimension
}

// batched is the tensor's shape for a batch of n.
func (m tensorMeta) batched(n int) []int64 {
	s := append([]int64(nil), m.shape...)
	s[0] = int64(n)
	return s
}

// Server answers KServe v2 requests over HTTP and gRPC. Create it with New,
// hand it the model with SetModel, and run it with Serve.
type Server struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	bufs    bufPool
	reqs    requestPool // request tensors: pinned when possible, else bufs
	budget  *memBudget  // bytes held by requests in flight

	state    atomic.Pointer[modelState] // nil while loading
	loadErr  atomic.Pointer[error]
	draining atomic.Bool
	fresh    freshConns   // HTTP connections that have not sent a request yet
	active   atomic.Int64 // inference handlers running

	http *http.Server
	grpc *grpc.Server
	fast *h2grpc.Server // serves gRPC instead of grpc when set (Config.GRPCTransport)
	// httpSrv serves the HTTP port: http, or h1's loop in front of it
	// (Config.HTTPTransport).
	httpSrv httpServer
	// breakdown records requests' steps (Config.LatencyBreakdown); nil: off.
	breakdown *breakdown
	health    *health.Server
	codec     kservepb.Codec
	shm       shmRegistry

	drainOnce sync.Once
	drainErr  error
}

// New returns a server that is live but not ready.
func New(cfg Config) (*Server, error) {
	if cfg.ModelName == "" {
		return nil, errors.New("server: ModelName is empty")
	}
	if cfg.ModelVersion == "" {
		cfg.ModelVersion = "1"
	}
	if err := checkHTTPTransport(cfg.HTTPTransport); err != nil {
		return nil, err
	}
	if err := checkGRPCTransport(cfg.GRPCTransport); err != nil {
		return nil, err
	}
	if cfg.ServerName == "" {
		cfg.ServerName = "goinfer"
	}
	if cfg.ServerVersion == "" {
		cfg.ServerVersion = "devel"
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = 64 << 20
	}
	if cfg.MaxInflightBytes <= 0 {
		cfg.MaxInflightBytes = 2 * cfg.MaxRequestBytes
	}
	if cfg.MaxInflightBytes-cfg.MaxInflightBytes/4 < cfg.MaxRequestBytes {
		return nil, fmt.Errorf("server: MaxInflightBytes %d is too small for requests of MaxRequestBytes %d: want at least 4/3 of it (a quarter is kept for small requests)", cfg.MaxInflightBytes, cfg.MaxRequestBytes)
	}
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = 10 * time.Second
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = time.Minute
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 2 * time.Minute
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = 1024
	}
	if cfg.GRPCMaxConcurrentStreams == 0 {
		cfg.GRPCMaxConcurrentStreams = 256
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 30 * time.Second
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 64
	}
	if cfg.MaxImages <= 0 {
		cfg.MaxImages = DefaultMaxImages
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, log: cfg.Logger, budget: newMemBudget(cfg.MaxInflightBytes)}
	if cfg.LatencyBreakdown {
		s.breakdown = newBreakdown()
	}
	s.shm.allowed, s.shm.log = cfg.AllowSharedMemory, cfg.Logger
	s.reqs.bufs = &s.bufs
	s.codec.Pool = &s.reqs
	s.codec.DeferErrors = true // its interceptors answer INVALID_ARGUMENT
	s.metrics = newMetrics(cfg.ModelName, cfg.MaxBatch, s.queueDepth, func() float64 {
		if s.ready() {
			return 1
		}
		return 0
	}, cfg.GPUStats)
	if cfg.AllowSharedMemory {
		ml := prometheus.Labels{"model": cfg.ModelName}
		s.metrics.reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "goinfer_shared_memory_regions", Help: "System shared memory regions registered by clients.", ConstLabels: ml,
			}, func() float64 { n, _ := s.shm.stats(); return float64(n) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "goinfer_shared_memory_pinned_bytes", Help: "Bytes of registered regions page-locked for the device to read inputs from directly.", ConstLabels: ml,
			}, func() float64 { _, b := s.shm.stats(); return float64(b) }),
		)
	}
	s.metrics.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "goinfer_inflight_request_bytes", Help: "Bytes that requests in flight hold of --max_inflight_bytes.",
		ConstLabels: prometheus.Labels{"model": cfg.ModelName},
	}, func() float64 { return float64(s.budget.inUse()) }))
	s.metrics.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "goinfer_inflight_request_bytes_max", Help: "The most bytes requests in flight held at once of --max_inflight_bytes (HTTP bodies, gRPC receive reservations, decoded tensors).",
		ConstLabels: prometheus.Labels{"model": cfg.ModelName},
	}, func() float64 { return float64(s.budget.maxInUse()) }))
	s.http = &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		ConnState:         s.fresh.track,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	gopts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(min(cfg.MaxRequestBytes, 1<<31-1))),
		grpc.MaxConcurrentStreams(cfg.GRPCMaxConcurrentStreams),
		grpc.MaxSendMsgSize(1<<31 - 1),
		grpc.ChainUnaryInterceptor(s.codec.UnaryServerInterceptor, s.recoverUnary),
		grpc.ChainStreamInterceptor(s.codec.StreamServerInterceptor),
		grpc.InTapHandle(s.tapInfer),
		grpc.ForceServerCodecV2(&s.codec),
		grpc.ReadBufferSize(bufferSize(cfg.GRPCReadBuffer)),
		grpc.WriteBufferSize(bufferSize(cfg.GRPCWriteBuffer)),
		// Frames are read into buffers of their exact size, so a pool that
		// does not zero them is safe and saves a pass over every request.
		experimental.BufferPool(&s.bufs),
	}
	if w := windowSize(cfg.GRPCWindow); w > 0 {
		// Tensors are hundreds of kilobytes: large windows keep a
		// request from waiting on flow-control round trips.
		gopts = append(gopts, grpc.InitialWindowSize(w), grpc.InitialConnWindowSize(w))
	}
	s.grpc = grpc.NewServer(gopts...)
	kservepb.RegisterGRPCInferenceServiceServer(s.grpc, &grpcService{s: s})
	s.health = health.NewServer()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	if cfg.GRPCTransport == GRPCTransportH2 {
		s.fast = s.newFastGRPC(cfg)
	}
	s.httpSrv = s.http
	if cfg.HTTPTransport != HTTPTransportNetHTTP {
		s.httpSrv = s.newFastHTTP()
	}
	return s, nil
}

// SetModel makes the server ready to serve m, filling in m.Platform when it
// is empty. The server owns m's batchers from now on: Serve closes them
// when it drains.
func (s *Server) SetModel(m *Model) error {
	if m == nil || len(m.Lanes) == 0 {
		return errors.New("server: model has no lanes")
	}
	info := m.Info
	if err := info.Validate(); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	c, _, _, ok := info.ImageInput()
	if !ok {
		return fmt.Errorf("server: model %s takes %s: the server serves image models, whose input is [N, C, H, W], so far", info.Arch, info.Input())
	}
	dt := wireName(info.Input().DType)
	if dt == "" {
		return fmt.Errorf("server: model input dtype %s has no KServe name", info.Input().DType)
	}
	st := &modelState{model: m, lanes: map[[2]int]*batcher.Batcher{}}
	h, w := int64(m.Lanes[0].Height), int64(m.Lanes[0].Width)
	for _, l := range m.Lanes {
		if l.Batcher == nil || l.Height <= 0 || l.Width <= 0 {
			return fmt.Errorf("server: lane %dx%d has no batcher", l.Height, l.Width)
		}
		key := [2]int{l.Height, l.Width}
		if st.lanes[key] != nil {
			return fmt.Errorf("server: two lanes serve %dx%d", l.Height, l.Width)
		}
		st.lanes[key] = l.Batcher
		if int64(l.Height) != h {
			h = -1
		}
		if int64(l.Width) != w {
			w = -1
		}
	}
	st.input = tensorMeta{name: info.Input().Name, datatype: dt, shape: []int64{-1, int64(c), h, w}}
	st.output = tensorMeta{name: info.Output().Name, datatype: "FP32", shape: []int64{-1}}
	for _, d := range info.Output().Shape {
		st.output.shape = append(st.output.shape, int64(d))
	}
	if err := st.setImages(m); err != nil {
		return err
	}
	if m.Platform == "" {
		m.Platform = "goinfer_" + info.Engine
	}
	if m.AllocHost != nil && s.cfg.PinnedPoolBytes > 0 && s.reqs.pinned.Load() == nil {
		s.reqs.pinned.Store(newPinnedPool(m.AllocHost, s.cfg.PinnedPoolBytes))
	}
	s.state.Store(st)
	if !s.draining.Load() {
		s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		s.health.SetServingStatus(kservepb.GRPCInferenceService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	}
	return nil
}

// Close frees what the server holds beyond Serve: its pinned request
// buffers and shared memory mappings. Call it once Serve has returned and
// the backends have stopped, since the device may read those buffers until
// then.
func (s *Server) Close() error {
	s.shm.close()
	if pp := s.reqs.pinned.Load(); pp != nil {
		return pp.close()
	}
	return nil
}

// SetLoadError records that the model could not be loaded: the server stays
// live and not ready, and inference requests are answered 503/UNAVAILABLE
// with err's message.
func (s *Server) SetLoadError(err error) {
	s.loadErr.Store(&err)
}

// ready reports whether inference requests can be served now.
func (s *Server) ready() bool {
	return s.state.Load() != nil && !s.draining.Load()
}

// saturated reports whether no lane could queue even one image now.
func (s *Server) saturated() bool {
	st := s.state.Load()
	if st == nil {
		return false
	}
	for _, l := range st.model.Lanes {
		if l.Batcher.Admit(1) == nil {
			return false
		}
	}
	return true
}

// inferMethod is ModelInfer's full gRPC method name.
const inferMethod = "/inference.GRPCInferenceService/ModelInfer"

// tapInfer refuses an inference RPC before its message is read when every
// queue is full, or when the in-flight byte budget cannot take a receive
// reservation (grpcRecvReserve), so that an overloaded server does not
// receive megabytes only to drop them. An RPC it lets in holds the
// reservation until ModelInfer starts or the RPC ends, which bounds the
// RPCs receiving messages at once by the budget.
func (s *Server) tapInfer(ctx context.Context, info *tap.Info) (context.Context, error) {
	if info.FullMethodName != inferMethod {
		return ctx, nil
	}
	if s.saturated() {
		s.metrics.requests.WithLabelValues("grpc", kindQueueFull.statusLabel()).Inc()
		return ctx, status.Error(codes.ResourceExhausted, "the server's queue is full; retry later")
	}
	n := s.grpcRecvReserve()
	if !s.budget.acquire(n, n) {
		s.metrics.requests.WithLabelValues("grpc", kindMemoryFull.statusLabel()).Inc()
		return ctx, status.Error(codes.ResourceExhausted, "the server is holding as many request bytes as it may (--max_inflight_bytes); retry later")
	}
	ctx, cancel := context.WithCancelCause(s.withStamps(ctx))
	r := &recvReservation{b: s.budget, n: n}
	if t := s.cfg.ReadTimeout; t > 0 {
		// Like an HTTP body, a message must arrive within --read_timeout:
		// cutting off the RPC (its receive fails) frees its reservation.
		r.timer = time.AfterFunc(t, func() {
			if r.releaseOnce(func() {}) {
				s.log.Debug("gRPC message did not arrive in time (--read_timeout); RPC cut off", "timeout", t)
				cancel(errRecvTimeout)
			}
		})
	}
	// The stream's context ends with the RPC on every path, also one
	// reset before its handler ran.
	context.AfterFunc(ctx, func() { r.release(); cancel(nil) })
	return context.WithValue(ctx, recvReservationKey{}, r), nil
}

func (s *Server) queueDepth() float64 {
	st := s.state.Load()
	if st == nil {
		return 0
	}
	n := 0
	for _, l := range st.model.Lanes {
		n += l.Batcher.QueueDepth()
	}
	return float64(n)
}

// lookup resolves a model name and version for metadata and readiness
// requests. It fails only for unknown names or versions; st is nil while
// the model loads.
func (s *Server) lookup(name, version string) (st *modelState, err error) {
	if name != s.cfg.ModelName {
		return nil, errorf(kindNotFound, "unknown model %q (this server serves %q)", name, s.cfg.ModelName)
	}
	if version != "" && version != s.cfg.ModelVersion {
		return nil, errorf(kindNotFound, "model %q has no version %q (versions: %s)", name, version, s.cfg.ModelVersion)
	}
	return s.state.Load(), nil
}

// serving resolves the model for an inference request: it also fails while
// the model loads or the server drains.
func (s *Server) serving(name, version string) (*modelState, error) {
	st, err := s.lookup(name, version)
	if err != nil {
		return nil, err
	}
	if s.draining.Load() {
		return nil, errorf(kindShuttingDown, "the server is shutting down")
	}
	if st == nil {
		if p := s.loadErr.Load(); p != nil {
			return nil, errorf(kindUnavailable, "model %q failed to load: %v", name, *p)
		}
		return nil, errorf(kindUnavailable, "model %q is loading; poll /v2/models/%s/ready", name, name)
	}
	return st, nil
}

// Serve answers HTTP requests on httpLn and gRPC requests on grpcLn (either
// may be nil) until ctx is done, then drains: it stops accepting, lets the
// requests in flight finish within Config.DrainTimeout, and closes the
// model's batchers. It returns nil after a complete drain.
func (s *Server) Serve(ctx context.Context, httpLn, grpcLn net.Listener) error {
	if httpLn == nil && grpcLn == nil {
		return errors.New("server: no listener")
	}
	errc := make(chan error, 2)
	if httpLn != nil {
		s.log.Info("serving HTTP", "addr", httpLn.Addr().String(), "model", s.cfg.ModelName)
		httpLn = newLimitListener(s.tuned(httpLn), s.cfg.MaxConnections)
		go func() {
			if err := s.httpSrv.Serve(httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("HTTP server: %w", err)
			}
		}()
	}
	if grpcLn != nil {
		s.log.Info("serving gRPC", "addr", grpcLn.Addr().String(), "model", s.cfg.ModelName)
		grpcLn = newLimitListener(s.tuned(grpcLn), s.cfg.MaxConnections)
		go func() {
			if s.fast != nil {
				if err := s.fast.Serve(grpcLn); err != nil && !errors.Is(err, h2grpc.ErrServerClosed) {
					errc <- fmt.Errorf("gRPC server (h2grpc): %w", err)
				}
				return
			}
			if err := s.grpc.Serve(grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				errc <- fmt.Errorf("gRPC server: %w", err)
			}
		}()
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
		s.log.Error("listener failed; shutting down", "err", serveErr)
	}
	dctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	return errors.Join(serveErr, s.Shutdown(dctx))
}

// tuned applies Config.BusyPoll and Config.SocketBuffer to l's
// connections.
func (s *Server) tuned(l net.Listener) net.Listener {
	if s.cfg.BusyPoll <= 0 && s.cfg.SocketBuffer <= 0 {
		return l
	}
	return &busypoll.Listener{Listener: l, Spin: s.cfg.BusyPoll, Buffer: s.cfg.SocketBuffer}
}

// Shutdown stops accepting requests, waits for those in flight until ctx
// ends, and closes the model's batchers. If ctx ends first, queued requests
// are refused, connections are closed, and an error says so. Calling it
// again returns the first result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.drainOnce.Do(func() { s.drainErr = s.drain(ctx) })
	return s.drainErr
}

func (s *Server) drain(ctx context.Context) error {
	start := time.Now()
	s.draining.Store(true)
	s.health.Shutdown() // every service NOT_SERVING
	s.log.Info("draining", "timeout", deadlineString(ctx))

	// gRPC clients get GOAWAY now: they finish the RPCs they started and
	// send no more on these connections.
	grpcDone := make(chan struct{})
	go func() {
		if s.fast != nil {
			s.fast.Shutdown(ctx)
		} else {
			s.grpc.GracefulStop()
		}
		close(grpcDone)
	}()
	// HTTP/1 has no GOAWAY: for the grace period, requests on open
	// connections are answered 503 with "Connection: close", so that
	// clients close them before the server does; closing a keep-alive
	// connection under a client that is writing a request resets it.
	s.graceWait(ctx)
	httpErr := make(chan error, 1)
	go func() { httpErr <- s.httpSrv.Shutdown(ctx) }()
	// net/http closes idle connections at once but waits 5 s for those
	// that never sent a request (clients open spares): close them as idle.
	stopFresh := s.fresh.closeWhile(freshAge)
	defer stopFresh()

	var cut bool
	select {
	case <-ctx.Done():
		cut = true
	case err := <-httpErr:
		cut = err != nil
		if !cut {
			select {
			case <-grpcDone:
			case <-ctx.Done():
				cut = true
			}
		}
	}
	var errs []error
	if cut {
		// Refuse what is still queued, give the handlers that were waiting
		// for it a moment to send their 503s, then cut the connections.
		expired, cancel := context.WithCancel(context.Background())
		cancel()
		s.closeLanes(expired)
		for t0 := time.Now(); s.active.Load() > 0 && time.Since(t0) < refuseGrace; {
			time.Sleep(5 * time.Millisecond)
		}
		s.grpc.Stop()
		if s.fast != nil {
			s.fast.Close()
		}
		s.httpSrv.Close()
		errs = append(errs, fmt.Errorf("drain cut short after %v: requests still in flight were refused or dropped", time.Since(start).Round(time.Millisecond)))
	}
	if err := s.closeLanes(ctx); err != nil && !cut {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		s.log.Info("drained", "took", time.Since(start).Round(time.Millisecond))
	}
	return errors.Join(errs...)
}

// freshAge is how long a connection may sit without sending its first
// request once the drain closes connections: long enough for a request
// already written to be read.
const freshAge = 100 * time.Millisecond

// freshConns tracks the HTTP connections that have not sent a request yet
// (http.Server.ConnState), so that a drain can close them.
type freshConns struct {
	n     atomic.Int64 // len(conns), read without the lock
	mu    sync.Mutex
	conns map[net.Conn]time.Time
}

func (f *freshConns) track(c net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		f.mu.Lock()
		if f.conns == nil {
			f.conns = map[net.Conn]time.Time{}
		}
		f.conns[c] = time.Now()
		f.n.Store(int64(len(f.conns)))
		f.mu.Unlock()
	case http.StateIdle:
		// Only after StateActive, which removed it: keep-alive requests
		// take no lock here.
	default:
		if f.n.Load() == 0 {
			return
		}
		f.mu.Lock()
		delete(f.conns, c)
		f.n.Store(int64(len(f.conns)))
		f.mu.Unlock()
	}
}

// closeWhile closes, every age/2 until stop is called, the connections
// that have been fresh for longer than age.
func (f *freshConns) closeWhile(age time.Duration) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(age / 2)
		defer t.Stop()
		for {
			f.mu.Lock()
			for c, since := range f.conns {
				if time.Since(since) > age {
					c.Close()
					delete(f.conns, c)
				}
			}
			f.n.Store(int64(len(f.conns)))
			f.mu.Unlock()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-exited }
}

// graceWait waits out Config.DrainGrace, or less if ctx ends first. It
// does not end early when no connection is open: a client may be about to
// open one, and would find the listener closed.
func (s *Server) graceWait(ctx context.Context) {
	if s.cfg.DrainGrace <= 0 {
		return
	}
	t := time.NewTimer(s.cfg.DrainGrace)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// gRPC transport sizes: windows of 16 MiB let a batch of large images
// stream without stalls, buffers of 1 MiB cut syscalls per image.
const (
	grpcWindow = 16 << 20
	grpcBuffer = 1 << 20
)

// windowSize maps a configured gRPC window to gRPC's option: 0 is the
// default, negative is none (gRPC-Go's dynamic window).
func windowSize(n int32) int32 {
	if n == 0 {
		return grpcWindow
	}
	return n
}

// bufferSize maps a configured gRPC buffer size to gRPC's option: 0 is the
// default, negative is none (gRPC's 0).
func bufferSize(n int) int {
	switch {
	case n == 0:
		return grpcBuffer
	case n < 0:
		return 0
	}
	return n
}

// refuseGrace is how long a cut-short drain waits for handlers to answer
// the requests it refused before it closes their connections.
const refuseGrace = time.Second

// closeLanes closes every batcher (each Close runs once).
func (s *Server) closeLanes(ctx context.Context) error {
	st := s.state.Load()
	if st == nil {
		return nil
	}
	var errs []error
	for _, l := range st.model.Lanes {
		if err := l.Batcher.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("lane %dx%d: %w", l.Height, l.Width, err))
		}
	}
	return errors.Join(errs...)
}

func deadlineString(ctx context.Context) string {
	if d, ok := ctx.Deadline(); ok {
		return time.Until(d).Round(time.Millisecond).String()
	}
	return "none"
}

// wireName is the KServe datatype name of a dtype ("" if none).
func wireName(dt tensor.DType) string {
	switch dt {
	case tensor.Float32:
		return "FP32"
	case tensor.Float16:
		return "FP16"
	case tensor.BFloat16:
		return "BF16"
	case tensor.Float64:
		return "FP64"
	case tensor.Uint8:
		return "UINT8"
	case tensor.Int8:
		return "INT8"
	case tensor.Int32:
		return "INT32"
	case tensor.Int64:
		return "INT64"
	case tensor.Bool:
		return "BOOL"
	}
	return ""
}

// inputDType maps a datatype an inference request may send to its dtype.
func inputDType(datatype string) (tensor.DType, bool) {
	switch datatype {
	case "FP32":
		return tensor.Float32, true
	case "FP16":
		return tensor.Float16, true
	case "UINT8":
		return tensor.Uint8, true
	}
	return tensor.Invalid, false
}

// acceptedInputs lists the input datatypes for error messages.
const acceptedInputs = "FP32, FP16 or UINT8"
