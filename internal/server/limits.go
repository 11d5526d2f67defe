package server

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// smallRequestBytes is the size up to which a request counts as small: such
// requests may also use the part of the in-flight budget kept back from big
// ones, so that a few clients sending huge bodies cannot starve everyone
// else.
const smallRequestBytes = 8 << 20

// memBudget bounds the bytes that requests in flight hold across the whole
// server: request bodies, and tensors decoded from JSON. A request takes its
// share before it reads its body, from what it declares (Content-Length, the
// binary header length), and gives it back when it is answered; a request
// that does not fit is refused at once (503 / RESOURCE_EXHAUSTED) instead of
// being read into memory the server does not have.
//
// A quarter of the budget is reserved for small requests (up to
// smallRequestBytes): big requests together never hold more than
// capacity - reserve.
type memBudget struct {
	capacity int64 // bytes in all
	bigCap   int64 // bytes big requests may hold together
	used     atomic.Int64
	peak     atomic.Int64 // the most bytes held at once
}

func newMemBudget(capacity int64) *memBudget {
	return &memBudget{capacity: capacity, bigCap: capacity - capacity/4}
}

// acquire takes n more bytes for a request that will hold total bytes in
// all (n included), and reports whether they fit.
func (b *memBudget) acquire(n, total int64) bool {
	if n <= 0 {
		return true
	}
	limit := b.capacity
	if total > smallRequestBytes {
		limit = b.bigCap
	}
	for {
		u := b.used.Load()
		if u+n > limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			b.notePeak(u + n)
			return true
		}
	}
}

func (b *memBudget) notePeak(u int64) {
	for {
		p := b.peak.Load()
		if u <= p || b.peak.CompareAndSwap(p, u) {
			return
		}
	}
}

// maxInUse is the most bytes held at once since the server started.
func (b *memBudget) maxInUse() int64 { return b.peak.Load() }

// release gives back n bytes.
func (b *memBudget) release(n int64) {
	if n > 0 {
		b.used.Add(-n)
	}
}

// inUse is the number of bytes held now.
func (b *memBudget) inUse() int64 { return b.used.Load() }

// free is the number of bytes a small request could still take.
func (b *memBudget) free() int64 { return b.capacity - b.used.Load() }

// lease is what one request holds of a memBudget. The zero lease holds
// nothing; a lease is used by one goroutine.
type lease struct {
	b    *memBudget
	held int64
}

// ensure makes the lease hold at least n bytes, and reports whether the
// budget had them.
func (l *lease) ensure(n int64) bool {
	if n <= l.held {
		return true
	}
	if !l.b.acquire(n-l.held, n) {
		return false
	}
	l.held = n
	return true
}

// release gives everything back.
func (l *lease) release() {
	l.b.release(l.held)
	l.held = 0
}

// errMemoryFull is the answer to a request that does not fit in the budget.
func errMemoryFull(n int64) error {
	return errorf(kindMemoryFull, "the server is holding as many request bytes as it may (--max_inflight_bytes); a request of %d bytes must wait: retry later", n)
}

// firstReadBytes is how much of a body is read before the full buffer is
// allocated: most requests fit in it, and a client that declares a huge
// body but sends less than this costs no more.
const firstReadBytes = 1 << 20

// readFullIncremental reads exactly n bytes of r into a buffer from get.
// It reads the first firstReadBytes into a buffer of that size, and only
// once they have arrived takes a buffer of n and moves them over, so that
// a client that declares a body and does not send it holds at most
// firstReadBytes of memory. (Beyond that the bytes are as good as sent: the
// request has taken all n from the server's budget before its body was
// read. Growing by doubling instead would cost a copy of almost the whole
// body, and on a GPU keep a page-locked buffer of every size on the way.)
// The outgrown buffer goes back through put; on error so does the buffer.
func readFullIncremental(r io.Reader, n int, get func(int) *[]byte, put func(*[]byte)) (*[]byte, int, error) {
	b := get(min(n, firstReadBytes))
	got, err := io.ReadFull(r, *b)
	if err == nil && got < n {
		full := get(n)
		copy(*full, (*b)[:got])
		put(b)
		b = full
		var m int
		m, err = io.ReadFull(r, (*b)[got:])
		got += m
	}
	if err != nil {
		put(b)
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, got, err
	}
	return b, got, nil
}

// limitListener bounds the connections a listener has open: Accept waits
// while max are open, leaving further clients in the kernel's backlog,
// where they cost the server nothing.
type limitListener struct {
	net.Listener
	slots chan struct{}
	done  chan struct{}
	once  sync.Once
}

// newLimitListener returns l bounded to max open connections (max <= 0:
// unbounded, l itself).
func newLimitListener(l net.Listener, max int) net.Listener {
	if max <= 0 {
		return l
	}
	return &limitListener{Listener: l, slots: make(chan struct{}, max), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn frees its listener's slot when it is closed (once).
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// isTimeout reports whether err is a network timeout: a read deadline
// (--read_timeout) passed while a body was being read.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
