package backend

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"goinfer/internal/engine"
	"goinfer/internal/tensor"
	"goinfer/internal/topk"
)

// The events of a slot, recorded on the streams that do its work.
const (
	evH2DStart = iota // Profile only
	evH2DEnd
	evComputeStart
	evComputeEnd
	evD2HStart // Profile only
	evD2HEnd
	numEvents
)

var eventNames = [numEvents]string{"H2D start", "H2D end", "compute start", "compute end", "D2H start", "D2H end"}

// slot is one request's worth of pipeline state. Slots are made once per
// pipeline and go round: free list -> H2D stage -> a worker -> D2H stage ->
// reply stage -> free list. A slot returns to the free list only after the
// reply stage has waited for the last event recorded for it, which follows
// all device work on its buffers, so a buffer is never reused while the
// device still reads or writes it.
type slot struct {
	devIn, devOut engine.Buffer
	devTop        engine.Buffer // the ranked classes, with a Postprocessor
	topK          int           // classes per image ranked on the device (0: logits came back)
	hostOut       engine.HostBuffer
	out           []float32 // hostOut as float32 logits
	ev            [numEvents]engine.Event
	recorded      [numEvents]bool
	last          engine.Event // the latest successfully recorded event

	it        item
	n         int
	worker    int
	err       error
	imageErrs []error // of an Encoded request, when some image failed
	st        Stages
}

// reset prepares a free slot for a new request.
func (s *slot) reset(it item, n int, dequeued time.Time) {
	s.it, s.n, s.worker, s.err, s.last, s.imageErrs, s.topK = it, n, -1, nil, nil, nil, 0
	s.recorded = [numEvents]bool{}
	s.st = Stages{Queued: it.queued, Dequeued: dequeued}
}

// record marks event e of s on stream st. A failure is the request's error
// (the first one wins); the chain of events keeps the last one that worked.
func (s *slot) record(st engine.Stream, e int) {
	if err := st.Record(s.ev[e]); err != nil {
		s.fail(fmt.Errorf("recording the %s event: %w", eventNames[e], err))
		return
	}
	s.recorded[e] = true
	s.last = s.ev[e]
}

func (s *slot) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

// pipeline runs one device: an H2D stage, NumWorkers workers, a D2H stage
// (with CopyStreams) and a reply stage, each a goroutine, connected by
// channels of *slot whose capacity is the slot count, so that no stage ever
// blocks on a full channel.
//
// The stages' goroutines are not locked to OS threads: engines make their
// device current on every call that needs it, and a hand-off to a goroutine
// locked to its own thread costs a thread wake-up (tens of microseconds;
// BenchmarkHandoff) where an unlocked one runs on the sender's processor
// within a microsecond. A batch-1 request crosses four such hand-offs.
type pipeline struct {
	b        *Backend
	index    int
	model    engine.Model
	dev      engine.Device
	info     engine.Info
	desc     DeviceInfo
	maxBatch int
	inBytes  int // per image
	classes  int

	post      Postprocessor // nil: logits always come back
	insts     []engine.Instance
	h2dStream engine.Stream   // CopyStreams only
	d2hStream engine.Stream   // CopyStreams only
	rings     []*stagingRing  // one for the H2D stream, or one per worker
	slots     []*slot         // all of them, for release
	free      chan *slot      // free list
	work      chan *slot      // H2D stage -> workers
	d2h       chan *slot      // workers -> D2H stage (CopyStreams)
	replies   chan *slot      // D2H stage (or workers) -> reply stage
	anchor    engine.Event    // device time zero of the Stages spans
	anchorAt  time.Time       // host time of anchor
	streams   []engine.Stream // streams this pipeline created, for release

	// gate is held by an inline run (inline.go) for its whole length;
	// inflight counts the requests past the H2D stage's admission that the
	// reply stage has not finished. An inline run starts only with the gate
	// and inflight at 0, and the H2D stage counts a request before it waits
	// for the gate, so the two never share a slot, stream or instance.
	gate     sync.Mutex
	inflight atomic.Int64

	requests, images, errors, inlined atomic.Uint64
}

