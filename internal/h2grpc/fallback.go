package h2grpc

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/http2/hpack"
)

// Calls that Server.Unary does not claim (streaming RPCs, reflection) are
// served by Server.Fallback, an http.Handler such as a grpc.Server (its
// ServeHTTP), on the same connection: each such stream becomes an
// http.Request whose body is the stream's DATA and an http.ResponseWriter
// that sends HEADERS, DATA within the peer's windows and, when the handler
// returns, the trailers it declared. The unary path is not touched.

// errStreamReset ends the body of a fallback stream the client reset or
// whose connection ended.
var errStreamReset = errors.New("h2grpc: stream reset")

// fallbackBody is a fallback stream's request body: the DATA frames the
// connection's reader queues, read by the handler. What the handler has
// read is credited back to the client (stream WINDOW_UPDATE), so a stream
// holds at most its window of unread bytes.
type fallbackBody struct {
	sc *serverConn
	id uint32

	mu     sync.Mutex
	cond   sync.Cond
	chunks [][]byte
	unread int   // queued bytes
	err    error // io.EOF after END_STREAM, errStreamReset
}

func newFallbackBody(sc *serverConn, id uint32) *fallbackBody {
	b := &fallbackBody{sc: sc, id: id}
	b.cond.L = &b.mu
	return b
}

// push queues a DATA payload; it reports false when the client sent past
// the stream's window.
func (b *fallbackBody) push(p []byte, window int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return true // the handler is gone or the stream ended: drop it
	}
	if b.unread += len(p); b.unread > window {
		return false
	}
	if len(p) > 0 {
		b.chunks = append(b.chunks, p)
	}
	b.cond.Broadcast()
	return true
}

// end stops the body with err once what is queued has been read (io.EOF),
// or at once (any other error).
func (b *fallbackBody) end(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil || b.err == io.EOF && err != io.EOF {
		b.err = err
	}
	if err != io.EOF {
		b.chunks, b.unread = nil, 0
	}
	b.cond.Broadcast()
}

func (b *fallbackBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	for len(b.chunks) == 0 && b.err == nil {
		b.cond.Wait()
	}
	if len(b.chunks) == 0 {
		err := b.err
		b.mu.Unlock()
		return 0, err
	}
	n := copy(p, b.chunks[0])
	if b.chunks[0] = b.chunks[0][n:]; len(b.chunks[0]) == 0 {
		b.chunks[0] = nil
		b.chunks = b.chunks[1:]
	}
	b.unread -= n
	b.mu.Unlock()
	if n > 0 {
		b.sc.c.write(appendWindowUpdate(nil, b.id, uint32(n)))
	}
	return n, nil
}

func (b *fallbackBody) Close() error {
	b.end(errStreamReset)
	return nil
}

// startFallback serves st with Server.Fallback on a goroutine of its own;
// fields are the request's header fields. Call with sc.mu held.
func (sc *serverConn) startFallback(st *serverStream, fields []hpack.HeaderField) {
	st.started = true
	st.fb = newFallbackBody(sc, st.id)
	sc.s.streams.Add(1)
	r := &http.Request{
		Method: http.MethodPost, Proto: "HTTP/2.0", ProtoMajor: 2,
		Header: http.Header{}, Body: st.fb, ContentLength: -1,
		RemoteAddr: sc.c.nc.RemoteAddr().String(),
	}
	path := "/"
	for _, f := range fields {
		switch f.Name {
		case ":path":
			path = f.Value
		case ":authority":
			r.Host = f.Value
		default:
			if !strings.HasPrefix(f.Name, ":") {
				r.Header.Add(f.Name, f.Value)
			}
		}
	}
	r.RequestURI = path
	r.URL = &url.URL{Path: path}
	if u, err := url.ParseRequestURI(path); err == nil {
		r.URL = u
	}
	r = r.WithContext(st.ctx)
	go func() {
		w := &fallbackWriter{sc: sc, st: st, h: http.Header{}}
		defer func() {
			w.finish()
			st.fb.end(errStreamReset)
			sc.end(st)
		}()
		sc.s.Fallback.ServeHTTP(w, r)
	}()
}

// fallbackWriter is the http.ResponseWriter (and http.Flusher) of a
// fallback stream.
type fallbackWriter struct {
	sc     *serverConn
	st     *serverStream
	h      http.Header
	status int  // sent with the headers
	sent   bool // HEADERS sent
	err    error
}

func (w *fallbackWriter) Header() http.Header { return w.h }

func (w *fallbackWriter) WriteHeader(code int) {
	if w.sent || w.status != 0 {
		return
	}
	w.status = code
	w.sendHeaders(false)
}

// sendHeaders sends the response HEADERS (ending the stream when end: a
// response without body or trailers).
func (w *fallbackWriter) sendHeaders(end bool) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	fields := []string{":status", strconv.Itoa(w.status)}
	for k, vs := range w.h {
		if k == "Trailer" || strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		for _, v := range vs {
			fields = append(fields, strings.ToLower(k), v)
		}
	}
	c := w.sc.c
	c.wmu.Lock()
	defer c.wmu.Unlock()
	w.sent = true
	if _, ok := c.streamSend[w.st.id]; !ok {
		w.err = errStreamClosed
		return
	}
	if err := c.writeLocked(c.encodeHeaders(nil, w.st.id, end, fields...)); err != nil {
		w.err = err
	}
}

func (w *fallbackWriter) Write(p []byte) (int, error) {
	if !w.sent {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	c := w.sc.c
	c.wmu.Lock()
	err := c.writeData(w.st.id, nil, [][]byte{p}, len(p), false, nil, nil)
	c.wmu.Unlock()
	if err != nil {
		w.err = err
		return 0, err
	}
	return len(p), nil
}

// Flush sends the headers if they have not gone yet; data is written as
// it comes.
func (w *fallbackWriter) Flush() {
	if !w.sent {
		w.WriteHeader(http.StatusOK)
	}
}

// finish ends the stream: with the trailers the handler declared
// ("Trailer" header) or set with http.TrailerPrefix, or with the headers
// alone when nothing was sent.
func (w *fallbackWriter) finish() {
	if !w.sent {
		// Trailers-only: the trailers go out with the headers.
		for k, vs := range w.h {
			if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
				w.h[http.CanonicalHeaderKey(name)] = vs
				delete(w.h, k)
			}
		}
		w.sendHeaders(true)
		return
	}
	if w.err != nil {
		return
	}
	var fields []string
	for _, decl := range w.h["Trailer"] {
		for _, k := range strings.Split(decl, ",") {
			k = http.CanonicalHeaderKey(strings.TrimSpace(k))
			for _, v := range w.h[k] {
				fields = append(fields, strings.ToLower(k), v)
			}
		}
	}
	for k, vs := range w.h {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			for _, v := range vs {
				fields = append(fields, strings.ToLower(name), v)
			}
		}
	}
	c := w.sc.c
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, ok := c.streamSend[w.st.id]; !ok {
		return
	}
	c.writeLocked(c.encodeHeaders(nil, w.st.id, true, fields...))
}
