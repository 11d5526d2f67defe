package batcher

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"goinfer/internal/backend"
	"goinfer/internal/engine"
	"goinfer/internal/tensor"
	"goinfer/internal/topk"
)

// meanModel is a real backend.Submitter for a model that is easy to check:
// logit k of an image is the mean of its (float32 or float16) values plus
// k. It runs batches one at a time on its own goroutine, like a device, so
// the batcher's queueing, merging and splitting are exercised for real.
type meanModel struct {
	classes int
	queue   chan backend.Request
	gate    chan struct{} // when not nil, each batch waits for a token
	delay   time.Duration

	received atomic.Int64 // batches submitted

	mu       sync.Mutex
	batches  []int // padded sizes, in order
	images   int
	inputs   []unsafe.Pointer // first byte of each batch's input
	parts    [][][]byte       // each batch's Parts
	pinned   []bool
	failNext error
	// rank answers requests with TopK with their ranked classes only, as
	// a backend with a Postprocessor does.
	rank bool
}

func newMeanModel(t *testing.T, classes int, gated bool) *meanModel {
	m := &meanModel{classes: classes, queue: make(chan backend.Request, 64)}
	if gated {
		m.gate = make(chan struct{}, 1024)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for req := range m.queue {
			m.run(req)
		}
	}()
	t.Cleanup(func() {
		close(m.queue)
		<-done
	})
	return m
}

func (m *meanModel) Submit(req backend.Request) error {
	m.received.Add(1)
	m.queue <- req
	return nil
}

func (m *meanModel) release(n int) {
	for range n {
		m.gate <- struct{}{}
	}
}

func (m *meanModel) run(req backend.Request) {
	if m.gate != nil {
		<-m.gate
	}
	start := time.Now()
	if req.Ctx != nil && req.Ctx.Err() != nil {
		req.Reply <- backend.Response{ID: req.ID, Err: req.Ctx.Err()}
		return
	}
	time.Sleep(m.delay)
	n := req.Input.Shape[0]
	per := req.Input.Shape[1] * req.Input.Shape[2] * req.Input.Shape[3]
	in := req.Input
	if len(req.Parts) > 0 {
		// Gathered: padding images are zero here (a device would hold
		// whatever was there).
		g := *req.Input
		g.Data = make([]byte, n*per*g.DType.Size())
		at := 0
		for _, p := range req.Parts {
			at += copy(g.Data[at:], p)
		}
		in = &g
	}
	vals, err := in.ToFloat32()
	if err != nil {
		req.Reply <- backend.Response{ID: req.ID, Err: err}
		return
	}
	out := req.Output
	if len(out) < n*m.classes {
		out = make([]float32, n*m.classes)
	}
	for i := range n {
		var s float64
		for _, v := range vals[i*per : (i+1)*per] {
			s += float64(v)
		}
		for k := range m.classes {
			out[i*m.classes+k] = float32(s/float64(per)) + float32(k)
		}
	}
	m.mu.Lock()
	m.batches = append(m.batches, n)
	m.images += n
	if len(req.Parts) > 0 {
		m.inputs = append(m.inputs, unsafe.Pointer(&req.Parts[0][0]))
		m.parts = append(m.parts, slices.Clone(req.Parts))
	} else {
		m.inputs = append(m.inputs, unsafe.Pointer(&req.Input.Data[0]))
		m.parts = append(m.parts, nil)
	}
	m.pinned = append(m.pinned, req.Pinned)
	err, m.failNext = m.failNext, nil
	m.mu.Unlock()
	if m.rank && req.TopK > 0 {
		top := req.Top
		if len(top) < n*req.TopK {
			top = make([]topk.Class, n*req.TopK)
		}
		topk.BestRows(top, out[:n*m.classes], m.classes, req.TopK, req.Softmax)
		req.Reply <- backend.Response{ID: req.ID, Top: top[:n*req.TopK], N: n, Classes: m.classes,
			SentAt: req.SentAt, DoneAt: time.Now(), Compute: time.Since(start), Err: err}
		return
	}
	req.Reply <- backend.Response{ID: req.ID, Logits: out[:n*m.classes], N: n, Classes: m.classes,
		SentAt: req.SentAt, DoneAt: time.Now(), Compute: time.Since(start), Err: err}
}