// newPipeline loads the model and allocates everything the pipeline needs.
// On error, whatever was created is freed.
func newPipeline(ctx context.Context, b *Backend, index int, load LoadFunc) (p *pipeline, err error) {
	cfg := b.cfg
	t0 := time.Now()
	m, err := load(ctx)
	if err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("the loader returned no model")
	}
	p = &pipeline{b: b, index: index, model: m, dev: m.Device()}
	p.desc.Index = index
	p.desc.LoadStart = t0
	p.desc.Load = time.Since(t0)
	t1 := time.Now()
	defer func() {
		if err != nil {
			err = errors.Join(err, p.release())
			p = nil
		}
	}()
	if err := ctx.Err(); err != nil {
		return p, err
	}
	info := m.Info()
	if err := info.Validate(); err != nil {
		return p, fmt.Errorf("the model describes an unusable input or output: %w", err)
	}
	p.maxBatch = info.MaxBatch
	if cfg.MaxBatch > 0 {
		if cfg.MaxBatch > info.MaxBatch {
			return p, fmt.Errorf("MaxBatch %d is larger than the model's %d", cfg.MaxBatch, info.MaxBatch)
		}
		p.maxBatch = cfg.MaxBatch
	}
	p.inBytes = info.InputBytes()
	p.classes = info.OutputElems()
	inSize, outSize := p.maxBatch*p.inBytes, p.maxBatch*info.OutputBytes()

	var mem int64
	for k := range cfg.NumWorkers {
		inst, err := m.NewInstance(ctx)
		if err != nil {
			return p, fmt.Errorf("worker %d: creating its instance: %w", k, err)
		}
		p.insts = append(p.insts, inst)
		mem += inst.MemoryBytes()
	}
	if cfg.CopyStreams {
		if p.h2dStream, err = p.newStream("H2D"); err != nil {
			return p, err
		}
		if p.d2hStream, err = p.newStream("D2H"); err != nil {
			return p, err
		}
	}
	chunk := min(cfg.StagingChunk, inSize)
	nRings := 1
	if !cfg.CopyStreams {
		nRings = cfg.NumWorkers
	}
	for range nRings {
		r, err := newStagingRing(p.dev, chunk, cfg.StagingBuffers)
		if r != nil {
			p.rings = append(p.rings, r)
		}
		if err != nil {
			return p, err
		}
		if cfg.NewDecoder != nil {
			if r.dec, err = cfg.NewDecoder(index, p.dev, info); err != nil {
				return p, fmt.Errorf("image decoder: %w", err)
			}
		}
	}

	if cfg.NewPostprocessor != nil {
		if p.post, err = cfg.NewPostprocessor(index, p.dev, info); err != nil {
			return p, fmt.Errorf("postprocessor: %w", err)
		}
	}

	p.free = make(chan *slot, cfg.Slots)
	p.work = make(chan *slot, cfg.Slots)
	p.d2h = make(chan *slot, cfg.Slots)
	p.replies = make(chan *slot, cfg.Slots)
	for i := range cfg.Slots {
		s := &slot{}
		p.slots = append(p.slots, s)
		if s.devIn, err = p.dev.Alloc(inSize); err != nil {
			return p, fmt.Errorf("slot %d: allocating %d bytes of device input: %w", i, inSize, err)
		}
		if s.devOut, err = p.dev.Alloc(outSize); err != nil {
			return p, fmt.Errorf("slot %d: allocating %d bytes of device output: %w", i, outSize, err)
		}
		if p.post != nil {
			// Ranked pairs are copied back only when they are smaller
			// than the logits, so they fit the logits' buffers.
			if s.devTop, err = p.dev.Alloc(outSize); err != nil {
				return p, fmt.Errorf("slot %d: allocating %d bytes of device ranking output: %w", i, outSize, err)
			}
		}
		if s.hostOut, err = p.dev.AllocHost(outSize); err != nil {
			return p, fmt.Errorf("slot %d: allocating %d bytes of pinned output: %w", i, outSize, err)
		}
		if len(s.hostOut.Bytes()) < outSize {
			return p, fmt.Errorf("slot %d: the device returned %d bytes of pinned output for %d", i, len(s.hostOut.Bytes()), outSize)
		}
		s.out = tensor.BytesF32(s.hostOut.Bytes()[:outSize])
		for e := range s.ev {
			if s.ev[e], err = p.dev.NewEvent(); err != nil {
				return p, fmt.Errorf("slot %d: creating its %s event: %w", i, eventNames[e], err)
			}
		}
		mem += int64(inSize + outSize)
		p.free <- s
	}

	// The anchor ties device event times to the host clock: it is recorded
	// and waited for now, and every span is placed at anchorAt plus its
	// event's time since the anchor.
	if p.anchor, err = p.dev.NewEvent(); err != nil {
		return p, fmt.Errorf("creating the anchor event: %w", err)
	}
	st := p.h2dStream
	if st == nil {
		st = p.insts[0].Stream()
	}
	if err := st.Record(p.anchor); err != nil {
		return p, fmt.Errorf("recording the anchor event: %w", err)
	}
	if err := p.anchor.Synchronize(); err != nil {
		return p, fmt.Errorf("waiting for the anchor event: %w", err)
	}
	p.anchorAt = time.Now()

	// Info again: creating instances may have added compile-only work.
	p.info = m.Info()
	p.desc.Info = p.info
	p.desc.Setup = time.Since(t1)
	p.desc.MemoryBytes = p.info.WeightBytes + mem
	return p, nil
}

