package loadgen

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"goinfer/internal/backend"
	"goinfer/internal/engine"
	"goinfer/internal/engine/cpu"
	"goinfer/internal/leakcheck"
	"goinfer/internal/metrics"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
)

func checkNoLeak(t *testing.T) {
	t.Helper()
	leakcheck.Check(t)
}

// server is a Submitter for testing the load generator's modes: each
// request is answered after a service time by its own goroutine, with
// logits derived from the input; it records what it saw.
type server struct {
	service  time.Duration
	classes  int
	mu       sync.Mutex
	sent     []time.Time // SentAt of each request, by arrival
	inFlight int
	maxIn    int
	fail     func(id uint64) (submitErr, respErr error, badShape bool)
	wg       sync.WaitGroup
}

func (s *server) Submit(req backend.Request) error {
	var submitErr, respErr error
	var badShape bool
	if s.fail != nil {
		submitErr, respErr, badShape = s.fail(req.ID)
	}
	if submitErr != nil {
		return submitErr
	}
	s.mu.Lock()
	s.sent = append(s.sent, req.SentAt)
	s.inFlight++
	s.maxIn = max(s.maxIn, s.inFlight)
	s.mu.Unlock()
	s.wg.Go(func() {
		time.Sleep(s.service)
		n := req.Input.Shape[0]
		out := req.Output
		if cap(out) < n*s.classes {
			out = make([]float32, n*s.classes)
		}
		out = out[:n*s.classes]
		for i := range out {
			out[i] = float32(i)
		}
		r := backend.Response{ID: req.ID, N: n, Classes: s.classes, Logits: out, SentAt: req.SentAt, Err: respErr}
		if badShape {
			r.Logits = out[:1]
		}
		if respErr != nil {
			r.Logits = nil
		}
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
		req.Reply <- r
	})
	return nil
}

func tinyInputs(t *testing.T, bs int) *Inputs {
	t.Helper()
	in, err := Generate(context.Background(), Shape{BatchSize: bs, Channels: 3, Height: 4, Width: 4, DType: tensor.Float32, Seed: 1}, 5)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func TestModes(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"flood", Config{NumIters: 40, Mode: Flood}},
		{"concurrency 3", Config{NumIters: 40, Mode: Concurrency, Concurrency: 3}},
		{"concurrency 1", Config{NumIters: 10, Mode: Concurrency, Concurrency: 1}},
		{"rate 400/s", Config{NumIters: 60, Mode: Rate, Rate: 400, Seed: 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkNoLeak(t)
			s := &server{service: 2 * time.Millisecond, classes: 5}
			var progress []int
			cfg := tt.cfg
			cfg.KeepResponses = true
			cfg.Progress = func(done, total int) {
				if total != cfg.NumIters {
					t.Errorf("progress total %d", total)
				}
				progress = append(progress, done)
			}
			res, err := Run(context.Background(), s, tinyInputs(t, 2), cfg)
			if err != nil {
				t.Fatal(err)
			}
			s.wg.Wait()
			n := cfg.NumIters
			if res.Errors != 0 || len(res.Latencies) != n || res.Images != 2*n || res.Classes != 5 {
				t.Fatalf("errors %d (%v), %d latencies, %d images, %d classes", res.Errors, res.FirstError, len(res.Latencies), res.Images, res.Classes)
			}
			if len(progress) != n || progress[n-1] != n {
				t.Errorf("progress calls %v", progress)
			}
			if res.Warmup < s.service.Seconds() {
				t.Errorf("warmup latency %v < service time", res.Warmup)
			}
			for _, l := range res.Latencies {
				if l < s.service.Seconds() {
					t.Fatalf("latency %v shorter than the service time", l)
				}
			}
			want := float64(res.Images) / res.LastResponse.Sub(res.FirstSend).Seconds()
			if math.Abs(res.Throughput-want) > 1e-9*want || len(res.Devices) != 1 || res.Devices[0].Images != res.Images {
				t.Errorf("throughput %v, want %v; devices %+v", res.Throughput, want, res.Devices)
			}
			if !math.IsNaN(res.GPU.MeanUtil) {
				t.Errorf("GPU util %v without a probe, want NaN", res.GPU.MeanUtil)
			}
			for i, r := range res.Responses {
				if r.ID != uint64(i) || r.Logits != nil {
					t.Fatalf("Responses[%d] has ID %d / logits kept", i, r.ID)
				}
			}
			switch cfg.Mode {
			case Flood:
				// Nothing paces the sender: the whole batch goes out long
				// before the first answers come back.
				if span := s.sent[len(s.sent)-1].Sub(s.sent[1]); span > time.Duration(n)*s.service {
					t.Errorf("flood took %v to send %d requests", span, n)
				}
			case Concurrency:
				if s.maxIn != cfg.Concurrency {
					t.Errorf("max in flight %d, want %d", s.maxIn, cfg.Concurrency)
				}
			case Rate:
				// Sends are scheduled: the mean gap estimates 1/rate. 60
				// exponential gaps have a relative std of 13%.
				gaps := s.sent[len(s.sent)-1].Sub(s.sent[1]).Seconds() / float64(n-1)
				if math.Abs(gaps*cfg.Rate-1) > 0.5 {
					t.Errorf("mean gap %v s at rate %v/s", gaps, cfg.Rate)
				}
				if cfg.ModeString() != "rate=400" {
					t.Errorf("ModeString %q", cfg.ModeString())
				}
			}
		})
	}
}

