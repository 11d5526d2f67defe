package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"goinfer/internal/busypoll"
)

// HTTP clients for inference requests (Options.HTTPClient).
const (
	// HTTPLean is a small HTTP/1.1 client made for one kind of request:
	// persistent connections, the request head, JSON header and tensor
	// handed to the socket in one writev, and only the response headers
	// the protocol needs parsed. The default for http:// URLs.
	HTTPLean = "lean"
	// HTTPNetHTTP is Go's net/http client. https:// URLs always use it.
	HTTPNetHTTP = "nethttp"
)

// Bounds on what a server's response may make the lean client read or
// hold before its body.
const (
	maxResponseHead = 64 << 10
	maxHeaderLines  = 128
	maxResponseJSON = 16 << 20
	maxErrorBody    = 64 << 10
)

// h1Client sends inference requests over persistent HTTP/1.1 connections
// to one server. Connections are used by one request at a time and kept
// idle between requests, up to maxIdle of them.
type h1Client struct {
	addr    string // host:port dialed
	host    string // Host header
	dialer  net.Dialer
	maxIdle int
	// Options.BusyPoll and Options.SocketBuffer, for new connections.
	busyPoll     time.Duration
	socketBuffer int

	mu     sync.Mutex
	idle   []*h1Conn
	closed bool
}

// h1Conn is one connection and its read buffer and request head buffer,
// reused by the requests it carries.
type h1Conn struct {
	nc   net.Conn
	br   *bufio.Reader
	head []byte
	bufs net.Buffers // the parts of the request being written
	used bool        // has carried a request before
}

func newH1Client(hostport string, maxIdle int) *h1Client {
	return &h1Client{
		addr: hostport, host: hostport, maxIdle: maxIdle,
		dialer: net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second},
	}
}

// get returns an idle connection, or dials a new one.
func (h *h1Client) get(ctx context.Context) (*h1Conn, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, errors.New("client is closed")
	}
	if n := len(h.idle); n > 0 {
		c := h.idle[n-1]
		h.idle[n-1] = nil
		h.idle = h.idle[:n-1]
		h.mu.Unlock()
		return c, nil
	}
	h.mu.Unlock()
	return h.dial(ctx)
}

func (h *h1Client) dial(ctx context.Context) (*h1Conn, error) {
	nc, err := h.dialer.DialContext(ctx, "tcp", h.addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		// A request's head and tensor go out in one writev; the
		// response comes back whole before the next request.
		tc.SetNoDelay(true)
	}
	if err := busypoll.SetBuffers(nc, h.socketBuffer); err != nil {
		nc.Close()
		return nil, err
	}
	nc = busypoll.Wrap(nc, h.busyPoll)
	return &h1Conn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), head: make([]byte, 0, 512)}, nil
}

// put keeps c for a later request, or closes it when the client is
// closed or enough are idle.
func (h *h1Client) put(c *h1Conn) {
	c.used = true
	h.mu.Lock()
	if h.closed || len(h.idle) >= h.maxIdle {
		h.mu.Unlock()
		c.nc.Close()
		return
	}
	h.idle = append(h.idle, c)
	h.mu.Unlock()
}

func (h *h1Client) close() error {
	h.mu.Lock()
	idle := h.idle
	h.idle, h.closed = nil, true
	h.mu.Unlock()
	var errs []error
	for _, c := range idle {
		errs = append(errs, c.nc.Close())
	}
	return errors.Join(errs...)
}

// post sends an inference request to path: the JSON in js, followed by
// bin in the binary tensor data extension when bin is not nil. It returns
// the response's JSON and its logits, read into out when it has room
// (with inPlace, the logits are elsewhere: see decodeInferBody).
func (h *h1Client) post(ctx context.Context, path string, js, bin []byte, out []float32, inPlace bool, tm *sendTimes) (inferResponse, []float32, error) {
	var ir inferResponse
	var logits []float32
	err := h.exchange(ctx, path, js, [][]byte{bin}, bin != nil, tm, func(body io.Reader, jsonLen, contentLength int64) error {
		var err error
		ir, logits, err = decodeInferBody(body, jsonLen, contentLength, out, inPlace)
		return err
	})
	if err != nil {
		return ir, nil, err
	}
	return ir, logits, nil
}