func (p *pipeline) newStream(name string) (engine.Stream, error) {
	s, err := p.dev.NewStream()
	if err != nil {
		return nil, fmt.Errorf("creating the %s stream: %w", name, err)
	}
	p.streams = append(p.streams, s)
	return s, nil
}

// run starts the stages, waits until the queue is closed and drained (or
// the backend aborted), and frees everything.
func (p *pipeline) run() error {
	var stages, workers sync.WaitGroup
	stages.Go(p.h2dLoop)
	next := p.replies
	if p.b.cfg.CopyStreams {
		next = p.d2h
		stages.Go(p.d2hLoop)
	}
	for k := range p.insts {
		workers.Go(func() { p.workerLoop(k, next) })
	}
	stages.Go(func() {
		workers.Wait()
		close(next)
	})
	stages.Go(p.replyLoop)
	stages.Wait()
	return p.release()
}

// h2dLoop takes a free slot, then a request (so that a busy device leaves
// requests to idle ones), checks it, stages its input to the device (with
// CopyStreams) and hands the slot to the workers.
func (p *pipeline) h2dLoop() {
	defer close(p.work)
	b := p.b
	for {
		var s *slot
		select {
		case s = <-p.free:
		case <-b.abortCtx.Done():
		}
		it, ok := <-b.queue
		if !ok {
			if s != nil {
				p.free <- s
			}
			return
		}
		now := time.Now()
		n, err := p.admit(it)
		if err == nil && (s == nil || b.aborted()) {
			err = b.abortErr()
		}
		if err != nil {
			if s != nil {
				p.free <- s
			}
			p.answerEarly(it, err)
			continue
		}
		// Counted before the gate, so that no inline run starts while this
		// request waits for one to end.
		p.inflight.Add(1)
		p.gate.Lock()
		p.gate.Unlock()
		s.reset(it, n, now)
		if b.cfg.CopyStreams {
			p.stageIn(s, p.h2dStream, p.rings[0], true)
		}
		p.work <- s
	}
}

