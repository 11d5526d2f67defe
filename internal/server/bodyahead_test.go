package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"goinfer/internal/server"
	"goinfer/internal/server/servertest"
	"goinfer/internal/tensor"
)

// sendRawInfer sends an inference request over its own connection: the head
// declares contentLength and hdrLen, then body is written, then the
// connection is half-closed (cut) or left open. It returns the answer's
// status and body.
func sendRawInfer(t *testing.T, addr string, contentLength, hdrLen int, body []byte, cut bool) (int, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s: %d\r\n\r\n",
		servertest.ModelName, contentLength, server.HeaderContentLength, hdrLen)
	if _, err := c.Write(body); err != nil {
		t.Fatal(err)
	}
	if cut {
		c.(*net.TCPConn).CloseWrite()
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestReadAhead sends requests whose binary part is large enough to be
// read while the header is decoded to servers with and without that, and
// wants the same answers from both: the logits of good requests, the same
// status and message for each malformed, cut or stalled body. The pinned
// buffers the early reads take must all go back to the pool.
func TestReadAhead(t *testing.T) {
	const size = 160 // one image: 307,200 bytes, over minReadAhead
	img := tensor.F32Bytes(randImages(1, size, 5))
	good, err := json.Marshal(map[string]any{"inputs": []any{binaryInput("FP32", []int{1, 3, size, size}, len(img))}})
	if err != nil {
		t.Fatal(err)
	}
	hdr := func(in map[string]any) []byte {
		b, err := json.Marshal(map[string]any{"inputs": []any{in}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	tests := []struct {
		name    string
		json    []byte
		bin     []byte
		declare int  // Content-Length; 0: what is sent
		cut     bool // half-close after sending
		status  int
	}{
		{"good", good, img, 0, false, 200},
		{"binary size mismatch", hdr(binaryInput("FP32", []int{1, 3, size, size}, 1000)), img, 0, false, 400},
		{"extra bytes", good, cat(img, []byte{1, 2, 3}), 0, false, 400},
		{"malformed JSON", []byte(`{"inputs": [}` + string(good[13:])), img, 0, false, 400},
		{"two images declared, one sent", hdr(binaryInput("FP32", []int{2, 3, size, size}, 2*len(img))), img, 0, false, 400},
		{"body cut", good, img[:len(img)/2], len(good) + len(img), true, 400},
		{"body stalls", good, img[:len(img)/2], len(good) + len(img), false, 408},
	}
	type answer struct {
		status int
		body   string
	}
	answers := map[bool][]answer{}
	for _, off := range []bool{false, true} {
		s := servertest.Start(t, servertest.Options{Size: size, Pinned: true, Server: func(c *server.Config) {
			c.NoReadAhead = off
			c.ReadTimeout = 300 * time.Millisecond
		}})
		want := s.Expected(t, tensor.BytesF32(img), 1)
		var allocs int64
		for round := range 2 {
			answers[off] = answers[off][:0]
			for _, tt := range tests {
				cl := tt.declare
				if cl == 0 {
					cl = len(tt.json) + len(tt.bin)
				}
				status, body := sendRawInfer(t, s.HTTPAddr, cl, len(tt.json), cat(tt.json, tt.bin), tt.cut)
				if status != tt.status {
					t.Fatalf("read ahead off=%v, %s: status %d, want %d: %s", off, tt.name, status, tt.status, body)
				}
				if status == 200 {
					var jr jsonResponse
					if err := json.Unmarshal(body, &jr); err != nil {
						t.Fatal(err)
					}
					var got []float32
					if err := json.Unmarshal(jr.Outputs[0].Data, &got); err != nil {
						t.Fatal(err)
					}
					checkLogits(t, got, want)
					body = nil
				}
				answers[off] = append(answers[off], answer{status, string(body)})
			}
			if round == 0 {
				allocs = s.HostAllocs.Load()
			} else if n := s.HostAllocs.Load(); n != allocs {
				t.Errorf("read ahead off=%v: the second round allocated %d more pinned buffers: some were not given back", off, n-allocs)
			}
		}
	}
	for i, tt := range tests {
		if on, off := answers[false][i], answers[true][i]; on != off {
			t.Errorf("%s: with read ahead %d %s, without %d %s", tt.name, on.status, on.body, off.status, off.body)
		}
	}
}