// sendTimes are where a request's time went on the client: handing the
// request to the socket, and waiting from then for the answer's first
// byte.
type sendTimes struct{ send, wait time.Duration }

// exchange sends an inference POST to path: the JSON in js and, with
// binary (the binary data extension), the parts of bin after it, handed
// to the socket in one writev without being copied together. decode
// reads the body of a 200 answer (see readBody); other answers are
// ServerErrors. A request that fails on a reused connection before any
// byte of the response arrived (the server had closed it while idle, or
// as it drained) is sent once more on a new one. tm, if not nil, gets the
// times of the attempt that was answered.
func (h *h1Client) exchange(ctx context.Context, path string, js []byte, bin [][]byte, binary bool, tm *sendTimes, decode bodyDecoder) error {
	for attempt := 0; ; attempt++ {
		c, err := h.get(ctx)
		if err != nil {
			return h.fail(ctx, path, "connecting", err)
		}
		reused := c.used
		keep, started, err := h.roundTrip(ctx, c, path, js, bin, binary, tm, decode)
		if keep {
			h.put(c)
		} else {
			c.nc.Close()
		}
		if err != nil && reused && !started && attempt == 0 && ctx.Err() == nil && closedByPeer(err) {
			continue
		}
		if err != nil {
			var se *ServerError
			if errors.As(err, &se) || errors.Is(err, errLogitsInMessage) {
				return err
			}
			return h.fail(ctx, path, "", err)
		}
		return nil
	}
}

// fail names the request in a transport error; a request that ctx ended
// fails with ctx's error, wrapped.
func (h *h1Client) fail(ctx context.Context, path, what string, err error) error {
	if what != "" {
		what += ": "
	}
	cerr := ctx.Err()
	if dl, ok := ctx.Deadline(); ok && cerr == nil && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(dl) {
		// The socket's deadline, the context's, passed first.
		cerr = context.DeadlineExceeded
	}
	if cerr != nil {
		return fmt.Errorf("POST http://%s%s: %s%w (%v)", h.host, path, what, cerr, err)
	}
	return fmt.Errorf("POST http://%s%s: %s%w", h.host, path, what, err)
}

// closedByPeer tells the errors of a connection the server had closed.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// roundTrip runs one request on c. keep says whether c may carry another;
// started whether any of the response arrived.
func (h *h1Client) roundTrip(ctx context.Context, c *h1Conn, path string, js []byte, bin [][]byte, binary bool, tm *sendTimes, decode bodyDecoder) (keep, started bool, err error) {
	// The context's deadline bounds the socket calls; its cancellation
	// cuts them short. A connection whose calls were cut short is closed,
	// not reused: its stream is in an unknown state.
	if dl, ok := ctx.Deadline(); ok {
		c.nc.SetDeadline(dl)
	} else {
		c.nc.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() {
			keep = false
		}
	}()

	binLen := 0
	for _, b := range bin {
		binLen += len(b)
	}
	c.head = appendRequestHead(c.head[:0], h.host, path, len(js), binLen, binary)
	// WriteTo consumes the slice it writes, element by element: the
	// connection's own copy of the parts list keeps the caller's intact
	// (and is reused, not allocated, by the next request).
	c.bufs = append(c.bufs[:0], c.head, js)
	if binary {
		for _, b := range bin {
			if len(b) > 0 {
				c.bufs = append(c.bufs, b)
			}
		}
	}
	bufs := c.bufs
	t0 := time.Now()
	_, werr := bufs.WriteTo(c.nc)
	t1 := time.Now()
	clear(c.bufs) // drop the references to the caller's buffers
	if werr != nil {
		// The server may have answered (and closed) before reading the
		// whole body, as it does when it refuses a request: read what
		// it said, if it said anything.
		rh, rerr := readResponseHead(c.br)
		if rerr != nil {
			return false, false, fmt.Errorf("sending the request: %w", werr)
		}
		return false, true, readBody(c.br, &rh, decode)
	}
	if _, perr := c.br.Peek(1); perr != nil {
		return false, false, fmt.Errorf("waiting for the response: %w", perr)
	}
	if tm != nil {
		*tm = sendTimes{send: t1.Sub(t0), wait: time.Since(t1)}
	}
	rh, err := readResponseHead(c.br)
	if err != nil {
		return false, true, err
	}
	err = readBody(c.br, &rh, decode)
	// A refusal read whole leaves the connection usable: an overloaded
	// server's 503s do not cost a new connection each.
	var se *ServerError
	keep = !rh.close && (err == nil || errors.As(err, &se))
	return keep, true, err
}

