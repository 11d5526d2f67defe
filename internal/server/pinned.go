package server

import (
	"cmp"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"goinfer/internal/engine"
)

// requestPool supplies the buffers request tensors are received into: from
// the pinned pool once the model has given the server a host allocator
// (Model.AllocHost), else, and for what the pinned pool declines, from the
// server's ordinary bufPool. It is the gRPC codec's pool and the HTTP
// handler's, so that both protocols receive into page-locked memory.
type requestPool struct {
	bufs   *bufPool
	pinned atomic.Pointer[pinnedPool]
}

// Get returns a buffer of length n (mem.BufferPool).
func (p *requestPool) Get(n int) *[]byte {
	if pp := p.pinned.Load(); pp != nil {
		if b := pp.get(n); b != nil {
			return b
		}
	}
	return p.bufs.get(n)
}

// Put recycles a buffer from Get (mem.BufferPool).
func (p *requestPool) Put(b *[]byte) {
	if pp := p.pinned.Load(); pp != nil && pp.put(b) {
		return
	}
	p.bufs.put(b)
}

// Pinned reports whether b lies in page-locked memory of the pool.
func (p *requestPool) Pinned(b []byte) bool {
	pp := p.pinned.Load()
	return pp != nil && pp.contains(b)
}

// minPinnedClass is the smallest buffer the pinned pool hands out (64 KiB):
// copying a smaller request costs less than the memory it would pin.
const minPinnedClass = 16

// pinnedPool hands out request buffers in page-locked host memory, so that
// a request's bytes go from the socket to the device without a copy on the
// host: the kernel writes them there, the batcher passes them on, and the
// GPU reads them asynchronously (as Triton's pinned memory pool does).
// Buffers come in power-of-two classes; the pool page-locks on demand up to
// its byte budget and keeps what it has until close, since page-locking
// costs about a millisecond per megabyte. Beyond the budget, and for small
// requests, get returns nil and the caller uses ordinary memory.
type pinnedPool struct {
	alloc  func(n int) (engine.HostBuffer, error)
	budget int64

	mu     sync.Mutex
	used   int64 // bytes page-locked, in use or free
	free   [40][]*[]byte
	owned  map[*[]byte]engine.HostBuffer
	spans  []span // owned memory, sorted by start
	closed bool
	err    error // the first allocation failure; no more are tried
}

type span struct{ start, end uintptr }

func newPinnedPool(alloc func(n int) (engine.HostBuffer, error), budget int64) *pinnedPool {
	return &pinnedPool{alloc: alloc, budget: budget, owned: map[*[]byte]engine.HostBuffer{}}
}

// get returns a pinned buffer of length n, or nil.
func (p *pinnedPool) get(n int) *[]byte {
	c := bufClass(n)
	if c < minPinnedClass || c >= len(p.free) {
		return nil
	}
	size := 1 << c
	p.mu.Lock()
	if p.closed || p.err != nil {
		p.mu.Unlock()
		return nil
	}
	if k := len(p.free[c]); k > 0 {
		b := p.free[c][k-1]
		p.free[c] = p.free[c][:k-1]
		p.mu.Unlock()
		*b = (*b)[:n]
		return b
	}
	if p.used+int64(size) > p.budget {
		p.mu.Unlock()
		return nil
	}
	p.used += int64(size) // reserved while allocating without the lock
	p.mu.Unlock()

	hb, err := p.alloc(size)
	if err == nil && len(hb.Bytes()) < size {
		err = errors.Join(errors.New("the host allocator returned a short buffer"), hb.Free())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.used -= int64(size)
		if p.err == nil {
			p.err = err
		}
		return nil
	}
	b := hb.Bytes()[:n:size]
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	s := span{start, start + uintptr(size)}
	i, _ := p.spanAt(start)
	p.spans = slices.Insert(p.spans, i, s)
	bp := &b
	p.owned[bp] = hb
	return bp
}

// put takes back a buffer get returned and reports whether it was one.
// After close, such a buffer is freed rather than kept.
func (p *pinnedPool) put(b *[]byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	hb, ok := p.owned[b]
	if !ok {
		return false
	}
	if p.closed {
		delete(p.owned, b)
		hb.Free()
		return true
	}
	c := bufClass(cap(*b))
	p.free[c] = append(p.free[c], b)
	return true
}

// contains reports whether b lies wholly inside one of the pool's buffers.
func (p *pinnedPool) contains(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	hi := lo + uintptr(len(b))
	p.mu.Lock()
	defer p.mu.Unlock()
	i, found := p.spanAt(lo)
	if !found {
		i-- // the span starting before lo, if any
	}
	return i >= 0 && lo >= p.spans[i].start && hi <= p.spans[i].end
}

// spanAt finds where a span starting at start is, or would be inserted, in
// p.spans. p.mu must be held.
func (p *pinnedPool) spanAt(start uintptr) (int, bool) {
	return slices.BinarySearchFunc(p.spans, start, func(s span, x uintptr) int { return cmp.Compare(s.start, x) })
}

// close frees the buffers not in use; those still out are freed when they
// are put back.
func (p *pinnedPool) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var errs []error
	for c := range p.free {
		for _, b := range p.free[c] {
			errs = append(errs, p.owned[b].Free())
			delete(p.owned, b)
		}
		p.free[c] = nil
	}
	return errors.Join(errs...)
}
