package backend

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"goinfer/internal/tensor"
)

// startReady starts a backend on loads and waits until it has loaded.
func startReady(t *testing.T, cfg Config, loads ...LoadFunc) *Backend {
	t.Helper()
	b := New(cfg)
	if err := b.StartDevices(context.Background(), loads...); err != nil {
		t.Fatal(err)
	}
	abortOnFailure(t, b)
	<-b.Ready()
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
	return b
}

// inlineCount sums Stats().Inline over the devices.
func inlineCount(b *Backend) (n uint64) {
	for _, s := range b.Stats() {
		n += s.Inline
	}
	return n
}

// TestInlineIdleRequests sends requests one at a time, each waiting for
// its answer, and checks which of them ran on the submitter's goroutine
// (the answer is there when Submit returns, and Stats counts it), that
// their logits and stage times are right, and that they spread over idle
// devices.
func TestInlineIdleRequests(t *testing.T) {
	const n = 12
	for _, c := range []struct {
		name    string
		cfg     Config
		devices int
		inline  bool // request marked Inline
		want    bool // run inline
		pinned  bool // input in pinned memory: copied on the worker's stream
	}{
		{"copy_streams", Config{CopyStreams: true, Profile: true}, 1, true, true, false},
		{"copy_streams_pinned", Config{CopyStreams: true, Profile: true}, 1, true, true, true},
		{"worker_streams", Config{NumWorkers: 2, StagingChunk: 100}, 1, true, true, false},
		{"two_devices", Config{CopyStreams: true}, 2, true, true, false},
		{"not_marked", Config{CopyStreams: true}, 1, false, false, false},
		{"off", Config{NoInline: true}, 1, true, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkNoLeak(t)
			var loads []LoadFunc
			for range c.devices {
				// Jitter on the streams makes a copy that is not ordered
				// before or after the forward show as wrong logits.
				loads = append(loads, loaderOf(newAsyncModel(tClasses, tC, tH, tW, tMaxBatch, 200*time.Microsecond)))
			}
			b := startReady(t, c.cfg, loads...)
			rng := rand.New(rand.NewPCG(31, 32))
			reply := make(chan Response, 1)
			perDevice := make([]int, c.devices)
			for i := range n {
				in := randInput(rng, 1+i%tMaxBatch)
				if err := b.Submit(Request{ID: uint64(i), Input: in, Reply: reply, SentAt: time.Now(), Inline: c.inline, Pinned: c.pinned}); err != nil {
					t.Fatal(err)
				}
				var r Response
				select {
				case r = <-reply:
				default:
					if c.want {
						t.Fatalf("request %d: not answered when Submit returned", i)
					}
					r = <-reply
				}
				if r.Err != nil || !slices.Equal(r.Logits, expectedLogits(in.Float32s(), in.Shape[0], tClasses)) {
					t.Fatalf("request %d: err %v or wrong logits", i, r.Err)
				}
				st := r.Stages
				times := []time.Time{st.Queued, st.Dequeued, st.WorkerStart, st.WorkerEnd, st.ReplyStart, r.DoneAt}
				if c.cfg.CopyStreams && !(c.want && c.pinned) {
					times = slices.Insert(times, 2, st.Staged)
					times = slices.Insert(times, 5, st.D2HStart, st.D2HEnd)
				}
				for k := 1; k < len(times); k++ {
					if times[k].IsZero() || times[k].Before(times[k-1]) {
						t.Fatalf("request %d: stage time %d (%v) is zero or before the one ahead of it (%v)", i, k, times[k], times[k-1])
					}
				}
				if c.cfg.Profile && (st.GPUH2D.Start.IsZero() || st.GPUCompute.End.Before(st.GPUCompute.Start) || st.GPUD2H.End.IsZero()) {
					t.Fatalf("request %d: device spans missing: %+v", i, st)
				}
				perDevice[r.Device]++
			}
			want := uint64(0)
			if c.want {
				want = n
			}
			if got := inlineCount(b); got != want {
				t.Errorf("%d requests ran inline, want %d", got, want)
			}
			if c.want && c.devices > 1 && slices.Contains(perDevice, 0) {
				t.Errorf("requests per device %v: inline runs did not spread", perDevice)
			}
			closeBackend(t, b)
		})
	}
}

// TestInlineEarlyAnswers: an Inline request that the model cannot run, or
// whose context is done, is answered at once, on an idle device too, and
// the device still serves the next one.
func TestInlineEarlyAnswers(t *testing.T) {
	checkNoLeak(t)
	b := startReady(t, Config{CopyStreams: true}, loaderOf(newAsyncModel(tClasses, tC, tH, tW, tMaxBatch, 0)))
	rng := rand.New(rand.NewPCG(33, 34))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	reply := make(chan Response, 1)
	for _, c := range []struct {
		name string
		req  Request
		want error
	}{
		{"too_large", Request{Input: randInput(rng, tMaxBatch+1)}, ErrInvalidInput},
		{"no_input", Request{}, ErrInvalidInput},
		{"cancelled", Request{Input: randInput(rng, 1), Ctx: cancelled}, context.Canceled},
		{"good", Request{Input: randInput(rng, 2)}, nil},
	} {
		req := c.req
		req.Reply, req.Inline = reply, true
		if err := b.Submit(req); err != nil {
			t.Fatalf("%s: Submit: %v", c.name, err)
		}
		select {
		case r := <-reply:
			if !errors.Is(r.Err, c.want) || (c.want != nil) != (r.Logits == nil) {
				t.Errorf("%s: err %v, %d logits; want %v", c.name, r.Err, len(r.Logits), c.want)
			}
		default:
			t.Fatalf("%s: not answered when Submit returned", c.name)
		}
	}
	if s := b.Stats()[0]; s.Requests != 4 || s.Errors != 3 || s.Inline != 1 {
		t.Errorf("stats %+v, want 4 requests, 3 errors, 1 inline", s)
	}
	closeBackend(t, b)
}