func (m *meanModel) seen() (batches []int, images int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]int(nil), m.batches...), m.images
}

const (
	testC, testH, testW = 3, 4, 5
	testClasses         = 3
)

func newTestBatcher(t *testing.T, m *meanModel, mod func(*Config)) *Batcher {
	t.Helper()
	cfg := Config{Channels: testC, Height: testH, Width: testW, DType: tensor.Float32,
		Classes: testClasses, MaxBatch: 8, MaxDelay: time.Hour, MaxQueue: 32, MaxInflight: 2}
	if mod != nil {
		mod(&cfg)
	}
	b, err := New(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for m.gate != nil && len(m.gate) < cap(m.gate) {
			m.gate <- struct{}{}
		}
		b.Close(ctx)
	})
	return b
}

// images returns n float32 images; image i is filled with base+i.
func images(n int, base float32) Input {
	per := testC * testH * testW
	v := make([]float32, n*per)
	for i := range n {
		for j := range per {
			v[i*per+j] = base + float32(i)
		}
	}
	return Input{DType: tensor.Float32, N: n, Data: tensor.F32Bytes(v)}
}

// checkLogits verifies out for n images whose means are base, base+1, ...
func checkLogits(t *testing.T, out []float32, n int, base float32) {
	t.Helper()
	for i := range n {
		for k := range testClasses {
			want := base + float32(i) + float32(k)
			if got := out[i*testClasses+k]; math.Abs(float64(got-want)) > 1e-3 {
				t.Fatalf("image %d logit %d = %v, want %v", i, k, got, want)
			}
		}
	}
}

type result struct {
	res Result
	out []float32
	err error
}

// inferAsync runs Infer on its own goroutine.
func inferAsync(ctx context.Context, b *Batcher, in Input) <-chan result {
	ch := make(chan result, 1)
	go func() {
		out := make([]float32, in.N*testClasses)
		res, err := b.Infer(ctx, in, out)
		ch <- result{res, out, err}
	}()
	return ch
}

