package h1

import (
	"strconv"
	"strings"
	"testing"
)

// FuzzParseHead feeds arbitrary bytes to the head scanner and parser: they
// must not panic, and what they accept must be a well-formed head.
func FuzzParseHead(f *testing.F) {
	f.Add([]byte("POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\nInference-Header-Content-Length: 2\r\n\r\n"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add([]byte("POST / HTTP/1.1\nHost: x\n\n"))
	f.Add([]byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"))
	f.Add([]byte("POST / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		end := headEnd(b)
		if end < 0 {
			return
		}
		h, ok := parseHead(b[:end])
		if !ok {
			return
		}
		if h.size != end || h.contentLength < 0 || !token([]byte(h.method)) || !strings.HasPrefix(h.target, "/") {
			t.Fatalf("accepted a malformed head %q: %+v", b[:end], h)
		}
		if len(h.header["Host"]) != 1 {
			t.Fatalf("accepted %q with Host %q", b[:end], h.header["Host"])
		}
		if v := h.header["Content-Length"]; len(v) > 0 {
			if n, err := strconv.ParseInt(v[0], 10, 64); err != nil || n != h.contentLength {
				t.Fatalf("Content-Length %q parsed as %d", v, h.contentLength)
			}
		}
		for k, vs := range h.header {
			for _, v := range vs {
				if strings.ContainsAny(k+v, "\r\n") {
					t.Fatalf("field %q: %q holds a line break", k, v)
				}
			}
		}
	})
}