func TestErrorsAreCounted(t *testing.T) {
	checkNoLeak(t)
	boom := errors.New("engine exploded")
	s := &server{classes: 3, fail: func(id uint64) (error, error, bool) {
		switch {
		case id == 4:
			return errors.New("queue full"), nil, false
		case id != 0 && id%5 == 0:
			return nil, boom, false
		case id == 7:
			return nil, nil, true
		}
		return nil, nil, false
	}}
	res, err := Run(context.Background(), s, tinyInputs(t, 1), Config{NumIters: 20, KeepResponses: true})
	if err != nil {
		t.Fatal(err)
	}
	s.wg.Wait()
	// 4 (submit), 5, 10, 15, 20 (engine), 7 (shape).
	if res.Errors != 6 || len(res.Latencies) != 14 || res.Images != 14 {
		t.Fatalf("errors %d, latencies %d, images %d; want 6, 14, 14", res.Errors, len(res.Latencies), res.Images)
	}
	if res.FirstError == nil || !strings.Contains(res.FirstError.Error(), "request 4: submit: queue full") {
		t.Fatalf("first error %v", res.FirstError)
	}
	if !errors.Is(res.Responses[5].Err, boom) {
		t.Fatalf("response 5 err %v", res.Responses[5].Err)
	}
}

func TestWarmupFailure(t *testing.T) {
	checkNoLeak(t)
	boom := errors.New("no checkpoint")
	s := &server{classes: 3, fail: func(id uint64) (error, error, bool) { return nil, boom, false }}
	if _, err := Run(context.Background(), s, tinyInputs(t, 1), Config{NumIters: 3}); !errors.Is(err, boom) {
		t.Fatalf("err %v, want the warmup's", err)
	}
	s.wg.Wait()
}

// TestColdStart checks that the warmup latency counts from
// Config.ColdStart when the model began loading before the warmup went
// out, and from the send otherwise.
func TestColdStart(t *testing.T) {
	checkNoLeak(t)
	const service = 20 * time.Millisecond
	s := &server{service: service, classes: 3}
	for _, tc := range []struct {
		name     string
		before   time.Duration // ColdStart this long before Run (0: unset)
		min, max time.Duration
	}{
		{"unset", 0, service, service + time.Second},
		{"earlier", 300 * time.Millisecond, 300*time.Millisecond + service, 300*time.Millisecond + service + time.Second},
		{"later", -time.Hour, service, service + time.Second}, // after the send: ignored
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{NumIters: 1}
			if tc.before != 0 {
				cfg.ColdStart = time.Now().Add(-tc.before)
			}
			res, err := Run(context.Background(), s, tinyInputs(t, 1), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := time.Duration(res.Warmup * float64(time.Second)); got < tc.min || got > tc.max {
				t.Errorf("warmup latency %v, want %v to %v", got, tc.min, tc.max)
			}
		})
	}
	s.wg.Wait()
}

func TestCancel(t *testing.T) {
	checkNoLeak(t)
	s := &server{service: 20 * time.Millisecond, classes: 3}
	ctx, cancel := context.WithCancel(context.Background())
	cfg := Config{NumIters: 1000, Mode: Concurrency, Concurrency: 2, Progress: func(done, _ int) {
		if done == 3 {
			cancel()
		}
	}}
	if _, err := Run(ctx, s, tinyInputs(t, 1), cfg); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	s.wg.Wait()
}

