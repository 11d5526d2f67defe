package server

import (
	"errors"
	"io"
)

// A request alone on the server spends most of its receive time in two
// steps that need not wait for each other: copying the binary tensor out of
// the socket, which can only go as fast as the client writes it, and the
// Go work between the JSON part and that copy (decoding the header,
// planning, checks). bodyAhead starts the copy on its own goroutine as soon
// as the JSON part is in, into the buffer the tensor would be read into
// anyway, so that the header's work runs while the bytes arrive. It is
// only used when nothing else is in flight: a busy server gains nothing
// from a second goroutine per request, and keeps refusing queue-full
// requests before their bodies are read.

// minReadAhead is the smallest binary part worth a goroutine: below it the
// copy is shorter than the hand-off.
const minReadAhead = 64 << 10

// bodyAhead reads the first n bytes of a body on its own goroutine. Its
// Read gives those bytes, then whatever ended the early read (the body's
// end or its error), then the rest of the body, so that it replaces the
// body for every reader. Nothing else may read the body while it reads.
type bodyAhead struct {
	body io.Reader
	pool *requestPool
	done chan struct{}

	// Set by the reading goroutine before done is closed.
	buf *[]byte
	n   int
	err error

	off   int  // bytes of buf already given out by Read or take
	taken bool // buf belongs to the caller of take
}

// startBodyAhead starts reading n bytes of body into a buffer from pool.
func startBodyAhead(body io.Reader, n int, pool *requestPool) *bodyAhead {
	a := &bodyAhead{body: body, pool: pool, done: make(chan struct{}), buf: pool.Get(n)}
	go func() {
		defer close(a.done)
		a.n, a.err = io.ReadFull(a.body, *a.buf)
		if errors.Is(a.err, io.ErrUnexpectedEOF) {
			// The body ended early: its readers see that as the end.
			a.err = io.EOF
		}
	}()
	return a
}

// take waits for the early read and returns its buffer if it holds exactly
// want bytes, read without error; the caller then owns the buffer (and
// puts it back to the pool). Otherwise it returns nil and the bytes stay
// for Read.
func (a *bodyAhead) take(want int) *[]byte {
	<-a.done
	if a.err != nil || a.n != want || a.off != 0 || a.taken {
		return nil
	}
	a.taken, a.off = true, a.n
	return a.buf
}

// Read implements io.Reader.
func (a *bodyAhead) Read(p []byte) (int, error) {
	<-a.done
	if a.off < a.n {
		m := copy(p, (*a.buf)[a.off:a.n])
		a.off += m
		return m, nil
	}
	if a.err != nil {
		return 0, a.err
	}
	return a.body.Read(p)
}

// release waits for the early read and puts its buffer back unless take
// gave it away. The handler defers it, so that the goroutine never
// outlives the request and its body.
func (a *bodyAhead) release() {
	<-a.done
	if !a.taken {
		a.pool.Put(a.buf)
		a.buf = nil
	}
}