// admit checks a request before it may touch the device and returns its
// batch size.
func (p *pipeline) admit(it item) (int, error) {
	if ctx := it.req.Ctx; ctx != nil && ctx.Err() != nil {
		return 0, ctx.Err()
	}
	t := it.req.Input
	if t == nil {
		return 0, fmt.Errorf("%w: request %d has no input tensor", ErrInvalidInput, it.req.ID)
	}
	in := p.info.Input()
	if t.DType != in.DType {
		return 0, fmt.Errorf("%w: input dtype %s, the model takes %s", ErrInvalidInput, t.DType, in.DType)
	}
	if len(t.Shape) != len(in.Shape)+1 || !slices.Equal(t.Shape[1:], in.Shape) {
		return 0, fmt.Errorf("%w: input shape %v, the model takes [n %v]", ErrInvalidInput, t.Shape, strings.Trim(fmt.Sprint(in.Shape), "[]"))
	}
	n := t.Shape[0]
	if n < 1 || n > p.maxBatch {
		return 0, fmt.Errorf("%w: batch of %d images, the pipeline takes 1 to %d", ErrInvalidInput, n, p.maxBatch)
	}
	if enc := it.req.Encoded; len(enc) > 0 {
		switch {
		case len(p.rings) == 0 || p.rings[0].dec == nil:
			return 0, fmt.Errorf("%w: request %d carries encoded images, and the pipeline has no image decoder", ErrInvalidInput, it.req.ID)
		case len(enc) > n:
			// Fewer is a batch padded up to a compiled size.
			return 0, fmt.Errorf("%w: %d encoded images for a batch of %d", ErrInvalidInput, len(enc), n)
		}
		return n, nil
	}
	if parts := it.req.Parts; len(parts) > 0 {
		total := 0
		for _, b := range parts {
			total += len(b)
		}
		if total > n*p.inBytes || total%p.inBytes != 0 {
			return 0, fmt.Errorf("%w: input %s%v comes in parts of %d bytes in all, want whole images of %d bytes and at most %d", ErrInvalidInput, t.DType, t.Shape, total, p.inBytes, n*p.inBytes)
		}
		return n, nil
	}
	if len(t.Data) != n*p.inBytes {
		return 0, fmt.Errorf("%w: input %s%v has %d bytes of data, want %d", ErrInvalidInput, t.DType, t.Shape, len(t.Data), n*p.inBytes)
	}
	return n, nil
}

// stageIn copies the request's input to s.devIn on st through ring. With
// fence it records evH2DEnd, which another stream's forward waits for;
// without, the forward follows on st itself, whose next event covers the
// copy, so the event is recorded only where something reads it (Profile's
// spans, a failed copy's wait).
func (p *pipeline) stageIn(s *slot, st engine.Stream, ring *stagingRing, fence bool) {
	if p.b.cfg.Profile {
		s.record(st, evH2DStart)
	}
	req := s.it.req
	var err error
	switch {
	case len(req.Encoded) > 0:
		var errs []error
		errs, err = ring.dec.Decode(req.Encoded, s.devIn, st)
		for _, e := range errs {
			if e != nil {
				s.imageErrs = errs
				break
			}
		}
		if err != nil {
			err = fmt.Errorf("decoding %d images: %w", len(req.Encoded), err)
		}
	case len(req.Parts) == 0:
		err = copyIn(s, st, ring, 0, req.Input.Data[:s.n*p.inBytes])
	default:
		at := 0
		for _, src := range req.Parts {
			if err = copyIn(s, st, ring, at, src); err != nil {
				break
			}
			at += len(src)
		}
	}
	if err != nil && len(req.Encoded) > 0 {
		s.fail(err)
	} else if err != nil {
		s.fail(fmt.Errorf("H2D copy: %w", err))
	}
	// Recorded even after a failed copy, so that the slot's buffers are not
	// reused before what was enqueued has finished.
	if fence || p.b.cfg.Profile || s.err != nil {
		s.record(st, evH2DEnd)
	}
	s.st.Staged = time.Now()
}

// copyIn enqueues the copy of src to s.devIn at offset at: straight from
// pinned memory, else through ring.
func copyIn(s *slot, st engine.Stream, ring *stagingRing, at int, src []byte) error {
	if s.it.req.Pinned {
		return st.CopyToDevice(s.devIn, at, src)
	}
	return ring.copyIn(st, s.devIn, at, src)
}

// stageOut copies s's logits from the device to its pinned output on st,
// or, for a request the Postprocessor ranks, its best classes.
func (p *pipeline) stageOut(s *slot, st engine.Stream) {
	if p.b.cfg.Profile {
		s.record(st, evD2HStart)
	}
	req := &s.it.req
	if p.ranks(req) {
		k := req.TopK
		n := s.n * k * TopPairBytes
		if err := p.post.TopK(s.devOut, s.n, p.classes, k, req.Softmax, s.devTop, st); err != nil {
			s.fail(fmt.Errorf("ranking the logits: %w", err))
		} else if err := st.CopyToHost(s.hostOut.Bytes()[:n], s.devTop, 0); err != nil {
			s.fail(fmt.Errorf("D2H copy: %w", err))
		}
		s.topK = k
	} else if err := st.CopyToHost(tensor.F32Bytes(s.out[:s.n*p.classes]), s.devOut, 0); err != nil {
		s.fail(fmt.Errorf("D2H copy: %w", err))
	}
	s.record(st, evD2HEnd)
}