// TestInlineMixedLoad: submitters that alternate between waiting for each
// answer (the device goes idle, requests run inline) and bursts of
// requests in flight (pipelined) must each get their own request's logits,
// with an inline run never sharing a slot, stream or instance with the
// stages. The async device gets wrong logits when a buffer is reused too
// early; the cpu engine's instances are not safe for concurrent use, which
// -race reports. Close comes while the submitters still run.
func TestInlineMixedLoad(t *testing.T) {
	const size, maxBatch = 16, 3
	cpuLoad := loadNarrowCPU(t, size, maxBatch)
	rng := rand.New(rand.NewPCG(35, 36))
	cpuInputs := make([]*tensor.Tensor, 8)
	for i := range cpuInputs {
		cpuInputs[i] = randImages(rng, 1+i%maxBatch, size)
	}
	cpuWant := runAll(t, Config{NumWorkers: 1, Slots: 1}, cpuLoad, cpuInputs)
	asyncInputs := make([]*tensor.Tensor, 8)
	for i := range asyncInputs {
		asyncInputs[i] = randInput(rng, 1+i%tMaxBatch)
	}
	asyncLoad := func() LoadFunc {
		return loaderOf(newAsyncModel(tClasses, tC, tH, tW, tMaxBatch, 100*time.Microsecond))
	}
	for _, c := range []struct {
		name   string
		cfg    Config
		loads  []LoadFunc
		inputs []*tensor.Tensor
		want   func(i int) []float32
	}{
		{"cpu/copy_streams", Config{NumWorkers: 2, CopyStreams: true, StagingChunk: 1000}, []LoadFunc{cpuLoad},
			cpuInputs, func(i int) []float32 { return cpuWant[i] }},
		{"cpu/worker_streams/two_devices", Config{NumWorkers: 2}, []LoadFunc{cpuLoad, cpuLoad},
			cpuInputs, func(i int) []float32 { return cpuWant[i] }},
		{"async/copy_streams", Config{NumWorkers: 2, CopyStreams: true, Profile: true, StagingChunk: 64}, []LoadFunc{asyncLoad()},
			asyncInputs, func(i int) []float32 {
				return expectedLogits(asyncInputs[i].Float32s(), asyncInputs[i].Shape[0], tClasses)
			}},
		{"async/worker_streams", Config{NumWorkers: 1, StagingChunk: 64}, []LoadFunc{asyncLoad()},
			asyncInputs, func(i int) []float32 {
				return expectedLogits(asyncInputs[i].Float32s(), asyncInputs[i].Shape[0], tClasses)
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkNoLeak(t)
			b := startReady(t, c.cfg, c.loads...)
			testMixedLoad(t, b, c.inputs, c.want)
		})
	}
}

func testMixedLoad(t *testing.T, b *Backend, inputs []*tensor.Tensor, want func(i int) []float32) {
	const submitters, rounds, burst = 4, 9, 4
	var wg sync.WaitGroup
	var closed sync.Once
	stop := make(chan struct{})
	check := func(r Response) bool {
		if errors.Is(r.Err, ErrClosed) {
			return false
		}
		if r.Err != nil {
			t.Errorf("request %d: %v", r.ID, r.Err)
			return false
		}
		if got := r.Logits[:len(want(int(r.ID)))]; !slices.Equal(got, want(int(r.ID))) {
			t.Errorf("request %d (device %d, worker %d): wrong logits", r.ID, r.Device, r.Worker)
		}
		return true
	}
	for g := range submitters {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 37))
			reply := make(chan Response, burst)
			for round := 0; ; round++ {
				select {
				case <-stop:
					return
				default:
				}
				if round >= rounds {
					closed.Do(func() { close(stop) })
				}
				k := 1
				if round%3 == 2 {
					k = burst
				}
				sent := 0
				for range k {
					i := rng.IntN(len(inputs))
					err := b.Submit(Request{ID: uint64(i), Input: inputs[i], Reply: reply, Inline: k == 1})
					if errors.Is(err, ErrClosed) {
						break
					}
					if err != nil {
						t.Error(err)
						return
					}
					sent++
				}
				for range sent {
					check(<-reply)
				}
				if round%3 == 0 {
					time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
				}
			}
		})
	}
	<-stop
	closeBackend(t, b)
	wg.Wait()
	if inlineCount(b) == 0 {
		t.Log("no request ran inline (a busy machine keeps the device busy)")
	}
	if testing.Verbose() {
		t.Logf("stats %+v", b.Stats())
	}
}

// TestInlineClosedAndUnloaded: an Inline request queues like any other
// before the model has loaded, and is refused after Close.
func TestInlineClosedAndUnloaded(t *testing.T) {
	checkNoLeak(t)
	release := make(chan struct{})
	b := New(Config{})
	b.Start(context.Background(), gatedLoader(newAsyncModel(tClasses, tC, tH, tW, tMaxBatch, 0), release))
	reply := make(chan Response, 1)
	in := randInput(rand.New(rand.NewPCG(38, 39)), 1)
	if err := b.Submit(Request{Input: in, Reply: reply, Inline: true}); err != nil {
		t.Fatal(err)
	}
	close(release)
	if r := <-reply; r.Err != nil {
		t.Fatal(r.Err)
	}
	closeBackend(t, b)
	if err := b.Submit(Request{Input: in, Reply: reply, Inline: true}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit after Close = %v, want ErrClosed", err)
	}
}
