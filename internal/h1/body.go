package h1

import (
	"bufio"
	"errors"
	"io"
)

// body reads a request's Content-Length bytes from the connection's
// reader. Reads of at least the reader's buffer size go straight from the
// socket into the caller's buffer, so a tensor is copied once.
type body struct {
	r         *bufio.Reader
	remaining int64
	err       error // sticky: a failed body stays failed
	closed    bool
}

var errBodyClosed = errors.New("h1: read on a closed request body")

func (b *body) Read(p []byte) (int, error) {
	if b.closed {
		return 0, errBodyClosed
	}
	if b.err != nil {
		return 0, b.err
	}
	if b.remaining == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	n, err := b.r.Read(p)
	b.remaining -= int64(n)
	switch {
	case err == io.EOF && b.remaining > 0:
		err = io.ErrUnexpectedEOF
	case err == io.EOF:
		err = nil
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

// Close marks the body closed; what is left of it is dealt with by the
// connection once the handler returns.
func (b *body) Close() error {
	b.closed = true
	return nil
}

// discardMax bounds what is read and dropped of a body its handler left
// unread so that the connection can carry another request; beyond it the
// connection is closed instead, as net/http does.
const discardMax = 256 << 10

// discardable reports whether what is left of the body is small enough to
// be read and dropped after the handler.
func (b *body) discardable() bool { return b.err == nil && b.remaining <= discardMax }

// discard reads and drops what is left of the body, up to discardMax bytes; it
// reports whether the body is then wholly read, so the connection can
// carry the next request.
func (b *body) discard() bool {
	if !b.discardable() {
		return false
	}
	n, err := b.r.Discard(int(b.remaining))
	b.remaining -= int64(n)
	return err == nil && b.remaining == 0
}
