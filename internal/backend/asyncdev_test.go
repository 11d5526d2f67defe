package backend

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"goinfer/internal/engine"
	"goinfer/internal/tensor"
)

// asyncModel is a test device whose streams really are asynchronous, as
// CUDA's are: every stream is a goroutine that runs its queue in order,
// with random delays; copies read their source and write their destination
// when they run, not when they are enqueued; events complete when the
// stream reaches them. A pipeline that reuses a buffer before the device is
// done with it, or forgets a wait between streams, gets wrong logits here,
// where the synchronous cpu engine would hide the bug.
//
// Its forward computes, for image i and class c,
// logit = mean(image i) * (c+1) + c, which tests can check per request.
type asyncModel struct {
	info      engine.Info
	dev       *asyncDevice
	failBatch int // Forward of this many images fails (0: never)
	instances atomic.Int64
	closed    atomic.Bool
}

func newAsyncModel(classes, c, h, w, maxBatch int, jitter time.Duration) *asyncModel {
	m := &asyncModel{
		info: engine.Info{Engine: "async-test", Device: "async test device", Arch: "mean", MaxBatch: maxBatch},
		dev:  &asyncDevice{jitter: jitter},
	}
	m.info.Inputs, m.info.Outputs = engine.ClassifierSpecs(tensor.Float32, c, h, w, classes)
	return m
}

// expectedLogits is the asyncModel's forward on the host.
func expectedLogits(in []float32, n, classes int) []float32 {
	per := len(in) / n
	out := make([]float32, n*classes)
	for i := range n {
		var sum float32
		for _, v := range in[i*per : (i+1)*per] {
			sum += v
		}
		mean := sum / float32(per)
		for c := range classes {
			out[i*classes+c] = mean*float32(c+1) + float32(c)
		}
	}
	return out
}

func (m *asyncModel) Info() engine.Info     { return m.info }
func (m *asyncModel) Device() engine.Device { return m.dev }

func (m *asyncModel) NewInstance(ctx context.Context) (engine.Instance, error) {
	st, err := m.dev.NewStream()
	if err != nil {
		return nil, err
	}
	m.instances.Add(1)
	return &asyncInstance{m: m, st: st.(*asyncStream)}, nil
}

func (m *asyncModel) Close() error {
	if n := m.instances.Load(); n != 0 {
		return fmt.Errorf("model closed with %d instances open", n)
	}
	if m.closed.Swap(true) {
		return errors.New("model closed twice")
	}
	return nil
}

type asyncInstance struct {
	m      *asyncModel
	st     *asyncStream
	closed bool
}

func (in *asyncInstance) Stream() engine.Stream { return in.st }
func (in *asyncInstance) MemoryBytes() int64    { return 0 }

func (in *asyncInstance) Forward(inb, outb engine.Buffer, n int) error {
	info := in.m.info
	if n < 1 || n > info.MaxBatch {
		return fmt.Errorf("batch %d out of range", n)
	}
	if n == in.m.failBatch {
		return fmt.Errorf("async test device: batch of %d rejected", n)
	}
	src, dst := inb.(*asyncBuffer), outb.(*asyncBuffer)
	per := info.InputBytes()
	if n*per > len(src.data) || n*info.OutputBytes() > len(dst.data) {
		return errors.New("buffers too small")
	}
	in.st.enqueue(func() {
		src.use()
		dst.use()
		logits := expectedLogits(tensor.BytesF32(src.data[:n*per]), n, info.OutputElems())
		copy(dst.data, tensor.F32Bytes(logits))
	})
	return nil
}

func (in *asyncInstance) Close() error {
	if in.closed {
		return errors.New("instance closed twice")
	}
	in.closed = true
	in.m.instances.Add(-1)
	return in.st.Close()
}

// asyncDevice counts live resources so tests can check that Close frees
// everything.
type asyncDevice struct {
	jitter time.Duration
	// sync runs every op at enqueue time, as the cpu engine does: for
	// benchmarks of the pipeline alone.
	sync bool
	live atomic.Int64
}

func (d *asyncDevice) Name() string { return "async test device" }

func (d *asyncDevice) Alloc(n int) (engine.Buffer, error) {
	d.live.Add(1)
	return &asyncBuffer{d: d, data: make([]byte, n)}, nil
}

func (d *asyncDevice) AllocHost(n int) (engine.HostBuffer, error) {
	d.live.Add(1)
	return &asyncBuffer{d: d, data: make([]byte, n)}, nil
}

func (d *asyncDevice) NewStream() (engine.Stream, error) {
	d.live.Add(1)
	s := &asyncStream{d: d, ops: make(chan func(), 1024), done: make(chan struct{}), rng: rand.New(rand.NewPCG(uint64(d.live.Load()), 7))}
	go s.loop()
	return s, nil
}

