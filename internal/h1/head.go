package h1

import (
	"bytes"
	"net/http"
	"net/textproto"
	"strconv"
)

// head is a parsed request head that the fast loop may serve: an HTTP/1.1
// request with a Content-Length body (possibly empty), no transfer coding,
// no Expect and no Upgrade. Anything else is left to net/http, which
// knows every corner of the protocol and its errors.
type head struct {
	method, target string
	header         http.Header
	contentLength  int64
	close          bool // the client asked to close after the answer
	size           int  // bytes of the head, blank line included
}

// headEnd returns the length of the head at the start of b (through the
// blank line that ends it), or -1 if b does not hold a whole head yet. A
// head that ends with bare line feeds is found too (and refused by
// parseHead), so that it is never waited on as if incomplete.
func headEnd(b []byte) int {
	for i := bytes.IndexByte(b, '\n'); i >= 0; {
		j := i + 1
		if j < len(b) && b[j] == '\r' {
			j++
		}
		if j < len(b) && b[j] == '\n' {
			return j + 1
		}
		k := bytes.IndexByte(b[i+1:], '\n')
		if k < 0 {
			break
		}
		i += 1 + k
	}
	return -1
}

// parseHead parses the head b (as headEnd delimits it). It reports false
// for any request the fast loop does not take, malformed ones included:
// those go to net/http, which answers them as it always has.
func parseHead(b []byte) (head, bool) {
	h := head{size: len(b), contentLength: -1}
	line, rest, ok := bytes.Cut(b, []byte("\r\n"))
	if !ok {
		return h, false
	}
	method, rest1, ok1 := bytes.Cut(line, []byte(" "))
	target, proto, ok2 := bytes.Cut(rest1, []byte(" "))
	if !ok1 || !ok2 || string(proto) != "HTTP/1.1" || len(target) == 0 || target[0] != '/' || !token(method) {
		return h, false
	}
	for _, c := range target {
		if c <= ' ' || c == 0x7f {
			return h, false
		}
	}
	h.method, h.target = string(method), string(target)
	h.header = make(http.Header, 8)
	host := false
	for len(rest) > 2 {
		line, rest, ok = bytes.Cut(rest, []byte("\r\n"))
		if !ok {
			return h, false
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || !token(name) {
			return h, false // obsolete line folding, a bare value, bad name
		}
		value = bytes.Trim(value, " \t")
		for _, c := range value {
			if (c < ' ' && c != '\t') || c == 0x7f {
				return h, false
			}
		}
		key := textproto.CanonicalMIMEHeaderKey(string(name))
		switch key {
		case "Content-Length":
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 || len(value) == 0 || value[0] == '+' || (h.contentLength >= 0 && n != h.contentLength) {
				return h, false
			}
			h.contentLength = n
		case "Transfer-Encoding", "Expect", "Upgrade":
			return h, false
		case "Host":
			if host {
				return h, false
			}
			host = true
		case "Connection":
			h.close = h.close || headerHasToken(string(value), "close")
		}
		h.header[key] = append(h.header[key], string(value))
	}
	if !host || string(rest) != "\r\n" {
		return h, false
	}
	if h.contentLength < 0 {
		h.contentLength = 0
	}
	return h, true
}

// token reports whether b is a non-empty RFC 9110 token.
func token(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c >= 0x80 || !tchar[c] {
			return false
		}
	}
	return true
}

var tchar = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()
