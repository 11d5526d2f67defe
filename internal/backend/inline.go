package backend

import (
	"errors"
	"fmt"
	"time"

	"goinfer/internal/engine"
	"goinfer/internal/tensor"
)

// An inline run takes a request that arrives at an idle device through the
// whole pipeline on the submitter's goroutine: input copy, forward, logits
// copy, the wait for the device and the reply, on the same streams, slot
// and buffers as the stage goroutines use, but without their four channel
// hand-offs (each a thread wake-up on an idle host). A device is idle when
// no request is between its H2D stage's admission and its reply stage's
// end; the pipeline's gate keeps the stages out while an inline run lasts.

// runInline runs it on an idle device and returns true, or returns false
// (having done nothing) when it should queue: it is not marked Inline,
// inline runs are off, requests are queued, the backend has not loaded or
// is stopping, it.req.Reply has no room (an unbuffered Reply is read by
// the submitter only after Submit returns), or no device is idle. The
// caller holds b.submits, and runInline calls done before it sends the
// reply, so that Close never waits for a client that does not read.
func (b *Backend) runInline(it item, done func()) bool {
	if !it.req.Inline || b.cfg.NoInline || len(b.queue) > 0 || cap(it.req.Reply) == len(it.req.Reply) {
		return false
	}
	select {
	case <-b.ready:
	default:
		return false
	}
	if b.err != nil || b.aborted() {
		return false
	}
	n := len(b.pipes)
	first := int(b.nextInline.Add(1) % uint64(n))
	for i := range n {
		p := b.pipes[(first+i)%n]
		s := p.claim()
		if s == nil {
			continue
		}
		resp := p.inline(s, it)
		done()
		b.reply(it.req.Reply, resp)
		return true
	}
	return false
}

// claim returns a free slot of an idle pipeline, holding its gate, or nil.
func (p *pipeline) claim() *slot {
	if !p.gate.TryLock() {
		return nil
	}
	if p.inflight.Load() == 0 {
		select {
		case s := <-p.free:
			return s
		default:
		}
	}
	p.gate.Unlock()
	return nil
}

// inline runs it on s as the stages would, with worker 0's instance, and
// releases s and the gate.
func (p *pipeline) inline(s *slot, it item) Response {
	defer p.gate.Unlock()
	now := time.Now()
	n, err := p.admit(it)
	if err == nil && p.b.aborted() {
		err = p.b.abortErr()
	}
	if err != nil {
		p.free <- s
		p.requests.Add(1)
		p.errors.Add(1)
		return earlyResponse(it, err, p.index)
	}
	p.inlined.Add(1)
	s.reset(it, n, now)
	if p.computeInPlace(s) {
		return p.finish(s)
	}
	// Copy streams let one batch's copies overlap another's forward; a
	// run on an idle device has nothing to overlap, and its pinned input
	// (copied without the staging ring) can go on the worker's stream,
	// which spares it two cross-stream waits, CUDA calls on its path.
	copyStreams := p.b.cfg.CopyStreams && !(it.req.Pinned && len(it.req.Encoded) == 0)
	if copyStreams {
		p.stageIn(s, p.h2dStream, p.rings[0], true)
	}
	p.compute(s, 0, copyStreams)
	if copyStreams {
		p.copyBack(s)
	}
	return p.finish(s)
}

// inPlaceMaxBytes bounds the input a request may have to run in place. In
// place saves a small request the calls of its two copies, which cost
// more than its bytes; a large one is better moved by the copy engine at
// full bus speed than read by the conversion kernel over the bus.
const inPlaceMaxBytes = 1 << 20

// computeInPlace runs s's forward on worker 0's instance straight from the
// request's page-locked input to the slot's page-locked logits, without
// the two copies, where the instance can (engine.HostIO) and the request
// is a plain pinned tensor of at most inPlaceMaxBytes whose logits come back
// whole. It reports whether it ran; false leaves s as it found it.
func (p *pipeline) computeInPlace(s *slot) bool {
	req := &s.it.req
	hio, ok := p.insts[0].(engine.HostIO)
	if !ok || !req.Pinned || len(req.Encoded) > 0 || len(req.Parts) > 0 || p.ranks(req) || s.n*p.inBytes > inPlaceMaxBytes {
		return false
	}
	st := p.insts[0].Stream()
	s.worker = 0
	s.st.WorkerStart = time.Now()
	s.st.Staged = s.st.WorkerStart
	// The compute span includes the input's reads over the bus, which
	// the copy path times as its H2D copy.
	s.record(st, evComputeStart)
	err := hio.ForwardHost(req.Input.Data[:s.n*p.inBytes], tensor.F32Bytes(s.out[:s.n*p.classes]), s.n)
	if errors.Is(err, engine.ErrNotHostMapped) {
		s.worker = -1
		s.st.WorkerStart, s.st.Staged = time.Time{}, time.Time{}
		return false
	}
	if err != nil {
		s.fail(fmt.Errorf("worker 0: forward of %d images from host memory: %w", s.n, err))
	}
	s.record(st, evComputeEnd)
	s.st.WorkerEnd = time.Now()
	return true
}
