package h1

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"
)

// A connection's states, for Shutdown: it closes only idle connections,
// by a compare-and-swap that the connection's loop also makes when a
// request's first bytes arrive, so that a request is never cut mid-read
// by the drain.
const (
	stateIdle int32 = iota
	stateActive
	stateClosing
)

// readBufSize is the connection's read buffer: the largest request head
// the fast loop parses (bigger ones go to net/http), and the size from
// which body reads bypass the buffer.
const readBufSize = 4096

// maxKeptBuf bounds the answer buffer a connection keeps between requests.
const maxKeptBuf = 1 << 20

// conn is one client connection on the fast loop.
type conn struct {
	srv      *Server
	rwc      net.Conn
	br       *bufio.Reader
	state    atomic.Int32
	accepted time.Time
	served   atomic.Bool // it has answered a request (Shutdown closes it at once when idle)
	// lingering: the last answer left part of its request unread.
	lingering bool

	headBuf, chunkBuf, respBuf, outBuf []byte
}

// serve runs the connection's requests until it closes or is handed to
// net/http.
func (c *conn) serve() {
	s := c.srv
	handedOff := false
	defer func() {
		switch {
		case handedOff:
		case c.lingering:
			c.closeLingering()
		default:
			c.rwc.Close()
		}
		s.untrack(c)
	}()
	for first := true; ; first = false {
		if !first {
			if s.IdleTimeout > 0 {
				c.rwc.SetReadDeadline(time.Now().Add(s.IdleTimeout))
			} else {
				c.rwc.SetReadDeadline(time.Time{})
			}
		} else if s.ReadHeaderTimeout > 0 {
			c.rwc.SetReadDeadline(c.accepted.Add(s.ReadHeaderTimeout))
		}
		if _, err := c.br.Peek(1); err != nil {
			return
		}
		if !c.state.CompareAndSwap(stateIdle, stateActive) {
			return // the drain closed it
		}
		t0 := time.Now()
		if !first && s.ReadHeaderTimeout > 0 {
			c.rwc.SetReadDeadline(t0.Add(s.ReadHeaderTimeout))
		}
		raw, ok := c.readHead()
		if !ok {
			return
		}
		h, ok := parseHead(raw)
		path, query, _ := strings.Cut(h.target, "?")
		if !ok || h.method == "HEAD" || !s.Eligible(h.method, path) {
			handedOff = s.handoff(c)
			return
		}
		c.br.Discard(h.size)
		if s.ReadTimeout > 0 {
			c.rwc.SetReadDeadline(t0.Add(s.ReadTimeout))
		} else {
			c.rwc.SetReadDeadline(time.Time{})
		}
		if !c.serveRequest(h, path, query) {
			return
		}
		c.served.Store(true)
		if !c.state.CompareAndSwap(stateActive, stateIdle) || s.shuttingDown() {
			return
		}
	}
}

// readHead waits until the buffer holds a whole request head and returns
// it, unread. It reports false if the connection failed or closed first,
// or if the head is larger than the buffer (then the connection is handed
// to net/http, with true and a nil head, whose parse fails).
func (c *conn) readHead() ([]byte, bool) {
	for {
		b, _ := c.br.Peek(c.br.Buffered())
		if end := headEnd(b); end >= 0 {
			return b[:end], true
		}
		if len(b) == c.br.Size() {
			return nil, true
		}
		if _, err := c.br.Peek(len(b) + 1); err != nil {
			return nil, false
		}
	}
}

// serveRequest runs the handler for h and completes its answer. It
// reports whether the connection can carry another request.
func (c *conn) serveRequest(h head, path, query string) bool {
	s := c.srv
	u := &url.URL{Path: path, RawQuery: query}
	if strings.Contains(path, "%") {
		parsed, err := url.ParseRequestURI(h.target)
		if err != nil {
			// The head was read: answer as net/http would, and close.
			c.writeBadRequest("malformed request target")
			return false
		}
		u = parsed
	}
	host := h.header.Get("Host")
	delete(h.header, "Host")
	bd := &body{r: c.br, remaining: h.contentLength}
	ctx, cancel := context.WithCancel(s.baseContext())
	defer cancel()
	req := (&http.Request{
		Method:        h.method,
		URL:           u,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h.header,
		Body:          bd,
		ContentLength: h.contentLength,
		Host:          host,
		RemoteAddr:    c.rwc.RemoteAddr().String(),
		RequestURI:    h.target,
		Close:         h.close,
	}).WithContext(ctx)
	w := &response{c: c, body: bd, header: make(http.Header, 4), closeAfter: h.close, buf: c.respBuf[:0]}
	if !c.runHandler(w, req) {
		return false
	}
	err := w.finish()
	if cap(w.buf) <= maxKeptBuf {
		c.respBuf = w.buf[:0]
	}
	if err != nil || w.closeAfter {
		// A body left unread would make the kernel answer the close
		// with a reset, which can reach the client before the answer.
		c.lingering = err == nil && bd.remaining > 0 && bd.err == nil
		return false
	}
	return bd.discard()
}

// lingerFor and lingerBytes bound what closeLingering reads and drops of
// a request the handler answered without reading it all, as net/http
// waits a while before closing such a connection.
const (
	lingerFor   = 500 * time.Millisecond
	lingerBytes = 64 << 20
)

// closeLingering closes a connection whose client may still be sending
// the body of a request already answered: it ends the write side first
// where the connection allows, reads and drops what arrives for a
// bounded while, then closes, so that the client reads the answer
// instead of a connection reset.
func (c *conn) closeLingering() {
	if cw, ok := c.rwc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.rwc.SetReadDeadline(time.Now().Add(lingerFor))
	io.Copy(io.Discard, io.LimitReader(c.br, lingerBytes))
	c.rwc.Close()
}

// runHandler calls the handler, and reports false if it panicked (the
// connection is then closed without completing the answer, as net/http
// does; http.ErrAbortHandler is not logged).
func (c *conn) runHandler(w *response, req *http.Request) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			ok = false
			if v != http.ErrAbortHandler {
				c.srv.logf("h1: panic serving %v: %v\n%s", c.rwc.RemoteAddr(), v, debug.Stack())
			}
		}
	}()
	c.srv.Handler.ServeHTTP(w, req)
	return true
}

// writeBadRequest answers 400 on a connection that is then closed.
func (c *conn) writeBadRequest(msg string) {
	c.rwc.SetWriteDeadline(time.Now().Add(time.Second))
	c.rwc.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request: " + msg))
}

// gatherMax bounds the answers that are gathered into one buffer for one
// write: the connection is usually wrapped (connection limit, busy
// polling), and a wrapped connection gets no writev from net.Buffers, but
// a write per buffer.
const gatherMax = 256 << 10

// write sends bufs, gathered into one write when they are small.
func (c *conn) write(bufs net.Buffers) error {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	if n > gatherMax {
		_, err := bufs.WriteTo(c.rwc)
		return err
	}
	out := c.outBuf[:0]
	for _, b := range bufs {
		out = append(out, b...)
	}
	c.outBuf = out[:0]
	_, err := c.rwc.Write(out)
	return err
}
