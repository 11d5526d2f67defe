package h1

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// streamAfter is how many body bytes a response holds before it starts
// sending: answers up to it (every batch-1 answer) go out in one write
// with their head when the handler flushes or returns.
const streamAfter = 64 << 10

// response is the fast loop's http.ResponseWriter. It keeps the head and
// the body in memory until the handler flushes or returns, then writes
// them with one writev, where net/http's 4 KiB buffer sends an answer
// just over 4 KiB in two writes, and the client wakes twice.
type response struct {
	c      *conn
	body   *body
	header http.Header

	status      int // 0 until WriteHeader
	headSent    bool
	chunked     bool  // the body goes out in chunks (unknown length, streamed)
	declared    int64 // Content-Length the handler set, -1 if none
	sent        int64 // body bytes written to the socket
	buf         []byte
	closeAfter  bool // the connection ends after this answer
	writeFailed bool
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("h1: invalid WriteHeader code %v", code))
	}
	if code < 200 {
		// Informational answers (103 Early Hints) are not sent by this
		// loop; the final status follows.
		return
	}
	w.status = code
	w.declared = -1
	if v := w.header.Get("Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			w.declared = n
		} else {
			w.header.Del("Content-Length")
		}
	}
}

func (w *response) bodyAllowed() bool {
	return w.status != http.StatusNoContent && w.status != http.StatusNotModified
}

func (w *response) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.bodyAllowed() {
		return 0, http.ErrBodyNotAllowed
	}
	if w.writeFailed {
		return 0, errWriteFailed
	}
	if w.declared >= 0 && w.sent+int64(len(w.buf))+int64(len(p)) > w.declared {
		return 0, http.ErrContentLength
	}
	w.buf = append(w.buf, p...)
	if len(w.buf) >= streamAfter {
		if err := w.send(false); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

var errWriteFailed = errors.New("h1: the connection failed while writing the answer")

// Flush sends what the handler wrote so far.
func (w *response) Flush() { w.FlushError() }

// FlushError is Flush with its error, for http.ResponseController.
func (w *response) FlushError() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.send(false)
}

// SetReadDeadline sets the connection's read deadline, for
// http.ResponseController (the inference handler lifts --read_timeout
// once the body is in).
func (w *response) SetReadDeadline(t time.Time) error { return w.c.rwc.SetReadDeadline(t) }

// SetWriteDeadline sets the connection's write deadline.
func (w *response) SetWriteDeadline(t time.Time) error { return w.c.rwc.SetWriteDeadline(t) }

// finish completes the answer once the handler has returned.
func (w *response) finish() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if err := w.send(true); err != nil {
		return err
	}
	if w.declared >= 0 && w.sent != w.declared {
		// The client would wait for bytes that never come, or read the
		// rest as the next answer.
		w.closeAfter = true
	}
	return nil
}

// send writes the head, if not yet sent, and the buffered body; final
// says the handler has returned, so the length of an undeclared body is
// known.
func (w *response) send(final bool) error {
	if w.writeFailed {
		return errWriteFailed
	}
	var bufs net.Buffers
	var hb []byte
	if !w.headSent {
		hb = w.appendHead(w.c.headBuf[:0], final)
		bufs = append(bufs, hb)
		w.headSent = true
	}
	if len(w.buf) > 0 {
		if w.chunked {
			w.c.chunkBuf = strconv.AppendInt(w.c.chunkBuf[:0], int64(len(w.buf)), 16)
			w.c.chunkBuf = append(w.c.chunkBuf, "\r\n"...)
			bufs = append(bufs, w.c.chunkBuf, w.buf, crlf)
		} else {
			bufs = append(bufs, w.buf)
		}
	}
	if final && w.chunked {
		bufs = append(bufs, lastChunk)
	}
	n := int64(len(w.buf))
	w.buf = w.buf[:0]
	if len(bufs) == 0 {
		return nil
	}
	if err := w.c.write(bufs); err != nil {
		w.writeFailed, w.closeAfter = true, true
		return err
	}
	if hb != nil {
		w.c.headBuf = hb[:0]
	}
	w.sent += n
	return nil
}

var (
	crlf      = []byte("\r\n")
	lastChunk = []byte("0\r\n\r\n")
)

// appendHead appends the status line and header fields. An answer whose
// length is not declared gets one from the body when the handler has
// returned, and is chunked when it is sent before.
func (w *response) appendHead(b []byte, final bool) []byte {
	h := w.header
	if w.bodyAllowed() && w.declared < 0 {
		if final {
			w.declared = int64(len(w.buf))
			h["Content-Length"] = []string{strconv.Itoa(len(w.buf))}
		} else {
			w.chunked = true
			h["Transfer-Encoding"] = chunkedValue
		}
	}
	if _, ok := h["Content-Type"]; !ok && w.bodyAllowed() && len(w.buf) > 0 {
		h["Content-Type"] = []string{http.DetectContentType(w.buf)}
	}
	if _, ok := h["Date"]; !ok {
		h["Date"] = []string{time.Now().UTC().Format(http.TimeFormat)}
	}
	if !w.body.discardable() || w.c.srv.shuttingDown() {
		w.closeAfter = true
	}
	if w.closeAfter {
		w.closeAfter = true
		h["Connection"] = closeValue
	} else if v := h.Get("Connection"); v != "" && headerHasToken(v, "close") {
		w.closeAfter = true
	}
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(w.status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(w.status)...)
	b = append(b, "\r\n"...)
	for k, vs := range h {
		for _, v := range vs {
			b = append(b, k...)
			b = append(b, ": "...)
			b = appendSanitized(b, v)
			b = append(b, "\r\n"...)
		}
	}
	return append(b, "\r\n"...)
}

var (
	chunkedValue = []string{"chunked"}
	closeValue   = []string{"close"}
)

// appendSanitized appends a header value with CR and LF replaced by
// spaces, as net/http does, so that no value can start a field of its own.
func appendSanitized(b []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		b = append(b, c)
	}
	return b
}

// headerHasToken reports whether the comma-separated header value v holds
// token t, compared without case.
func headerHasToken(v, t string) bool {
	for v != "" {
		var part string
		part, v, _ = strings.Cut(v, ",")
		if strings.EqualFold(strings.TrimSpace(part), t) {
			return true
		}
	}
	return false
}
