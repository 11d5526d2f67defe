// Package servertest starts real goinfer servers on loopback for tests: a
// narrow ResNet with seeded random weights on the cpu engine, behind the
// real backend pipeline, a dynamic batcher and the HTTP and gRPC servers.
package servertest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"goinfer/internal/backend"
	"goinfer/internal/engine"
	"goinfer/internal/engine/cpu"
	"goinfer/internal/model"
	"goinfer/internal/preprocess"
	"goinfer/internal/server"
	"goinfer/internal/server/batcher"
	"goinfer/internal/tensor"
)

// Options shape the test server. Zero values take the defaults noted.
// GRPCTransport is the Config.GRPCTransport of the servers Start makes
// (empty: the default). A test that runs other tests against another
// transport sets it for their duration; tests that change it must not run
// in parallel.
var GRPCTransport string

type Options struct {
	Size       int           // image height and width (16)
	Classes    int           // 10
	MaxBatch   int           // 4
	MaxDelay   time.Duration // 0
	MaxQueue   int           // 16 images
	Inflight   int           // batcher MaxInflight (2)
	InputDType tensor.DType  // the engine's input dtype (Float32)
	// Gated puts a Gate between batcher and backend: batches wait until
	// the test lets them through.
	Gated bool
	// Server adjusts the server's config before New.
	Server func(*server.Config)
	// Labels are class names for classification results.
	Labels []string
	// Name is the model's name (ModelName).
	Name string
	// NoModel starts the server without handing it the model: it stays
	// live and not ready until SetModel is called on Server.Srv with
	// Model().
	NoModel bool
	// Pinned wires the backend's host allocator (ordinary memory on the cpu
	// engine) as serve does on a GPU: into the batcher and into a pinned
	// pool of 64 MiB that request tensors are received into, so that
	// batches of them are gathered by the backend instead of copied. It
	// also gives the model a RegisterHost that accepts any memory as
	// page-locked (counted in HostRegisters), so that shared memory
	// inputs take the GPU's zero-copy path.
	Pinned bool
	// Images serves the image input: encoded images decoded on the CPU
	// with the ImageNet transform scaled to Size (preprocess.ImageNet).
	Images bool
	// MaxImagePixels bounds a decoded image (0: imageproc's default).
	MaxImagePixels int
	// DecodeInBackend decodes the images in the backend's pipeline (a
	// backend.HostDecoder on its copy stream) instead of in the server.
	DecodeInBackend bool
	// RankInBackend ranks classifications in the backend's pipeline (a
	// backend.HostPostprocessor, as the GPU's on the cuda engine) instead
	// of in the batcher from the logits.
	RankInBackend bool
	// Stages has the batcher report its requests' backend stages
	// (batcher.Config.Stages), for Config.LatencyBreakdown.
	Stages bool
}

// Server is a running test server.
type Server struct {
	Srv      *server.Server
	HTTPAddr string // host:port
	GRPCAddr string
	Name     string // model name
	Graph    *model.Graph
	Gate     *Gate // nil unless Options.Gated
	Opts     Options
	// HostAllocs counts the host allocator's calls (Options.Pinned).
	HostAllocs atomic.Int64
	// HostRegisters counts RegisterHost calls and HostUnregisters their
	// Frees (Options.Pinned).
	HostRegisters, HostUnregisters atomic.Int64

	model   *server.Model
	backend *backend.Backend
	cancel  context.CancelFunc
	done    chan error
	once    sync.Once
	stopped atomic.Bool
	stopErr error
}

// ModelName is the name test servers serve unless Options.Name is set.
const ModelName = "tiny"