func (d *asyncDevice) NewEvent() (engine.Event, error) {
	d.live.Add(1)
	e := &asyncEvent{d: d}
	e.cond = sync.NewCond(&e.mu)
	return e, nil
}

type asyncBuffer struct {
	d     *asyncDevice
	data  []byte
	freed atomic.Bool
}

func (b *asyncBuffer) Size() int     { return len(b.data) }
func (b *asyncBuffer) Bytes() []byte { return b.data }

// use panics (failing the test run) when the device touches freed memory.
func (b *asyncBuffer) use() {
	if b.freed.Load() {
		panic("async test device: buffer used after Free")
	}
}

func (b *asyncBuffer) Free() error {
	if b.freed.Swap(true) {
		return errors.New("buffer freed twice")
	}
	b.d.live.Add(-1)
	return nil
}

type asyncStream struct {
	d      *asyncDevice
	ops    chan func()
	done   chan struct{}
	rng    *rand.Rand // used by loop only
	closed bool
}

func (s *asyncStream) loop() {
	defer close(s.done)
	for op := range s.ops {
		// Sleeps are coarse (about a millisecond at least), so only some ops
		// sleep; the others just let the other goroutines run first.
		if s.d.jitter > 0 {
			if s.rng.IntN(8) == 0 {
				time.Sleep(time.Duration(s.rng.Int64N(int64(s.d.jitter))))
			} else {
				runtime.Gosched()
			}
		}
		op()
	}
}

func (s *asyncStream) enqueue(op func()) {
	if s.d.sync {
		op()
		return
	}
	s.ops <- op
}

func (s *asyncStream) CopyToDevice(dst engine.Buffer, off int, src []byte) error {
	d := dst.(*asyncBuffer)
	if off < 0 || off+len(src) > len(d.data) {
		return fmt.Errorf("copy of %d bytes at %d out of a %d-byte buffer", len(src), off, len(d.data))
	}
	s.enqueue(func() { d.use(); copy(d.data[off:], src) })
	return nil
}

func (s *asyncStream) CopyToHost(dst []byte, src engine.Buffer, off int) error {
	b := src.(*asyncBuffer)
	if off < 0 || off+len(dst) > len(b.data) {
		return fmt.Errorf("copy of %d bytes at %d out of a %d-byte buffer", len(dst), off, len(b.data))
	}
	s.enqueue(func() { b.use(); copy(dst, b.data[off:off+len(dst)]) })
	return nil
}

func (s *asyncStream) Record(e engine.Event) error {
	ev := e.(*asyncEvent)
	ev.mu.Lock()
	ev.pending++
	gen := ev.pending
	ev.mu.Unlock()
	s.enqueue(func() {
		ev.mu.Lock()
		if gen > ev.completed {
			ev.completed, ev.at = gen, time.Now()
		}
		ev.cond.Broadcast()
		ev.mu.Unlock()
	})
	return nil
}

func (s *asyncStream) Wait(e engine.Event) error {
	ev := e.(*asyncEvent)
	ev.mu.Lock()
	target := ev.pending
	ev.mu.Unlock()
	s.enqueue(func() { ev.waitFor(target) })
	return nil
}

func (s *asyncStream) Synchronize() error {
	done := make(chan struct{})
	s.enqueue(func() { close(done) })
	<-done
	return nil
}

func (s *asyncStream) Close() error {
	if s.closed {
		return errors.New("stream closed twice")
	}
	s.closed = true
	close(s.ops)
	<-s.done
	s.d.live.Add(-1)
	return nil
}

// asyncEvent follows CUDA's semantics: Synchronize and Wait refer to the
// most recent Record at the time they are called.
type asyncEvent struct {
	d                  *asyncDevice
	mu                 sync.Mutex
	cond               *sync.Cond
	pending, completed uint64
	at                 time.Time
	closed             bool
}

func (e *asyncEvent) waitFor(gen uint64) {
	e.mu.Lock()
	for e.completed < gen {
		e.cond.Wait()
	}
	e.mu.Unlock()
}

func (e *asyncEvent) Synchronize() error {
	e.mu.Lock()
	target := e.pending
	e.mu.Unlock()
	e.waitFor(target)
	return nil
}

func (e *asyncEvent) Done() (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.completed >= e.pending, nil
}

func (e *asyncEvent) Since(start engine.Event) (time.Duration, error) {
	s := start.(*asyncEvent)
	s.mu.Lock()
	t0, ok0 := s.at, s.completed > 0
	s.mu.Unlock()
	e.mu.Lock()
	t1, ok1 := e.at, e.completed > 0
	e.mu.Unlock()
	if !ok0 || !ok1 {
		return 0, errors.New("event not completed")
	}
	return t1.Sub(t0), nil
}

func (e *asyncEvent) Close() error {
	if e.closed {
		return errors.New("event closed twice")
	}
	e.closed = true
	e.d.live.Add(-1)
	return nil
}