func TestSamplerWindow(t *testing.T) {
	checkNoLeak(t)
	var calls atomic.Int64
	probe := func(context.Context) (metrics.GPUSample, error) {
		calls.Add(1)
		return metrics.GPUSample{Util: 40, MemMiB: 512}, nil
	}
	s := &server{service: 5 * time.Millisecond, classes: 2}
	res, err := Run(context.Background(), s, tinyInputs(t, 1), Config{NumIters: 20, Mode: Concurrency, Concurrency: 1, Probe: probe, SampleInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s.wg.Wait()
	if res.GPU.Samples < 2 || res.GPU.MeanUtil != 40 || res.GPU.PeakMemMiB != 512 {
		t.Fatalf("GPU stats %+v over a ~100 ms run sampled every 10 ms", res.GPU)
	}
}

func TestConfigErrors(t *testing.T) {
	in := tinyInputs(t, 1)
	for _, cfg := range []Config{
		{NumIters: 0},
		{NumIters: 1, Mode: Concurrency},
		{NumIters: 1, Mode: Rate, Rate: -1},
		{NumIters: 1, Mode: Rate, Rate: math.Inf(1)},
		{NumIters: 1, Mode: Mode(9)},
	} {
		if _, err := Run(context.Background(), &server{classes: 1}, in, cfg); err == nil {
			t.Errorf("config %+v: want an error", cfg)
		}
	}
	if _, err := Run(context.Background(), &server{classes: 1}, nil, Config{NumIters: 1}); err == nil {
		t.Error("nil inputs: want an error")
	}
}

func TestGenerate(t *testing.T) {
	base := Shape{BatchSize: 2, Channels: 3, Height: 16, Width: 16, DType: tensor.Float32, Seed: 5}
	a, err := Generate(context.Background(), base, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Tensors) != 4 {
		t.Fatalf("%d tensors, want 4", len(a.Tensors))
	}
	b, _ := Generate(context.Background(), base, 4)
	for i := range a.Tensors {
		if !slices.Equal(a.Tensors[i].Data, b.Tensors[i].Data) {
			t.Fatalf("tensor %d differs between runs with one seed", i)
		}
		if !a.Tensors[i].Shape.Equal(tensor.Shape{2, 3, 16, 16}) {
			t.Fatalf("shape %v", a.Tensors[i].Shape)
		}
	}
	if slices.Equal(a.Tensors[0].Data, a.Tensors[1].Data) {
		t.Fatal("tensors 0 and 1 are equal")
	}
	// Normal values: mean ~0, variance ~1 over 1536*4 samples.
	var sum, sq float64
	var cnt int
	for _, tt := range a.Tensors {
		for _, v := range tt.Float32s() {
			sum += float64(v)
			sq += float64(v) * float64(v)
			cnt++
		}
	}
	if mean, vr := sum/float64(cnt), sq/float64(cnt); math.Abs(mean) > 0.05 || math.Abs(vr-1) > 0.08 {
		t.Fatalf("fp32 inputs: mean %v variance %v, want ~N(0,1)", mean, vr)
	}

	f16 := base
	f16.DType = tensor.Float16
	h, err := Generate(context.Background(), f16, 1)
	if err != nil {
		t.Fatal(err)
	}
	hv, _ := h.Tensors[0].ToFloat32()
	av := a.Tensors[0].Float32s()
	for i := range hv {
		if math.Abs(float64(hv[i]-av[i])) > 2e-3*math.Max(1, math.Abs(float64(av[i]))) {
			t.Fatalf("fp16 value %d = %v, want the fp32 one (%v) rounded", i, hv[i], av[i])
		}
	}

	u8 := base
	u8.DType = tensor.Uint8
	u, err := Generate(context.Background(), u8, 1)
	if err != nil {
		t.Fatal(err)
	}
	var lo, hi byte = 255, 0
	for _, v := range u.Tensors[0].Data {
		lo, hi = min(lo, v), max(hi, v)
	}
	if lo > 5 || hi < 250 || len(u.Tensors[0].Data) != 2*3*16*16 {
		t.Fatalf("uint8 pixels span %d..%d, want ~0..255", lo, hi)
	}

	// Distinct caps the tensors; For cycles through them.
	d := base
	d.Distinct = 2
	c, _ := Generate(context.Background(), d, 10)
	if len(c.Tensors) != 2 || c.For(3) != c.Tensors[1] || c.For(4) != c.Tensors[0] {
		t.Fatal("Distinct=2 should give two tensors, cycled")
	}
	for _, bad := range []Shape{
		{BatchSize: 0, Channels: 3, Height: 4, Width: 4, DType: tensor.Float32},
		{BatchSize: 1, Channels: 3, Height: 0, Width: 4, DType: tensor.Float32},
		{BatchSize: 1, Channels: 3, Height: 4, Width: 4, DType: tensor.BFloat16},
		{BatchSize: 1, Channels: 3, Height: 4, Width: 4, DType: tensor.Float32, Distinct: -1},
		{BatchSize: 1 << 30, Channels: 1 << 10, Height: 1 << 10, Width: 4, DType: tensor.Float32},
	} {
		if _, err := Generate(context.Background(), bad, 1); err == nil {
			t.Errorf("shape %+v: want an error", bad)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Generate(ctx, base, 100); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Generate: %v", err)
	}
}

// TestAgainstBackend drives the real pipeline and cpu engine in every
// mode, with the model loading in the background during the warmup.
func TestAgainstBackend(t *testing.T) {
	a := model.NewArch(model.Basic, []int{1, 1, 1, 1}, 8, 10, 1, 64)
	sd, err := model.Init(context.Background(), a, 1)
	if err != nil {
		t.Fatal(err)
	}
	g, err := model.FromStateDict(sd)
	if err != nil {
		t.Fatal(err)
	}
	const size, bs = 32, 2
	in, err := Generate(context.Background(), Shape{BatchSize: bs, Channels: 3, Height: size, Width: size, DType: tensor.Float32, Seed: 3}, 11)
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []Config{
		{NumIters: 10},
		{NumIters: 10, Mode: Concurrency, Concurrency: 2},
		{NumIters: 10, Mode: Rate, Rate: 1000},
	} {
		t.Run(cfg.ModeString(), func(t *testing.T) {
			checkNoLeak(t)
			b := backend.New(backend.Config{NumWorkers: 2, CopyStreams: true, QueueDepth: cfg.NumIters + 1})
			loadDelay := 30 * time.Millisecond
			b.Start(context.Background(), func(ctx context.Context) (engine.Model, error) {
				time.Sleep(loadDelay)
				return cpu.Engine{}.Load(ctx, g, engine.Options{MaxBatch: bs, Height: size, Width: size, InputDType: tensor.Float32, Threads: 1})
			})
			res, err := Run(context.Background(), b, in, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if res.Responses != nil {
				t.Error("responses kept without KeepResponses")
			}
			if res.Errors != 0 || res.Images != bs*cfg.NumIters || res.Classes != 10 {
				t.Fatalf("errors %d (%v), images %d, classes %d", res.Errors, res.FirstError, res.Images, res.Classes)
			}
			if res.Warmup < loadDelay.Seconds() {
				t.Fatalf("warmup latency %v does not include the %v load", res.Warmup, loadDelay)
			}
			if st := res.Stats; !(st.Min <= st.P50 && st.P50 <= st.P90 && st.P90 <= st.P99 && st.P99 <= st.Max) || st.N != cfg.NumIters {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

type hostBuf struct {
	b     []byte
	freed *int
}

func (h *hostBuf) Bytes() []byte { return h.b }
func (h *hostBuf) Free() error   { *h.freed++; return nil }

func TestGeneratePinned(t *testing.T) {
	s := Shape{BatchSize: 2, Channels: 3, Height: 8, Width: 8, DType: tensor.Float32, Seed: 4}
	plain, err := Generate(context.Background(), s, 3)
	if err != nil {
		t.Fatal(err)
	}
	var allocs, freed int
	s.Alloc = func(n int) (engine.HostBuffer, error) {
		allocs++
		return &hostBuf{b: make([]byte, n+16), freed: &freed}, nil
	}
	in, err := Generate(context.Background(), s, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !in.Pinned || allocs != 3 {
		t.Fatalf("pinned %v after %d allocations, want true after 3", in.Pinned, allocs)
	}
	for i := range in.Tensors {
		if !slices.Equal(in.Tensors[i].Data, plain.Tensors[i].Data) || len(in.Tensors[i].Data) != s.Bytes() {
			t.Fatalf("pinned tensor %d differs from the plain one", i)
		}
	}
	// Requests built on pinned tensors say so.
	srv := &pinSeen{server: server{classes: 2}}
	if _, err := Run(context.Background(), srv, in, Config{NumIters: 2}); err != nil {
		t.Fatal(err)
	}
	srv.wg.Wait()
	if srv.pinned != 3 {
		t.Fatalf("%d of 3 requests marked Pinned", srv.pinned)
	}
	if err := in.Close(); err != nil || freed != 3 {
		t.Fatalf("Close: %v, %d freed", err, freed)
	}

	// A failed allocation frees what was allocated before it.
	freed, allocs = 0, 0
	s.Alloc = func(n int) (engine.HostBuffer, error) {
		if allocs++; allocs == 3 {
			return nil, errors.New("out of pinned memory")
		}
		return &hostBuf{b: make([]byte, n), freed: &freed}, nil
	}
	if _, err := Generate(context.Background(), s, 5); err == nil || !strings.Contains(err.Error(), "out of pinned memory") || freed != 2 {
		t.Fatalf("err %v, %d freed; want the allocation error and 2 buffers freed", err, freed)
	}
}

type pinSeen struct {
	server
	pinned int
}

func (p *pinSeen) Submit(r backend.Request) error {
	if r.Pinned {
		p.pinned++
	}
	return p.server.Submit(r)
}
