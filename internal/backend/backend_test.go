package backend

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"goinfer/internal/engine"
	"goinfer/internal/leakcheck"
	"goinfer/internal/tensor"
)

// Small images keep the tests fast; 8 classes, 3x5x7 inputs.
const (
	tClasses   = 8
	tC, tH, tW = 3, 5, 7
	tMaxBatch  = 4
)

func randInput(rng *rand.Rand, n int) *tensor.Tensor {
	v := make([]float32, n*tC*tH*tW)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	t, err := tensor.FromFloat32(tensor.Shape{n, tC, tH, tW}, v)
	if err != nil {
		panic(err)
	}
	return t
}

// checkNoLeak fails the test if goroutines started during it are still
// running after it ends.
func checkNoLeak(t *testing.T) {
	t.Helper()
	leakcheck.Check(t)
}

func loaderOf(m engine.Model) LoadFunc {
	return func(context.Context) (engine.Model, error) { return m, nil }
}

// gatedLoader returns m once release is closed (or fails with ctx's error).
func gatedLoader(m engine.Model, release <-chan struct{}) LoadFunc {
	return func(ctx context.Context) (engine.Model, error) {
		select {
		case <-release:
			return m, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// abortOnFailure makes a failed test stop b quickly, so that its
// goroutines do not outlive the test.
func abortOnFailure(t *testing.T, b *Backend) {
	t.Cleanup(func() {
		if t.Failed() {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			b.Close(ctx)
		}
	})
}

func closeBackend(t *testing.T, b *Backend) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

type sent struct {
	in     *tensor.Tensor
	n      int
	pinned bool
	out    []float32 // the response's logits, as delivered
	cpy    []float32 // a copy taken on delivery
}

func TestPipelineLogits(t *testing.T) {
	for _, workers := range []int{1, 3} {
		for _, copyStreams := range []bool{true, false} {
			for _, profile := range []bool{false, true} {
				name := fmt.Sprintf("workers=%d/copy_streams=%v/profile=%v", workers, copyStreams, profile)
				t.Run(name, func(t *testing.T) {
					checkNoLeak(t)
					testPipelineLogits(t, Config{NumWorkers: workers, CopyStreams: copyStreams, Profile: profile,
						QueueDepth: 8, StagingChunk: 160, StagingBuffers: 2}, 1)
				})
			}
		}
	}
	t.Run("two devices", func(t *testing.T) {
		checkNoLeak(t)
		testPipelineLogits(t, Config{NumWorkers: 2, CopyStreams: true, QueueDepth: 4, StagingChunk: 256}, 2)
	})
}

func testPipelineLogits(t *testing.T, cfg Config, devices int) {
	var models []*asyncModel
	var loads []LoadFunc
	for range devices {
		m := newAsyncModel(tClasses, tC, tH, tW, tMaxBatch, 200*time.Microsecond)
		models = append(models, m)
		loads = append(loads, loaderOf(m))
	}
	b := New(cfg)
	if err := b.StartDevices(context.Background(), loads...); err != nil {
		t.Fatal(err)
	}
	abortOnFailure(t, b)
	const perSender, senders = 40, 3
	total := perSender * senders
	reqs := make([]sent, total)
	rng := rand.New(rand.NewPCG(1, 2))
	var pinned []engine.HostBuffer
	for i := range reqs {
		n := 1 + rng.IntN(tMaxBatch)
		reqs[i] = sent{in: randInput(rng, n), n: n}
		if i%3 == 0 {
			// Every third input lies in pinned memory, which the H2D
			// stage copies from directly.
			hb, _ := models[0].dev.AllocHost(len(reqs[i].in.Data))
			copy(hb.Bytes(), reqs[i].in.Data)
			reqs[i].in.Data = hb.Bytes()
			reqs[i].pinned = true
			pinned = append(pinned, hb)
		}
	}
	reply := make(chan Response, total)
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := s * perSender; i < (s+1)*perSender; i++ {
				// Every other request brings its own output buffer.
				var out []float32
				if i%2 == 0 {
					out = make([]float32, tMaxBatch*tClasses)
				}
				err := b.Submit(Request{ID: uint64(i), Input: reqs[i].in, SentAt: time.Now(), Reply: reply, Output: out, Pinned: reqs[i].pinned})
				if err != nil {
					t.Errorf("Submit %d: %v", i, err)
				}
			}
		})
	}
	seen := make([]bool, total)
	workersSeen := map[[2]int]bool{}
	for range total {
		r := <-reply
		if r.ID >= uint64(total) || seen[r.ID] {
			t.Fatalf("response with unexpected or repeated ID %d", r.ID)
		}
		seen[r.ID] = true
		if r.Err != nil {
			t.Fatalf("request %d: %v", r.ID, r.Err)
		}
		q := &reqs[r.ID]
		want := expectedLogits(q.in.Float32s(), q.n, tClasses)
		if r.N != q.n || r.Classes != tClasses || !slices.Equal(r.Logits, want) {
			t.Fatalf("request %d (n=%d): got N=%d classes=%d logits %v, want %v", r.ID, q.n, r.N, r.Classes, r.Logits, want)
		}
		if r.Worker < 0 || r.Worker >= cfg.NumWorkers || r.Device < 0 || r.Device >= devices {
			t.Fatalf("request %d: worker %d device %d out of range", r.ID, r.Worker, r.Device)
		}
		workersSeen[[2]int{r.Device, r.Worker}] = true
		st := r.Stages
		if st.Queued.IsZero() || st.Dequeued.Before(st.Queued) || st.WorkerStart.Before(st.Dequeued) ||
			st.ReplyStart.Before(st.WorkerEnd) || r.DoneAt.Before(st.ReplyStart) || r.QueueWait != st.Dequeued.Sub(st.Queued) {
			t.Fatalf("request %d: stage times out of order: %+v", r.ID, st)
		}
		if cfg.CopyStreams && (st.D2HStart.Before(st.WorkerEnd) || st.ReplyStart.Before(st.D2HEnd)) {
			t.Fatalf("request %d: D2H stage times out of order: %+v", r.ID, st)
		}
		if r.Compute <= 0 {
			t.Fatalf("request %d: compute time %v, want > 0 from the events", r.ID, r.Compute)
		}
		if cfg.Profile {
			for _, sp := range []Span{st.GPUH2D, st.GPUCompute, st.GPUD2H} {
				if sp.Start.IsZero() || sp.End.Before(sp.Start) {
					t.Fatalf("request %d: device span %+v", r.ID, sp)
				}
			}
			if st.GPUCompute.Start.Before(st.GPUH2D.End) || st.GPUD2H.Start.Before(st.GPUCompute.End) {
				t.Fatalf("request %d: device spans out of order: %+v", r.ID, st)
			}
		} else if !st.GPUCompute.Start.IsZero() {
			t.Fatalf("request %d: device spans without Profile", r.ID)
		}
		q.out = r.Logits
		q.cpy = slices.Clone(r.Logits)
	}
	wg.Wait()
	if cfg.NumWorkers > 1 && len(workersSeen) < 2 {
		t.Errorf("only %v ran requests", workersSeen)
	}
	stats := b.Stats()
	var imgs uint64
	for d, s := range stats {
		if s.Errors != 0 || s.Requests == 0 {
			t.Errorf("device %d stats %+v: want requests and no errors", d, s)
		}
		imgs += s.Images
	}
	var wantImgs uint64
	for _, q := range reqs {
		wantImgs += uint64(q.n)
	}
	if imgs != wantImgs {
		t.Errorf("stats count %d images, want %d", imgs, wantImgs)
	}
	closeBackend(t, b)
	for _, hb := range pinned {
		hb.Free()
	}
	// Logits delivered early must not have been touched by later requests.
	for i, q := range reqs {
		if !slices.Equal(q.out, q.cpy) {
			t.Fatalf("request %d's logits changed after delivery", i)
		}
	}
	for i, m := range models {
		if n := m.dev.live.Load(); n != 0 {
			t.Errorf("device %d: %d buffers/streams/events not freed", i, n)
		}
		if !m.closed.Load() {
			t.Errorf("device %d: model not closed", i)
		}
	}
}