// Start starts a server and registers its stop with t.Cleanup.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Size == 0 {
		opts.Size = 16
	}
	if opts.Classes == 0 {
		opts.Classes = 10
	}
	if opts.MaxBatch == 0 {
		opts.MaxBatch = 4
	}
	if opts.MaxQueue == 0 {
		opts.MaxQueue = 16
	}
	if opts.Inflight == 0 {
		opts.Inflight = 2
	}
	if opts.InputDType == tensor.Invalid {
		opts.InputDType = tensor.Float32
	}
	if opts.Name == "" {
		opts.Name = ModelName
	}
	a := model.NewArch(model.Basic, []int{1, 1, 1, 1}, 8, opts.Classes, 1, 64)
	sd, err := model.Init(context.Background(), a, 7)
	if err != nil {
		t.Fatal(err)
	}
	g, err := model.FromStateDict(sd)
	if err != nil {
		t.Fatal(err)
	}
	var pre *preprocess.CPU
	if opts.Images {
		if pre, err = preprocess.NewCPU(preprocess.ImageNet(opts.Size, opts.Size), preprocess.CPUOptions{Workers: 2, MaxPixels: opts.MaxImagePixels}); err != nil {
			t.Fatal(err)
		}
	}
	bcfg := backend.Config{NumWorkers: 1, QueueDepth: opts.Inflight, MaxBatch: opts.MaxBatch, CopyStreams: opts.DecodeInBackend}
	if opts.Images && opts.DecodeInBackend {
		bcfg.NewDecoder = func(_ int, _ engine.Device, info engine.Info) (backend.Decoder, error) {
			return backend.HostDecoder{Pre: pre, DType: info.Input().DType}, nil
		}
	}
	if opts.RankInBackend {
		bcfg.NewPostprocessor = func(int, engine.Device, engine.Info) (backend.Postprocessor, error) {
			return backend.HostPostprocessor{}, nil
		}
	}
	be := backend.New(bcfg)
	err = be.Start(context.Background(), func(ctx context.Context) (engine.Model, error) {
		return cpu.Engine{}.Load(ctx, g, engine.Options{Compile: true, MaxBatch: opts.MaxBatch,
			Height: opts.Size, Width: opts.Size, InputDType: opts.InputDType, Threads: 1})
	})
	if err != nil {
		t.Fatal(err)
	}
	<-be.Ready()
	if err := be.Err(); err != nil {
		t.Fatal(err)
	}
	info := be.Info()
	var sub backend.Submitter = be
	s := &Server{Name: opts.Name, Graph: g, Opts: opts, backend: be, done: make(chan error, 1)}
	if opts.Gated {
		s.Gate = &Gate{next: be, tokens: make(chan struct{}, 1<<16)}
		sub = s.Gate
	}
	cfg := server.Config{ModelName: opts.Name, MaxBatch: opts.MaxBatch, DrainTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	var allocHost func(n int) (engine.HostBuffer, error)
	if opts.Pinned {
		cfg.PinnedPoolBytes = 64 << 20
		allocHost = func(n int) (engine.HostBuffer, error) {
			s.HostAllocs.Add(1)
			return be.AllocHost(n)
		}
	}
	cfg.GRPCTransport = GRPCTransport
	if opts.Server != nil {
		opts.Server(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Srv = srv
	bt, err := batcher.New(sub, batcher.Config{
		Channels: info.Input().Shape[0], Height: opts.Size, Width: opts.Size, DType: info.Input().DType,
		Classes: info.OutputElems(), MaxBatch: opts.MaxBatch, MaxDelay: opts.MaxDelay, MaxQueue: opts.MaxQueue,
		MaxInflight: opts.Inflight, CopyWorkers: 1, Observe: srv.ObserveBatch, AllocHost: allocHost,
		Encoded: opts.Images && opts.DecodeInBackend, Stages: opts.Stages,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.model = &server.Model{Info: info, Labels: opts.Labels, Lanes: []server.Lane{{Height: opts.Size, Width: opts.Size, Batcher: bt}},
		AllocHost: allocHost}
	switch {
	case opts.Images && opts.DecodeInBackend:
		s.model.Images = &server.Images{Spec: pre.Spec()}
	case opts.Images:
		s.model.Images = &server.Images{Preprocessor: pre}
	}
	if opts.Pinned {
		s.model.RegisterHost = func(b []byte) (engine.HostBuffer, error) {
			s.HostRegisters.Add(1)
			return &registered{b: b, free: &s.HostUnregisters}, nil
		}
	}
	if !opts.NoModel {
		if err := srv.SetModel(s.model); err != nil {
			t.Fatal(err)
		}
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.HTTPAddr, s.GRPCAddr = hl.Addr().String(), gl.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.done <- srv.Serve(ctx, hl, gl) }()
	t.Cleanup(func() {
		if s.Gate != nil {
			s.Gate.Open()
		}
		if s.stopped.Load() {
			return // the test stopped it and checked the result
		}
		if err := s.Stop(); err != nil {
			t.Errorf("stopping the test server: %v", err)
		}
	})
	return s
}

// Model is the model the server serves (for SetModel with NoModel).
func (s *Server) Model() *server.Model { return s.model }

// Stop drains the server as SIGTERM would and closes the backend. It
// returns Serve's error; calling it again returns the same.
func (s *Server) Stop() error {
	s.stopped.Store(true)
	s.once.Do(func() {
		s.cancel()
		err := <-s.done
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.stopErr = errors.Join(err, s.backend.Close(ctx), s.Srv.Close())
	})
	return s.stopErr
}

// Expected computes the reference logits (float64 forward) of n float32
// images.
func (s *Server) Expected(t testing.TB, x []float32, n int) []float64 {
	t.Helper()
	want, err := s.Graph.Reference(context.Background(), x, n, s.Opts.Size, s.Opts.Size)
	if err != nil {
		t.Fatal(err)
	}
	return want
}

// Gate holds batches between the batcher and the backend until the test
// lets them through: a way to fill queues deterministically.
type Gate struct {
	next   backend.Submitter
	tokens chan struct{}
	mu     sync.Mutex
	open   bool
	held   int
}

// Submit waits for a token (or the gate to open), then passes req on.
func (g *Gate) Submit(req backend.Request) error {
	g.mu.Lock()
	open := g.open
	if !open {
		g.held++
	}
	g.mu.Unlock()
	if !open {
		<-g.tokens
		g.mu.Lock()
		g.held--
		g.mu.Unlock()
	}
	return g.next.Submit(req)
}

// Held is the number of batches waiting at the gate.
func (g *Gate) Held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

// Release lets n batches through.
func (g *Gate) Release(n int) {
	for range n {
		g.tokens <- struct{}{}
	}
}

// Open lets every batch through from now on.
func (g *Gate) Open() {
	g.mu.Lock()
	g.open = true
	held := g.held
	g.mu.Unlock()
	g.Release(held)
}

// WaitHeld waits until n batches wait at the gate.
func (g *Gate) WaitHeld(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for g.Held() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d batches at the gate, want %d", g.Held(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// RelErr is the largest error of got against want, relative to the
// largest magnitude in want.
func RelErr(got []float32, want []float64) float64 {
	scale := 1e-6
	for _, w := range want {
		scale = max(scale, abs(w))
	}
	worst := 0.0
	for i, g := range got {
		worst = max(worst, abs(float64(g)-want[i])/scale)
	}
	return worst
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// registered is memory "page-locked" by the test model's RegisterHost: the
// cpu engine reads any memory, so it only counts its Free.
type registered struct {
	b    []byte
	free *atomic.Int64
}

func (r *registered) Bytes() []byte { return r.b }

func (r *registered) Free() error {
	r.free.Add(1)
	return nil
}