// ranks reports whether req's best classes are ranked on the device (and
// only they come back), rather than its logits.
func (p *pipeline) ranks(req *Request) bool {
	k := req.TopK
	return p.post != nil && k > 0 && 2*k <= p.classes
}

// ranked decodes the classes a Postprocessor wrote for s into dst (or a
// new slice when dst has no room).
func (p *pipeline) ranked(s *slot, dst []topk.Class) []topk.Class {
	m := s.n * s.topK
	if cap(dst) >= m {
		dst = dst[:m]
	} else {
		dst = make([]topk.Class, m)
	}
	b := s.hostOut.Bytes()
	le := binary.LittleEndian
	for i := range dst {
		dst[i] = topk.Class{Index: int(int32(le.Uint32(b[TopPairBytes*i:]))), Value: math.Float32frombits(le.Uint32(b[TopPairBytes*i+4:]))}
	}
	return dst
}

// workerLoop runs forwards on worker k's instance.
func (p *pipeline) workerLoop(k int, next chan<- *slot) {
	for s := range p.work {
		p.compute(s, k, p.b.cfg.CopyStreams)
		next <- s
	}
}

// compute runs s's forward on worker k's instance. With CopyStreams it
// makes the worker's stream wait for the H2D copy on the device (the
// goroutine does not block); without, it does the copies itself on its
// stream.
func (p *pipeline) compute(s *slot, k int, copyStreams bool) {
	inst := p.insts[k]
	st := inst.Stream()
	s.worker = k
	s.st.WorkerStart = time.Now()
	if !copyStreams {
		p.stageIn(s, st, p.rings[k], false)
	} else if s.err == nil {
		if err := st.Wait(s.ev[evH2DEnd]); err != nil {
			s.fail(fmt.Errorf("worker %d: waiting for the H2D copy: %w", k, err))
		}
	}
	if s.err == nil {
		s.record(st, evComputeStart)
		if err := inst.Forward(s.devIn, s.devOut, s.n); err != nil {
			s.fail(fmt.Errorf("worker %d: forward of %d images: %w", k, s.n, err))
		}
		s.record(st, evComputeEnd)
	}
	if !copyStreams && s.err == nil {
		p.stageOut(s, st)
	}
	s.st.WorkerEnd = time.Now()
}

// d2hLoop copies logits back on the D2H stream.
func (p *pipeline) d2hLoop() {
	defer close(p.replies)
	for s := range p.d2h {
		p.copyBack(s)
		p.replies <- s
	}
}

// copyBack enqueues s's logits copy on the D2H stream, after the forward's
// event.
func (p *pipeline) copyBack(s *slot) {
	st := p.d2hStream
	s.st.D2HStart = time.Now()
	if s.err == nil {
		if err := st.Wait(s.ev[evComputeEnd]); err != nil {
			s.fail(fmt.Errorf("D2H stage: waiting for the forward: %w", err))
		} else {
			p.stageOut(s, st)
		}
	}
	s.st.D2HEnd = time.Now()
}

// replyLoop answers each slot's request. Slots arrive in the order the D2H
// stage (or the workers) enqueued their copies.
func (p *pipeline) replyLoop() {
	for s := range p.replies {
		req := s.it.req
		resp := p.finish(s)
		p.inflight.Add(-1)
		p.b.reply(req.Reply, resp)
	}
}