func TestColdStartQueuesDuringLoad(t *testing.T) {
	checkNoLeak(t)
	m := newAsyncModel(tClasses, tC, tH, tW, tMaxBatch, 0)
	release := make(chan struct{})
	b := New(Config{NumWorkers: 2, CopyStreams: true})
	reply := make(chan Response, 1)
	in := randInput(rand.New(rand.NewPCG(3, 4)), 2)
	// The first request is sent before the model is even being loaded, as
	// the reference's warmup request is.
	if err := b.Submit(Request{ID: 7, Input: in, SentAt: time.Now(), Reply: reply}); err != nil {
		t.Fatal(err)
	}
	abortOnFailure(t, b)
	// The load lasts at least loadTime from the moment the loader runs
	// (the backend's goroutine may start it a little after Start returns).
	loading := make(chan struct{})
	gated := gatedLoader(m, release)
	if err := b.Start(context.Background(), func(ctx context.Context) (engine.Model, error) {
		close(loading)
		return gated(ctx)
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background(), gatedLoader(m, release)); err == nil {
		t.Fatal("second Start: want an error")
	}
	const loadTime = 50 * time.Millisecond
	<-loading
	select {
	case <-b.Ready():
		t.Fatal("Ready before the model loaded")
	case r := <-reply:
		t.Fatalf("answered before the model loaded: %+v", r)
	case <-time.After(loadTime):
	}
	if info := b.Info(); len(info.Outputs) != 0 || b.Err() != nil || b.Devices() != nil || b.Stats() != nil {
		t.Fatalf("before Ready: Info %+v Err %v", info, b.Err())
	}
	close(release)
	r := <-reply
	if r.Err != nil || r.ID != 7 || !slices.Equal(r.Logits, expectedLogits(in.Float32s(), 2, tClasses)) {
		t.Fatalf("response %+v", r)
	}
	if r.DoneAt.Sub(r.SentAt) < loadTime || r.QueueWait < loadTime {
		t.Fatalf("latency %v / queue wait %v should include the %v load", r.DoneAt.Sub(r.SentAt), r.QueueWait, loadTime)
	}
	<-b.Ready()
	if b.Info().OutputElems() != tClasses || len(b.Devices()) != 1 || b.Devices()[0].Load < loadTime {
		t.Fatalf("after Ready: %+v", b.Devices())
	}
	closeBackend(t, b)
}

func TestLoadErrorAnswersEveryRequest(t *testing.T) {
	checkNoLeak(t)
	boom := errors.New("checkpoint missing")
	release := make(chan struct{})
	b := New(Config{})
	reply := make(chan Response, 10)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 3 {
		if err := b.Submit(Request{ID: uint64(i), Input: randInput(rng, 1), Reply: reply}); err != nil {
			t.Fatal(err)
		}
	}
	b.Start(context.Background(), func(ctx context.Context) (engine.Model, error) {
		<-release
		return nil, boom
	})
	close(release)
	<-b.Ready()
	if !errors.Is(b.Err(), boom) {
		t.Fatalf("Err = %v, want %v", b.Err(), boom)
	}
	for i := 3; i < 5; i++ {
		if err := b.Submit(Request{ID: uint64(i), Input: randInput(rng, 1), Reply: reply}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[uint64]bool{}
	for range 5 {
		r := <-reply
		if !errors.Is(r.Err, boom) || r.Logits != nil {
			t.Fatalf("response %d: err %v, want the load error", r.ID, r.Err)
		}
		got[r.ID] = true
	}
	if len(got) != 5 {
		t.Fatalf("answered %v, want 5 distinct requests", got)
	}
	closeBackend(t, b)
}

func TestOneDeviceLoadFailureFailsAll(t *testing.T) {
	checkNoLeak(t)
	good := newAsyncModel(tClasses, tC, tH, tW, tMaxBatch, 0)
	b := New(Config{NumWorkers: 2, CopyStreams: true})
	// The third device would load forever: the failure cancels it.
	b.StartDevices(context.Background(), loaderOf(good), func(context.Context) (engine.Model, error) {
		return nil, errors.New("no such GPU")
	}, gatedLoader(good, make(chan struct{})))
	<-b.Ready()
	if err := b.Err(); err == nil || !errors.Is(err, b.Err()) {
		t.Fatal("want a load error")
	}
	if got := b.Err().Error(); got != "loading the model: device 1: no such GPU" {
		t.Fatalf("Err = %q", got)
	}
	closeBackend(t, b)
	if !good.closed.Load() || good.dev.live.Load() != 0 {
		t.Fatalf("the device that loaded was not released (closed %v, live %d)", good.closed.Load(), good.dev.live.Load())
	}
}

func TestBadRequestsFailAlone(t *testing.T) {
	checkNoLeak(t)
	m := newAsyncModel(tClasses, tC, tH, tW, tMaxBatch, 100*time.Microsecond)
	m.failBatch = 3 // the engine rejects batches of 3 at Forward
	b := New(Config{NumWorkers: 2, CopyStreams: true})
	b.Start(context.Background(), loaderOf(m))
	rng := rand.New(rand.NewPCG(7, 8))
	good := randInput(rng, 2)
	f16 := tensor.New(tensor.Float16, 1, tC, tH, tW)
	short := randInput(rng, 1)
	short.Data = short.Data[:8]
	cases := []struct {
		in      *tensor.Tensor
		wantErr string // "" for success
		invalid bool   // wraps ErrInvalidInput
	}{
		{good, "", false},
		{nil, "no input tensor", true},
		{tensor.New(tensor.Float32, 1, tC, tH+1, tW), "input shape [1 3 6 7], the model takes [n 3 5 7]", true},
		{tensor.New(tensor.Float32, tC, tH, tW), "input shape", true},
		{f16, "input dtype float16, the model takes float32", true},
		{randInput(rng, tMaxBatch+1), "batch of 5 images, the pipeline takes 1 to 4", true},
		{tensor.New(tensor.Float32, 0, tC, tH, tW), "batch of 0 images", true},
		{short, "has 8 bytes of data", true},
		{randInput(rng, 3), "worker", false},
		{good, "", false},
	}
	reply := make(chan Response, len(cases))
	for round := range 3 { // the pipeline keeps going after every failure
		for i, c := range cases {
			if err := b.Submit(Request{ID: uint64(i), Input: c.in, Reply: reply}); err != nil {
				t.Fatal(err)
			}
		}
		for range cases {
			r := <-reply
			c := cases[r.ID]
			switch {
			case c.wantErr == "" && r.Err != nil:
				t.Fatalf("round %d, request %d: unexpected error %v", round, r.ID, r.Err)
			case c.wantErr == "" && !slices.Equal(r.Logits, expectedLogits(c.in.Float32s(), c.in.Shape[0], tClasses)):
				t.Fatalf("round %d, request %d: wrong logits", round, r.ID)
			case c.wantErr != "" && (r.Err == nil || !strings.Contains(r.Err.Error(), c.wantErr)):
				t.Fatalf("round %d, request %d: err %v, want %q", round, r.ID, r.Err, c.wantErr)
			case c.wantErr != "" && errors.Is(r.Err, ErrInvalidInput) != c.invalid:
				t.Fatalf("round %d, request %d: errors.Is(%v, ErrInvalidInput) = %v", round, r.ID, r.Err, !c.invalid)
			case c.wantErr != "" && r.Logits != nil:
				t.Fatalf("round %d, request %d: logits on an error", round, r.ID)
			}
		}
	}
	closeBackend(t, b)
	if m.dev.live.Load() != 0 {
		t.Fatal("resources leaked")
	}
}

func TestCancelledWhileQueued(t *testing.T) {
	checkNoLeak(t)
	m := newAsyncModel(tClasses, tC, tH, tW, tMaxBatch, 0)
	m.failBatch = 1 // any single-image batch that reaches the device fails loudly
	release := make(chan struct{})
	b := New(Config{NumWorkers: 1, CopyStreams: true})
	b.Start(context.Background(), gatedLoader(m, release))
	rng := rand.New(rand.NewPCG(9, 10))
	reply := make(chan Response, 10)
	ctx, cancel := context.WithCancel(context.Background())
	for i := range 4 {
		req := Request{ID: uint64(i), Input: randInput(rng, 1), Reply: reply, Ctx: ctx}
		if i == 3 {
			req.Input = randInput(rng, 2)
			req.Ctx = context.Background()
		}
		if err := b.Submit(req); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	close(release)
	for range 4 {
		r := <-reply
		if r.ID == 3 {
			if r.Err != nil {
				t.Fatalf("live request failed: %v", r.Err)
			}
			continue
		}
		if !errors.Is(r.Err, context.Canceled) {
			t.Fatalf("request %d: err %v, want context.Canceled (and never the device's batch-1 error)", r.ID, r.Err)
		}
		if r.Worker != -1 || !r.Stages.WorkerStart.IsZero() {
			t.Fatalf("request %d reached a worker", r.ID)
		}
	}
	closeBackend(t, b)
}

func TestSubmitQueueFullAndClosed(t *testing.T) {
	checkNoLeak(t)
	m := newAsyncModel(tClasses, tC, tH, tW, tMaxBatch, 0)
	release := make(chan struct{})
	b := New(Config{QueueDepth: 2})
	b.Start(context.Background(), gatedLoader(m, release))
	rng := rand.New(rand.NewPCG(11, 12))
	reply := make(chan Response, 10)
	req := func(id uint64) Request { return Request{ID: id, Input: randInput(rng, 1), Reply: reply} }
	if err := b.Submit(Request{ID: 1}); err == nil {
		t.Fatal("request without Reply: want an error")
	}
	for i := range 2 {
		if err := b.TrySubmit(req(uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.TrySubmit(req(2)); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("TrySubmit on a full queue = %v, want ErrQueueFull", err)
	}
	// A blocked Submit gives up when its request's context does.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	r := req(3)
	r.Ctx = ctx
	if err := b.Submit(r); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocked Submit with an expiring ctx = %v", err)
	}
	cancel()
	// A blocked Submit gives up when Close begins.
	blocked := make(chan error)
	go func() { blocked <- b.Submit(req(4)) }()
	time.Sleep(10 * time.Millisecond)
	closed := make(chan error)
	go func() { closed <- b.Close(context.Background()) }()
	if err := <-blocked; !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit blocked during Close = %v, want ErrClosed", err)
	}
	if err := b.Submit(req(5)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit after Close = %v, want ErrClosed", err)
	}
	if err := b.TrySubmit(req(6)); !errors.Is(err, ErrClosed) {
		t.Fatalf("TrySubmit after Close = %v, want ErrClosed", err)
	}
	close(release) // Close drains: the two queued requests complete.
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if r := <-reply; r.Err != nil {
			t.Fatalf("queued request %d: %v", r.ID, r.Err)
		}
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if err := b.Start(context.Background(), loaderOf(m)); err == nil {
		t.Fatal("Start after Close: want an error")
	}
}

func TestCloseCancelsInFlight(t *testing.T) {
	for _, copyStreams := range []bool{true, false} {
		t.Run(fmt.Sprintf("copy_streams=%v", copyStreams), func(t *testing.T) {
			checkNoLeak(t)
			m := newAsyncModel(tClasses, tC, tH, tW, tMaxBatch, 2*time.Millisecond)
			b := New(Config{NumWorkers: 2, CopyStreams: copyStreams, QueueDepth: 100})
			b.Start(context.Background(), loaderOf(m))
			rng := rand.New(rand.NewPCG(13, 14))
			const n = 100
			reply := make(chan Response, n)
			for i := range n {
				if err := b.Submit(Request{ID: uint64(i), Input: randInput(rng, 2), Reply: reply}); err != nil {
					t.Fatal(err)
				}
			}
			<-reply // some work is done, most is queued or in flight
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err := b.Close(ctx)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Close with a cancelled ctx = %v, want context.Canceled", err)
			}
			var ok, cancelled int
			for range n - 1 {
				select {
				case r := <-reply:
					switch {
					case r.Err == nil:
						ok++
					case errors.Is(r.Err, ErrClosed) && errors.Is(r.Err, context.Canceled):
						cancelled++
					default:
						t.Fatalf("request %d: %v", r.ID, r.Err)
					}
				default:
					t.Fatalf("after Close, only %d+%d of %d requests were answered", ok, cancelled, n-1)
				}
			}
			if cancelled == 0 {
				t.Fatal("no request was cancelled")
			}
			if m.dev.live.Load() != 0 || !m.closed.Load() {
				t.Fatal("resources not freed after a cancelled Close")
			}
		})
	}
}

func TestStartContextAborts(t *testing.T) {
	checkNoLeak(t)
	m := newAsyncModel(tClasses, tC, tH, tW, tMaxBatch, 0)
	ctx, cancel := context.WithCancel(context.Background())
	b := New(Config{})
	b.Start(ctx, gatedLoader(m, make(chan struct{}))) // never loads by itself
	reply := make(chan Response, 1)
	if err := b.Submit(Request{ID: 1, Input: randInput(rand.New(rand.NewPCG(1, 1)), 1), Reply: reply}); err != nil {
		t.Fatal(err)
	}
	cancel()
	r := <-reply
	if !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("err = %v, want the load cancelled", r.Err)
	}
	<-b.Ready()
	if !errors.Is(b.Err(), context.Canceled) {
		t.Fatalf("Err = %v", b.Err())
	}
	closeBackend(t, b)
}

func TestCloseBeforeStart(t *testing.T) {
	checkNoLeak(t)
	b := New(Config{})
	reply := make(chan Response, 1)
	if err := b.Submit(Request{ID: 1, Reply: reply}); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := <-reply; !errors.Is(r.Err, ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", r.Err)
	}
}

// TestReplyToAbsentClient: Close with a cancelled context must not hang on
// a client that stopped reading its (unbuffered) Reply channel.
func TestReplyToAbsentClient(t *testing.T) {
	checkNoLeak(t)
	m := newAsyncModel(tClasses, tC, tH, tW, tMaxBatch, 0)
	b := New(Config{})
	b.Start(context.Background(), loaderOf(m))
	if err := b.Submit(Request{ID: 1, Input: randInput(rand.New(rand.NewPCG(1, 1)), 1), Reply: make(chan Response)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := b.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want the drain cut short", err)
	}
}

// TestCloseDrains: Close with a live context answers everything queued and
// in flight with logits before it returns.
func TestCloseDrains(t *testing.T) {
	checkNoLeak(t)
	m := newAsyncModel(tClasses, tC, tH, tW, tMaxBatch, time.Millisecond)
	b := New(Config{NumWorkers: 2, CopyStreams: true, QueueDepth: 50})
	b.Start(context.Background(), loaderOf(m))
	abortOnFailure(t, b)
	rng := rand.New(rand.NewPCG(15, 16))
	const n = 50
	reply := make(chan Response, n)
	ins := make([]*tensor.Tensor, n)
	for i := range n {
		ins[i] = randInput(rng, 1+i%tMaxBatch)
		if err := b.Submit(Request{ID: uint64(i), Input: ins[i], Reply: reply}); err != nil {
			t.Fatal(err)
		}
	}
	closeBackend(t, b) // returns only once all of them are answered
	for range n {
		select {
		case r := <-reply:
			if r.Err != nil || !slices.Equal(r.Logits, expectedLogits(ins[r.ID].Float32s(), ins[r.ID].Shape[0], tClasses)) {
				t.Fatalf("request %d: err %v or wrong logits after a draining Close", r.ID, r.Err)
			}
		default:
			t.Fatal("Close returned before every request was answered")
		}
	}
	if m.dev.live.Load() != 0 || !m.closed.Load() {
		t.Fatal("resources not freed")
	}
}