// waitReceived waits until the model has been handed n batches.
func waitReceived(t *testing.T, m *meanModel, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for m.received.Load() != n {
		if time.Now().After(deadline) {
			t.Fatalf("model received %d batches, want %d", m.received.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitQueued waits until the batcher holds n queued images.
func waitQueued(t *testing.T, b *Batcher, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for b.QueueDepth() != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue depth %d, want %d", b.QueueDepth(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestMergesUpToMaxBatch(t *testing.T) {
	m := newMeanModel(t, testClasses, false)
	b := newTestBatcher(t, m, nil) // MaxDelay 1h: only a full batch goes
	var chans []<-chan result
	for i := range 8 {
		chans = append(chans, inferAsync(context.Background(), b, images(1, float32(10*i))))
	}
	for i, ch := range chans {
		r := <-ch
		if r.err != nil {
			t.Fatalf("request %d: %v", i, r.err)
		}
		checkLogits(t, r.out, 1, float32(10*i))
		if r.res.BatchSize != 8 {
			t.Errorf("request %d ran in a batch of %d, want 8", i, r.res.BatchSize)
		}
	}
	if got, _ := m.seen(); len(got) != 1 || got[0] != 8 {
		t.Errorf("backend saw batches %v, want [8]", got)
	}
}

func TestMaxDelaySendsPartialBatch(t *testing.T) {
	m := newMeanModel(t, testClasses, false)
	const delay = 30 * time.Millisecond
	b := newTestBatcher(t, m, func(c *Config) { c.MaxDelay = delay })
	start := time.Now()
	r := <-inferAsync(context.Background(), b, images(2, 5))
	if r.err != nil {
		t.Fatal(r.err)
	}
	if el := time.Since(start); el < delay {
		t.Errorf("answered after %v, before the %v queue delay", el, delay)
	}
	if r.res.QueueWait < delay {
		t.Errorf("QueueWait %v, want at least %v", r.res.QueueWait, delay)
	}
	checkLogits(t, r.out, 2, 5)
	if got, _ := m.seen(); len(got) != 1 || got[0] != 2 {
		t.Errorf("backend saw batches %v, want [2]", got)
	}
}

func TestZeroDelayDoesNotWait(t *testing.T) {
	m := newMeanModel(t, testClasses, false)
	b := newTestBatcher(t, m, func(c *Config) { c.MaxDelay = 0 })
	r := <-inferAsync(context.Background(), b, images(1, 1))
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.res.QueueWait > 100*time.Millisecond {
		t.Errorf("QueueWait %v with zero delay", r.res.QueueWait)
	}
}

func TestIdleDispatch(t *testing.T) {
	m := newMeanModel(t, testClasses, true)
	b := newTestBatcher(t, m, func(c *Config) { c.IdleDispatch = true }) // MaxDelay 1h
	// Idle: the first request goes at once, alone.
	first := inferAsync(context.Background(), b, images(1, 0))
	waitReceived(t, m, 1)
	// Busy: the next ones wait for the device, then go together.
	var chans []<-chan result
	for i := range 3 {
		chans = append(chans, inferAsync(context.Background(), b, images(1, float32(i+1))))
	}
	waitQueued(t, b, 3)
	if n := m.received.Load(); n != 1 {
		t.Fatalf("%d batches sent while the device was busy; want the requests held", n)
	}
	m.release(2)
	if r := <-first; r.err != nil || r.res.BatchSize != 1 {
		t.Fatalf("first: %v, batch %d", r.err, r.res.BatchSize)
	}
	for i, ch := range chans {
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		checkLogits(t, r.out, 1, float32(i+1))
		if r.res.BatchSize != 3 {
			t.Errorf("request %d ran in a batch of %d, want 3", i, r.res.BatchSize)
		}
	}
}

func TestSplitsOversizeRequest(t *testing.T) {
	m := newMeanModel(t, testClasses, false)
	b := newTestBatcher(t, m, func(c *Config) { c.MaxBatch = 4; c.MaxDelay = 0 })
	r := <-inferAsync(context.Background(), b, images(10, 100))
	if r.err != nil {
		t.Fatal(r.err)
	}
	checkLogits(t, r.out, 10, 100)
	got, n := m.seen()
	if fmt.Sprint(got) != "[4 4 2]" || n != 10 {
		t.Errorf("backend saw batches %v (%d images), want [4 4 2]", got, n)
	}
	if r.res.BatchSize != 4 {
		t.Errorf("BatchSize %d, want 4", r.res.BatchSize)
	}
}

func TestDoesNotTearSmallRequests(t *testing.T) {
	m := newMeanModel(t, testClasses, true)
	b := newTestBatcher(t, m, func(c *Config) { c.MaxBatch = 4; c.MaxInflight = 1; c.MaxDelay = 0 })
	// A occupies the only slot; B (3) and C (2) queue behind it. C does not
	// fit next to B, so it must wait for its own batch, whole.
	ra := inferAsync(context.Background(), b, images(1, 0))
	waitReceived(t, m, 1)
	rb := inferAsync(context.Background(), b, images(3, 10))
	waitQueued(t, b, 3)
	rc := inferAsync(context.Background(), b, images(2, 20))
	waitQueued(t, b, 5)
	m.release(3)
	for _, r := range []result{<-ra, <-rb, <-rc} {
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	if got, _ := m.seen(); fmt.Sprint(got) != "[1 3 2]" {
		t.Errorf("backend saw batches %v, want [1 3 2]", got)
	}
}

func TestPadsToPreferredSize(t *testing.T) {
	m := newMeanModel(t, testClasses, true)
	var stats []BatchStats
	var mu sync.Mutex
	b := newTestBatcher(t, m, func(c *Config) {
		c.MaxInflight = 1
		c.MaxDelay = 0
		c.PreferredSizes = []int{1, 2, 4, 8}
		c.Observe = func(s BatchStats) { mu.Lock(); stats = append(stats, s); mu.Unlock() }
	})
	first := inferAsync(context.Background(), b, images(1, 0))
	waitReceived(t, m, 1)
	var chans []<-chan result
	for i := range 3 {
		chans = append(chans, inferAsync(context.Background(), b, images(1, float32(7*i+1))))
	}
	waitQueued(t, b, 3)
	m.release(2)
	if r := <-first; r.err != nil {
		t.Fatal(r.err)
	}
	for i, ch := range chans {
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		checkLogits(t, r.out, 1, float32(7*i+1))
		if r.res.BatchSize != 3 {
			t.Errorf("BatchSize %d, want 3 real images", r.res.BatchSize)
		}
	}
	if got, _ := m.seen(); fmt.Sprint(got) != "[1 4]" {
		t.Errorf("backend saw batches %v, want [1 4] (3 padded to 4)", got)
	}
	// Observe runs after a batch's requests are answered: wait for it.
	deadline := time.Now().Add(5 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	for len(stats) < 2 && time.Now().Before(deadline) {
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
	}
	if len(stats) != 2 || stats[1].Images != 3 || stats[1].Padded != 4 || stats[1].Requests != 3 {
		t.Errorf("observed %+v", stats)
	}
}

func TestZeroCopyForWholeRequest(t *testing.T) {
	m := newMeanModel(t, testClasses, false)
	b := newTestBatcher(t, m, func(c *Config) { c.MaxDelay = 0 })
	in := images(2, 3)
	out := make([]float32, 2*testClasses)
	if _, err := b.Infer(context.Background(), in, out); err != nil {
		t.Fatal(err)
	}
	checkLogits(t, out, 2, 3)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inputs[0] != unsafe.Pointer(&in.Data[0]) {
		t.Error("a request that is a whole batch was copied; want its own bytes submitted")
	}
}

// hostBuf is Go memory standing in for page-locked memory.
type hostBuf struct {
	b     []byte
	freed *atomic.Int64
}

func (h *hostBuf) Bytes() []byte { return h.b }
func (h *hostBuf) Free() error   { h.freed.Add(1); return nil }

func TestAllocHostBuffersArePinnedAndFreed(t *testing.T) {
	m := newMeanModel(t, testClasses, false)
	var allocs, freed atomic.Int64
	var mine []unsafe.Pointer
	var mu sync.Mutex
	cfg := Config{Channels: testC, Height: testH, Width: testW, DType: tensor.Float32, Classes: testClasses,
		MaxBatch: 4, MaxInflight: 2,
		AllocHost: func(n int) (engine.HostBuffer, error) {
			allocs.Add(1)
			b := make([]byte, n)
			mu.Lock()
			mine = append(mine, unsafe.Pointer(&b[0]))
			mu.Unlock()
			return &hostBuf{b: b, freed: &freed}, nil
		}}
	b, err := New(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := images(2, 4)
	out := make([]float32, 2*testClasses)
	if _, err := b.Infer(context.Background(), in, out); err != nil {
		t.Fatal(err)
	}
	checkLogits(t, out, 2, 4)
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.pinned[0] || m.inputs[0] == unsafe.Pointer(&in.Data[0]) || m.inputs[0] != mine[0] {
		t.Error("the batch was not assembled in the host allocator's buffer and submitted as pinned")
	}
	if allocs.Load() != 1 || freed.Load() != 1 {
		t.Errorf("%d host buffers allocated, %d freed; want 1 and 1", allocs.Load(), freed.Load())
	}
}

// TestPinnedRequestsAreNotCopied checks that requests already in pinned
// memory reach the backend without a host copy: a whole batch as its own
// bytes, a merged (and padded) batch as parts pointing into each request.
func TestPinnedRequestsAreNotCopied(t *testing.T) {
	m := newMeanModel(t, testClasses, true)
	var allocs atomic.Int64
	b := newTestBatcher(t, m, func(c *Config) {
		c.MaxBatch, c.MaxDelay, c.MaxInflight, c.PreferredSizes = 8, 0, 1, []int{8}
		c.AllocHost = func(n int) (engine.HostBuffer, error) {
			allocs.Add(1)
			return &hostBuf{b: make([]byte, n), freed: new(atomic.Int64)}, nil
		}
	})
	pinned := func(n int, base float32) Input {
		in := images(n, base)
		in.Pinned = true
		return in
	}
	// The first batch holds the device; the next three queue and merge.
	first := pinned(8, 1)
	r0 := inferAsync(context.Background(), b, first)
	waitReceived(t, m, 1)
	ins := []Input{pinned(2, 10), pinned(1, 20), pinned(3, 30)}
	var rs []<-chan result
	for _, in := range ins {
		rs = append(rs, inferAsync(context.Background(), b, in))
	}
	waitQueued(t, b, 6)
	m.release(2)
	if r := <-r0; r.err != nil {
		t.Fatal(r.err)
	} else {
		checkLogits(t, r.out, 8, 1)
	}
	for k, r := range rs {
		got := <-r
		if got.err != nil {
			t.Fatal(got.err)
		}
		checkLogits(t, got.out, ins[k].N, []float32{10, 20, 30}[k])
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inputs[0] != unsafe.Pointer(&first.Data[0]) || !m.pinned[0] || m.parts[0] != nil {
		t.Error("a pinned request that is a whole batch was not submitted as its own pinned bytes")
	}
	if len(m.batches) != 2 || m.batches[1] != 8 || !m.pinned[1] || len(m.parts[1]) != 3 {
		t.Fatalf("batches %v, pinned %v, %d parts; want a second batch of 3 pinned parts padded to 8", m.batches, m.pinned, len(m.parts[1]))
	}
	// The three arrive in any order; each part must be one of them.
	for k, p := range m.parts[1] {
		if !slices.ContainsFunc(ins, func(in Input) bool {
			return unsafe.Pointer(&p[0]) == unsafe.Pointer(&in.Data[0]) && len(p) == len(in.Data)
		}) {
			t.Errorf("part %d is not a request's own bytes", k)
		}
	}
	if allocs.Load() != 0 {
		t.Errorf("%d batch buffers allocated; pinned requests need none", allocs.Load())
	}
}

func TestQueueFullRefusesAtOnce(t *testing.T) {
	m := newMeanModel(t, testClasses, true)
	b := newTestBatcher(t, m, func(c *Config) { c.MaxInflight = 1; c.MaxQueue = 4; c.MaxDelay = 0 })
	first := inferAsync(context.Background(), b, images(1, 0)) // on the "device", stuck
	waitReceived(t, m, 1)
	queued := inferAsync(context.Background(), b, images(4, 1)) // fills the queue
	waitQueued(t, b, 4)
	if err := b.Admit(1); !errors.Is(err, ErrQueueFull) {
		t.Errorf("Admit with a full queue: %v, want ErrQueueFull", err)
	}
	start := time.Now()
	_, err := b.Infer(context.Background(), images(1, 2), make([]float32, testClasses))
	if !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Infer with a full queue: %v, want ErrQueueFull", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("refusal took %v; want at once", el)
	}
	m.release(2)
	for _, ch := range []<-chan result{first, queued} {
		if r := <-ch; r.err != nil {
			t.Fatal(r.err)
		}
	}
	if err := b.Admit(1); err != nil {
		t.Errorf("Admit after the queue drained: %v", err)
	}
}

func TestCancelRemovesQueuedWork(t *testing.T) {
	m := newMeanModel(t, testClasses, true)
	b := newTestBatcher(t, m, func(c *Config) { c.MaxInflight = 1; c.MaxDelay = 0 })
	first := inferAsync(context.Background(), b, images(1, 0))
	waitReceived(t, m, 1)
	ctx, cancel := context.WithCancel(context.Background())
	victim := inferAsync(ctx, b, images(3, 1))
	waitQueued(t, b, 3)
	cancel()
	select {
	case r := <-victim:
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled request: %v, want context.Canceled", r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled request still waiting")
	}
	if d := b.QueueDepth(); d != 0 {
		t.Errorf("queue depth %d after the cancel, want 0", d)
	}
	m.release(1)
	if r := <-first; r.err != nil {
		t.Fatal(r.err)
	}
	// The cancelled images never reach the backend.
	after := inferAsync(context.Background(), b, images(1, 9))
	m.release(1)
	if r := <-after; r.err != nil {
		t.Fatal(r.err)
	}
	if _, n := m.seen(); n != 2 {
		t.Errorf("backend ran %d images, want 2 (the cancelled 3 dropped)", n)
	}
}

func TestDeadlineWhileQueued(t *testing.T) {
	m := newMeanModel(t, testClasses, true)
	b := newTestBatcher(t, m, func(c *Config) { c.MaxInflight = 1; c.MaxDelay = 0 })
	first := inferAsync(context.Background(), b, images(1, 0))
	waitReceived(t, m, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	r := <-inferAsync(ctx, b, images(1, 1))
	if !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want DeadlineExceeded", r.err)
	}
	m.release(1)
	<-first
}

func TestCancelWhileOnDeviceWaitsForDevice(t *testing.T) {
	m := newMeanModel(t, testClasses, true)
	b := newTestBatcher(t, m, func(c *Config) { c.MaxDelay = 0 })
	ctx, cancel := context.WithCancel(context.Background())
	// The request goes to the "device" at once and is held there by the
	// gate: cancelling it must not return before the device lets go of its
	// buffers.
	r1 := inferAsync(ctx, b, images(8, 0))
	waitReceived(t, m, 1)
	cancel()
	select {
	case r := <-r1:
		t.Fatalf("Infer returned (%v) while its batch was still on the device", r.err)
	case <-time.After(20 * time.Millisecond):
	}
	m.release(1)
	if r := <-r1; r.err != nil && !errors.Is(r.err, context.Canceled) {
		t.Fatalf("got %v", r.err)
	}
}

func TestBackendErrorReachesEveryRequest(t *testing.T) {
	m := newMeanModel(t, testClasses, false)
	m.failNext = errors.New("device fell off the bus")
	b := newTestBatcher(t, m, func(c *Config) { c.MaxBatch = 2 })
	r1, r2 := inferAsync(context.Background(), b, images(1, 0)), inferAsync(context.Background(), b, images(1, 1))
	for _, r := range []result{<-r1, <-r2} {
		if r.err == nil || r.err.Error() != "device fell off the bus" {
			t.Errorf("got %v, want the backend's error", r.err)
		}
	}
}

func TestConversions(t *testing.T) {
	per := testC * testH * testW
	f16 := func(vals ...float32) Input {
		d := make([]byte, 0, 2*per*len(vals))
		for _, v := range vals {
			h := tensor.Float32ToF16(v)
			for range per {
				d = append(d, byte(h), byte(h>>8))
			}
		}
		return Input{DType: tensor.Float16, N: len(vals), Data: d}
	}
	u8 := Input{DType: tensor.Uint8, N: 1, Data: make([]byte, per)}
	for i := range u8.Data {
		u8.Data[i] = 200
	}
	// Mean over channels of the normalized pixel 200.
	var u8mean float64
	for c := range testC {
		u8mean += (200.0/255 - float64(engine.ImageNetMean[c])) / float64(engine.ImageNetStd[c])
	}
	u8mean /= testC

	tests := []struct {
		name    string
		model   tensor.DType
		in      Input
		want    float32 // mean of the first image
		wantErr bool
	}{
		{"fp16 into fp32", tensor.Float32, f16(1.5, 2.5), 1.5, false},
		{"fp32 into fp16", tensor.Float16, images(2, 3), 3, false},
		{"uint8 into fp32", tensor.Float32, u8, float32(u8mean), false},
		{"uint8 into fp16", tensor.Float16, u8, float32(u8mean), false},
		{"uint8 into uint8", tensor.Uint8, u8, 200, false},
		{"fp32 into uint8", tensor.Uint8, images(1, 3), 0, true},
		{"int32", tensor.Float32, Input{DType: tensor.Int32, N: 1, Data: make([]byte, 4*per)}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMeanModel(t, testClasses, false)
			b := newTestBatcher(t, m, func(c *Config) { c.DType = tt.model; c.MaxDelay = 0 })
			out := make([]float32, tt.in.N*testClasses)
			_, err := b.Infer(context.Background(), tt.in, out)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("got %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := out[0]; math.Abs(float64(got-tt.want)) > 2e-2 {
				t.Errorf("first logit %v, want %v", got, tt.want)
			}
		})
	}
}

func TestInvalidInput(t *testing.T) {
	m := newMeanModel(t, testClasses, false)
	b := newTestBatcher(t, m, nil)
	good := images(1, 0)
	tests := []struct {
		name string
		in   Input
		want error
	}{
		{"zero images", Input{DType: tensor.Float32, N: 0}, ErrInvalid},
		{"short data", Input{DType: tensor.Float32, N: 1, Data: good.Data[:len(good.Data)-4]}, ErrInvalid},
		{"more than the queue", images(33, 0), ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.Infer(context.Background(), tt.in, make([]float32, max(tt.in.N, 1)*testClasses))
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestCloseDrainsQueue(t *testing.T) {
	m := newMeanModel(t, testClasses, false)
	m.delay = 5 * time.Millisecond
	b := newTestBatcher(t, m, func(c *Config) { c.MaxBatch = 2; c.MaxInflight = 1 })
	var chans []<-chan result
	for i := range 5 {
		chans = append(chans, inferAsync(context.Background(), b, images(1, float32(i))))
	}
	// 2+2 go in batches; the fifth waits for company for an hour.
	waitReceived(t, m, 2)
	waitQueued(t, b, 1)
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, ch := range chans {
		r := <-ch
		if r.err != nil {
			t.Fatalf("request %d: %v", i, r.err)
		}
		checkLogits(t, r.out, 1, float32(i))
	}
	if _, err := b.Infer(context.Background(), images(1, 0), make([]float32, testClasses)); !errors.Is(err, ErrClosed) {
		t.Errorf("Infer after Close: %v, want ErrClosed", err)
	}
}

func TestCloseDeadlineFailsQueued(t *testing.T) {
	m := newMeanModel(t, testClasses, true)
	b := newTestBatcher(t, m, func(c *Config) { c.MaxInflight = 1; c.MaxDelay = 0 })
	first := inferAsync(context.Background(), b, images(1, 0))
	waitReceived(t, m, 1)
	queued := inferAsync(context.Background(), b, images(1, 1))
	waitQueued(t, b, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := b.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close: %v, want DeadlineExceeded", err)
	}
	if r := <-queued; !errors.Is(r.err, ErrClosed) {
		t.Errorf("queued request: %v, want ErrClosed", r.err)
	}
	m.release(1)
	if r := <-first; r.err != nil {
		t.Errorf("request on the device: %v, want its answer", r.err)
	}
}

// TestConcurrentMixedLoad runs many clients of random sizes, some
// cancelled, and checks every answer that arrives is the client's own.
func TestConcurrentMixedLoad(t *testing.T) {
	m := newMeanModel(t, testClasses, false)
	b := newTestBatcher(t, m, func(c *Config) {
		c.MaxBatch = 8
		c.MaxDelay = 200 * time.Microsecond
		c.MaxQueue = 64
		c.PreferredSizes = []int{1, 2, 4, 8}
		c.CopyWorkers = 2
	})
	var ok, refused, cancelled atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 40 {
				n := 1 + rng.IntN(12)
				base := float32(g*1000 + i*13)
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(8) == 0 {
					cancel()
				}
				out := make([]float32, n*testClasses)
				_, err := b.Infer(ctx, images(n, base), out)
				cancel()
				switch {
				case err == nil:
					checkLogits(t, out, n, base)
					ok.Add(1)
				case errors.Is(err, ErrQueueFull):
					refused.Add(1)
				case errors.Is(err, context.Canceled):
					cancelled.Add(1)
				default:
					t.Errorf("unexpected error %v", err)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load() == 0 {
		t.Fatal("no request succeeded")
	}
	t.Logf("ok %d, refused %d, cancelled %d", ok.Load(), refused.Load(), cancelled.Load())
	if d := b.QueueDepth(); d != 0 {
		t.Errorf("queue depth %d after all clients left", d)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	m := newMeanModel(t, testClasses, false)
	base := Config{Channels: 3, Height: 4, Width: 4, DType: tensor.Float32, Classes: 2, MaxBatch: 4}
	tests := []struct {
		name string
		mod  func(*Config)
	}{
		{"zero max batch", func(c *Config) { c.MaxBatch = 0 }},
		{"negative delay", func(c *Config) { c.MaxDelay = -1 }},
		{"no classes", func(c *Config) { c.Classes = 0 }},
		{"bf16 input", func(c *Config) { c.DType = tensor.BFloat16 }},
		{"negative queue", func(c *Config) { c.MaxQueue = -1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			tt.mod(&cfg)
			if _, err := New(m, cfg); err == nil {
				t.Error("New accepted it")
			}
		})
	}
}

// TestTopK asks for ranked classes from a backend that ranks them (only
// the classes come back) and from one that returns logits (Infer ranks
// them): the same classes either way, requests of one ranking merged into
// a batch and requests of another kept apart.
func TestTopK(t *testing.T) {
	for _, rank := range []bool{true, false} {
		t.Run(fmt.Sprintf("device ranks %v", rank), func(t *testing.T) {
			m := newMeanModel(t, testClasses, true)
			m.rank = rank
			b := newTestBatcher(t, m, func(c *Config) { c.MaxDelay = 100 * time.Millisecond })
			type ask struct {
				n, k    int
				softmax bool
				base    float32
			}
			asks := []ask{{2, 2, true, 0}, {3, 2, true, 10}, {1, 1, false, 20}, {2, 3, false, 30}}
			var wg sync.WaitGroup
			queued := 0
			for _, a := range asks {
				// One at a time, so that they queue in this order.
				for b.QueueDepth() < queued {
					time.Sleep(100 * time.Microsecond)
				}
				queued += a.n
				wg.Add(1)
				go func() {
					defer wg.Done()
					in := images(a.n, a.base)
					in.TopK, in.Softmax, in.Top = a.k, a.softmax, make([]topk.Class, a.n*a.k)
					out := make([]float32, a.n*testClasses)
					res, err := b.Infer(context.Background(), in, out)
					if err != nil {
						t.Error(err)
						return
					}
					if res.Ranked != rank {
						t.Errorf("Ranked %v, want %v", res.Ranked, rank)
					}
					logits := make([]float32, a.n*testClasses)
					for i := range a.n {
						for c := range testClasses {
							logits[i*testClasses+c] = a.base + float32(i) + float32(c)
						}
					}
					want := make([]topk.Class, a.n*a.k)
					topk.BestRows(want, logits, testClasses, a.k, a.softmax)
					for i, w := range want {
						if g := in.Top[i]; g.Index != w.Index || math.Abs(float64(g.Value-w.Value)) > 1e-3 {
							t.Errorf("%+v: class %d is %+v, want %+v", a, i, g, w)
						}
					}
				}()
			}
			m.release(16)
			wg.Wait()
			if batches, images := m.seen(); images != 8 || len(batches) != 3 {
				t.Errorf("batches %v (%d images); want the two top-2 softmax requests merged, 3 batches", batches, images)
			}
		})
	}
	b := newTestBatcher(t, newMeanModel(t, testClasses, false), nil)
	in := images(2, 0)
	in.TopK, in.Top = 2, make([]topk.Class, 3)
	if _, err := b.Infer(context.Background(), in, make([]float32, 2*testClasses)); !errors.Is(err, ErrInvalid) {
		t.Errorf("no room for the classes: %v, want ErrInvalid", err)
	}
}