// appendRequestHead appends the request line and headers of an inference
// POST whose body is a JSON part of jsonLen bytes and, when binary, a
// tensor of binLen bytes after it.
func appendRequestHead(b []byte, host, path string, jsonLen, binLen int, binary bool) []byte {
	b = append(b, "POST "...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	if binary {
		b = append(b, "\r\nContent-Type: application/octet-stream\r\n"+headerContentLength+": "...)
		b = strconv.AppendInt(b, int64(jsonLen), 10)
	} else {
		b = append(b, "\r\nContent-Type: application/json"...)
	}
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(jsonLen+binLen), 10)
	return append(b, "\r\n\r\n"...)
}

// responseHead is what the lean client needs of a response's head.
type responseHead struct {
	status        int
	contentLength int64 // -1: not given
	chunked       bool
	close         bool // the server closes the connection after the body
	retryAfter    bool
	jsonLen       int64 // Inference-Header-Content-Length, -1: not given
}

// readResponseHead reads a response's status line and headers, skipping
// informational (1xx) responses.
func readResponseHead(br *bufio.Reader) (responseHead, error) {
	for {
		rh, err := readOneHead(br)
		if err != nil || rh.status >= 200 {
			return rh, err
		}
		if rh.status == 101 {
			return rh, errors.New("the server switched protocols (101), which an inference request never asks for")
		}
	}
}