// finish waits for s's device work, copies its logits into the response,
// counts it and frees the slot.
func (p *pipeline) finish(s *slot) Response {
	s.st.ReplyStart = time.Now()
	if s.last != nil {
		if err := s.last.Synchronize(); err != nil {
			s.fail(fmt.Errorf("waiting for the device: %w", err))
		}
	}
	req := s.it.req
	resp := Response{
		ID:        req.ID,
		N:         s.n,
		Classes:   p.classes,
		SentAt:    req.SentAt,
		Err:       s.err,
		QueueWait: s.st.Dequeued.Sub(s.st.Queued),
		Worker:    s.worker,
		Device:    p.index,
		ImageErrs: s.imageErrs,
	}
	if s.err == nil && s.topK > 0 {
		resp.Top = p.ranked(s, req.Top)
		resp.Compute = p.deviceTimes(s)
	} else if s.err == nil {
		m := s.n * p.classes
		logits := req.Output
		if cap(logits) >= m {
			logits = logits[:m]
		} else {
			logits = make([]float32, m)
		}
		copy(logits, s.out[:m])
		resp.Logits = logits
		resp.Compute = p.deviceTimes(s)
	}
	resp.Stages = s.st
	resp.DoneAt = time.Now()
	// Every event of the slot has completed (the last one follows them
	// all), so its buffers are free again.
	s.it = item{}
	p.free <- s
	p.requests.Add(1)
	if resp.Err != nil {
		p.errors.Add(1)
	} else {
		p.images.Add(uint64(resp.N))
	}
	return resp
}

// deviceTimes returns the forward's device time and, with Profile, fills
// the device spans of s. Engines that cannot time events leave them zero.
func (p *pipeline) deviceTimes(s *slot) time.Duration {
	var compute time.Duration
	if d, err := s.ev[evComputeEnd].Since(s.ev[evComputeStart]); err == nil {
		compute = d
	}
	if p.b.cfg.Profile {
		s.st.GPUH2D = p.span(s, evH2DStart, evH2DEnd)
		s.st.GPUCompute = p.span(s, evComputeStart, evComputeEnd)
		s.st.GPUD2H = p.span(s, evD2HStart, evD2HEnd)
	}
	return compute
}

func (p *pipeline) span(s *slot, start, end int) Span {
	if !s.recorded[start] || !s.recorded[end] {
		return Span{}
	}
	a, err1 := s.ev[start].Since(p.anchor)
	b, err2 := s.ev[end].Since(p.anchor)
	if err1 != nil || err2 != nil {
		return Span{}
	}
	return Span{Start: p.anchorAt.Add(a), End: p.anchorAt.Add(b)}
}

// answerEarly answers a request that is not going to the device.
func (p *pipeline) answerEarly(it item, err error) {
	p.requests.Add(1)
	p.errors.Add(1)
	p.b.reply(it.req.Reply, earlyResponse(it, err, p.index))
}

// release frees everything the pipeline created, instances before the
// model. It waits for each slot's pending device work first.
func (p *pipeline) release() error {
	var errs []error
	keep := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("device %d: freeing %s: %w", p.index, what, err))
		}
	}
	for _, st := range p.streams {
		keep("a stream's work", st.Synchronize())
	}
	for _, inst := range p.insts {
		keep("a worker's stream work", inst.Stream().Synchronize())
	}
	for _, r := range p.rings {
		keep("staging buffers", r.release())
		if r.dec != nil {
			keep("an image decoder", r.dec.Close())
		}
	}
	for _, s := range p.slots {
		if s.devIn != nil {
			keep("a device input buffer", s.devIn.Free())
		}
		if s.devOut != nil {
			keep("a device output buffer", s.devOut.Free())
		}
		if s.devTop != nil {
			keep("a device ranking buffer", s.devTop.Free())
		}
		if s.hostOut != nil {
			keep("a pinned output buffer", s.hostOut.Free())
		}
		for _, e := range s.ev {
			if e != nil {
				keep("an event", e.Close())
			}
		}
	}
	if p.anchor != nil {
		keep("the anchor event", p.anchor.Close())
	}
	if p.post != nil {
		keep("the postprocessor", p.post.Close())
	}
	for _, st := range p.streams {
		keep("a stream", st.Close())
	}
	for _, inst := range p.insts {
		keep("an instance", inst.Close())
	}
	if p.model != nil {
		keep("the model", p.model.Close())
	}
	return errors.Join(errs...)
}