func readOneHead(br *bufio.Reader) (responseHead, error) {
	rh := responseHead{contentLength: -1, jsonLen: -1}
	total := 0
	line, err := readLine(br, &total)
	if err != nil {
		return rh, fmt.Errorf("reading the response's status line: %w", err)
	}
	var minor byte
	switch {
	case len(line) >= 12 && bytes.HasPrefix(line, []byte("HTTP/1.")) && (line[7] == '0' || line[7] == '1') && line[8] == ' ':
		minor = line[7]
		if len(line) > 12 && line[12] != ' ' {
			return rh, fmt.Errorf("response status line %q is not HTTP/1.x", clip(line))
		}
	default:
		return rh, fmt.Errorf("response status line %q is not HTTP/1.x", clip(line))
	}
	code, err := strconv.Atoi(string(line[9:12]))
	if err != nil || code < 100 || code > 999 || line[9] == '+' || line[9] == '-' {
		return rh, fmt.Errorf("response status line %q has no valid status code", clip(line))
	}
	rh.status = code
	rh.close = minor == '0' // HTTP/1.0 closes unless it says keep-alive
	for n := 0; ; n++ {
		line, err := readLine(br, &total)
		if err != nil {
			return rh, fmt.Errorf("reading the response's headers: %w", err)
		}
		if len(line) == 0 {
			break
		}
		if n == maxHeaderLines {
			return rh, fmt.Errorf("response has over %d header lines", maxHeaderLines)
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || len(name) == 0 || bytes.ContainsAny(name, " \t") {
			return rh, fmt.Errorf("response header line %q is malformed", clip(line))
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			v, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || v < 0 || value[0] == '+' || (rh.contentLength >= 0 && v != rh.contentLength) {
				return rh, fmt.Errorf("response Content-Length %q is not valid", clip(value))
			}
			rh.contentLength = v
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			if !bytes.EqualFold(value, []byte("chunked")) {
				return rh, fmt.Errorf("response Transfer-Encoding %q is not supported (want chunked)", clip(value))
			}
			rh.chunked = true
		case bytes.EqualFold(name, []byte("Connection")):
			for _, tok := range bytes.Split(value, []byte(",")) {
				tok = bytes.TrimSpace(tok)
				switch {
				case bytes.EqualFold(tok, []byte("close")):
					rh.close = true
				case bytes.EqualFold(tok, []byte("keep-alive")) && minor == '0':
					rh.close = false
				}
			}
		case bytes.EqualFold(name, []byte("Retry-After")):
			rh.retryAfter = len(value) > 0
		case bytes.EqualFold(name, []byte(headerContentLength)):
			v, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || v < 0 || value[0] == '+' {
				return rh, fmt.Errorf("response %s %q is not a valid size", headerContentLength, clip(value))
			}
			rh.jsonLen = v
		}
	}
	switch {
	case rh.chunked:
		// A length beside chunked encoding means nothing (RFC 9112 6.3).
		rh.contentLength = -1
	case rh.contentLength < 0 && rh.status >= 200 && rh.status != 204 && rh.status != 304:
		// The body ends with the connection.
		rh.close = true
	}
	return rh, nil
}

// readLine reads one CRLF- (or LF-) terminated line, without its end,
// counting its bytes into total, which may not pass maxResponseHead. The
// line aliases br's buffer until the next read.
func readLine(br *bufio.Reader, total *int) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	*total += len(line)
	switch {
	case errors.Is(err, bufio.ErrBufferFull) || *total > maxResponseHead:
		return nil, fmt.Errorf("response head is over %d bytes", maxResponseHead)
	case errors.Is(err, io.EOF) && len(line) > 0:
		return nil, io.ErrUnexpectedEOF
	case err != nil:
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// clip shortens b for an error message.
func clip(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "..."
	}
	return string(b)
}

// bodyDecoder decodes the body of a 200 answer to an inference request:
// all JSON, or, when jsonLen >= 0, a JSON part of jsonLen bytes and binary
// data after it; contentLength, when not negative, is the body's length.
// Having returned without error, it has read the body to its end.
type bodyDecoder func(body io.Reader, jsonLen, contentLength int64) error

// readInferBody is readBody decoding an answer of logits (decodeInferBody).
func readInferBody(br *bufio.Reader, rh *responseHead, out []float32, inPlace bool) (inferResponse, []float32, error) {
	var ir inferResponse
	var logits []float32
	err := readBody(br, rh, func(body io.Reader, jsonLen, contentLength int64) error {
		var err error
		ir, logits, err = decodeInferBody(body, jsonLen, contentLength, out, inPlace)
		return err
	})
	if err != nil {
		return ir, nil, err
	}
	return ir, logits, nil
}

// readBody reads the body the head rh announced: an error answer
// becomes a ServerError; an inference answer goes to decode. Having
// returned without error, or with a ServerError while rh.close is false,
// it has read the body exactly, so that the connection can carry another
// request; it sets rh.close when it leaves an error answer's body unread.
func readBody(br *bufio.Reader, rh *responseHead, decode bodyDecoder) error {
	var body io.Reader
	switch {
	case rh.status == 204 || rh.status == 304:
		body = bytes.NewReader(nil)
	case rh.chunked:
		body = httputil.NewChunkedReader(br)
	case rh.contentLength >= 0:
		body = io.LimitReader(br, rh.contentLength)
	default:
		// Delimited by the end of the connection.
		body = br
	}
	if rh.status != 200 {
		b, err := io.ReadAll(io.LimitReader(body, maxErrorBody+1))
		if err != nil {
			return fmt.Errorf("reading the body of a %d answer: %w", rh.status, err)
		}
		if len(b) > maxErrorBody || rh.chunked || rh.contentLength < 0 {
			// The rest, a chunked body's trailer or the end of the
			// connection is left unread.
			rh.close = true
			b = b[:min(len(b), maxErrorBody)]
		}
		return serverErrorFrom(rh.status, rh.retryAfter, b)
	}
	cl := rh.contentLength
	if rh.chunked {
		cl = -1
	}
	if err := decode(body, rh.jsonLen, cl); err != nil {
		return err
	}
	if rh.chunked || rh.contentLength < 0 {
		// The last chunk, or the end of the connection, follows.
		if n, err := io.Copy(io.Discard, io.LimitReader(body, 1)); err != nil || n != 0 {
			if err == nil {
				err = errors.New("response body is longer than its JSON and binary parts")
			}
			return err
		}
	}
	if rh.chunked {
		// The trailer section, which nothing here needs, ends the body.
		total := 0
		for {
			line, err := readLine(br, &total)
			if err != nil {
				return fmt.Errorf("reading the response's trailer: %w", err)
			}
			if len(line) == 0 {
				break
			}
		}
	}
	return nil
}
