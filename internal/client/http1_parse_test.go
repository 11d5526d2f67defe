package client

import (
	"bufio"
	"errors"
	"strconv"
	"strings"
	"testing"

	"goinfer/internal/backend"
	"goinfer/internal/tensor"
)

// binaryAnswer is an inference answer as goinfer sends it: a JSON part
// and n float32 logits of value 1.5, framed by head (the status line and
// headers, without the blank line) and the given lengths.
func binaryAnswer(n int) (js string, bin string) {
	js = `{"model_name":"m","parameters":{"batch_size":1,"queue_time_us":7},"outputs":[{"name":"logits","datatype":"FP32","shape":[1,` +
		strconv.Itoa(n) + `],"parameters":{"binary_data_size":` + strconv.Itoa(4*n) + `}}]}`
	v := make([]float32, n)
	for i := range v {
		v[i] = 1.5
	}
	return js, string(tensor.F32Bytes(v))
}

func okHead(js, bin string) string {
	return "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nInference-Header-Content-Length: " + strconv.Itoa(len(js)) +
		"\r\nContent-Length: " + strconv.Itoa(len(js)+len(bin)) + "\r\n\r\n"
}

func chunk(s string) string { return strconv.FormatInt(int64(len(s)), 16) + "\r\n" + s + "\r\n" }

// readAnswer parses one answer from raw as the lean client does.
func readAnswer(raw string, out []float32) (responseHead, inferResponse, []float32, *bufio.Reader, error) {
	br := bufio.NewReaderSize(strings.NewReader(raw), 4096)
	rh, err := readResponseHead(br)
	if err != nil {
		return rh, inferResponse{}, nil, br, err
	}
	ir, logits, err := readInferBody(br, &rh, out, false)
	return rh, ir, logits, br, err
}

func TestReadAnswer(t *testing.T) {
	js, bin := binaryAnswer(4)
	next := "HTTP/1.1 204 No Content\r\n\r\n" // what must stay unread
	jsData := `{"outputs":[{"name":"logits","datatype":"FP32","shape":[1,4],"data":[1.5,1.5,1.5,1.5]}]}`
	jsHuge := `{"outputs":[{"name":"logits","datatype":"FP32","shape":[1,200000000],"parameters":{"binary_data_size":800000000}}]}`
	for _, tc := range []struct {
		name      string
		raw       string
		wantErr   string
		close     bool
		queueFull bool
	}{
		{"binary", okHead(js, bin) + js + bin + next, "", false, false},
		{"continue-first", "HTTP/1.1 100 Continue\r\n\r\n" + okHead(js, bin) + js + bin + next, "", false, false},
		{"lf-only", strings.ReplaceAll(okHead(js, bin), "\r\n", "\n") + js + bin + next, "", false, false},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nInference-Header-Content-Length: " + strconv.Itoa(len(js)) + "\r\n\r\n" +
			chunk(js[:10]) + chunk(js[10:]+bin[:3]) + chunk(bin[3:]) + "0\r\nX-Trailer: 1\r\n\r\n" + next, "", false, false},
		{"close", strings.Replace(okHead(js, bin), "\r\n\r\n", "\r\nConnection: keep-alive, Close\r\n\r\n", 1) + js + bin, "", true, false},
		{"http10", strings.Replace(okHead(js, bin), "HTTP/1.1", "HTTP/1.0", 1) + js + bin, "", true, false},
		{"until-eof", "HTTP/1.1 200 OK\r\nInference-Header-Content-Length: " + strconv.Itoa(len(js)) + "\r\n\r\n" + js + bin, "", true, false},
		{"json-data", "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(jsData)) + "\r\n\r\n" + jsData + next, "", false, false},
		{"queue-full", "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 20\r\n\r\n{\"error\":\"is full\"} " + next, "is full", false, true},
		{"unavailable", "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n\r\nno", "server answered 503: no", false, false},
		{"not-http", "SSH-2.0-OpenSSH\r\n\r\n", "not HTTP/1.x", false, false},
		{"http2", "HTTP/2 200\r\n\r\n", "not HTTP/1.x", false, false},
		{"bad-code", "HTTP/1.1 2x0 OK\r\n\r\n", "no valid status code", false, false},
		{"switch", "HTTP/1.1 101 Switching\r\n\r\n", "switched protocols", false, false},
		{"bad-length", "HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", "Content-Length", false, false},
		{"two-lengths", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", "Content-Length", false, false},
		{"gzip", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "Transfer-Encoding", false, false},
		{"bad-header", "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed", false, false},
		{"huge-head", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", "over 65536 bytes", false, false},
		{"many-headers", "HTTP/1.1 200 OK\r\n" + strings.Repeat("X: 1\r\n", 200) + "\r\n", "header lines", false, false},
		{"short-json", okHead(js, bin) + js[:20], "JSON part", false, false},
		{"short-logits", okHead(js, bin) + js + bin[:5], "binary logits", false, false},
		{"length-mismatch", strings.Replace(okHead(js, bin), "Content-Length: "+strconv.Itoa(len(js)+16), "Content-Length: "+strconv.Itoa(len(js)+20), 1) + js + bin + "xxxx", "Content-Length", false, false},
		{"json-too-long", "HTTP/1.1 200 OK\r\nInference-Header-Content-Length: 99999999\r\n\r\n", "over the limit", false, false},
		{"wrong-size", strings.Replace(okHead(js, bin)+js, `"binary_data_size":16`, `"binary_data_size":17`, 1) + bin, "binary_data_size", false, false},
		// A shape of 200M values with 4 bytes of them: no 800 MB allocation.
		{"huge-shape", "HTTP/1.1 200 OK\r\nInference-Header-Content-Length: " + strconv.Itoa(len(jsHuge)) + "\r\n\r\n" + jsHuge + "abcd", "binary logits", true, false},
		{"chunked-extra", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nInference-Header-Content-Length: " + strconv.Itoa(len(js)) + "\r\n\r\n" +
			chunk(js+bin+"zz") + "0\r\n\r\n", "longer than", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := make([]float32, 4)
			rh, ir, logits, br, err := readAnswer(tc.raw, out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				if errors.Is(err, backend.ErrQueueFull) != tc.queueFull {
					t.Errorf("errors.Is(%v, ErrQueueFull) = %v", err, !tc.queueFull)
				}
				if tc.queueFull {
					if rest, _ := br.Peek(br.Buffered()); !strings.HasPrefix(string(rest), next) {
						t.Errorf("after the error answer %q is left, want the next answer", rest)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(logits) != 4 || logits[0] != 1.5 || logits[3] != 1.5 || &logits[0] != &out[0] {
				t.Fatalf("logits %v, want 4 x 1.5 in out", logits)
			}
			if rh.close != tc.close {
				t.Errorf("close %v, want %v", rh.close, tc.close)
			}
			if q, _, b := ir.serverParams(); tc.name == "binary" && (q != 7000 || b != 1) {
				t.Errorf("server parameters: queue %v batch %d", q, b)
			}
			if !tc.close {
				// The body was read exactly: the next answer is next.
				if rh2, err := readResponseHead(br); err != nil || rh2.status != 204 {
					t.Errorf("the answer after: %+v %v", rh2, err)
				}
			}
		})
	}
}

// FuzzReadAnswer feeds the lean client's response parser arbitrary
// bytes: it never panics, never hands back logits of the wrong length, and
// allocates only for bytes that arrived.
func FuzzReadAnswer(f *testing.F) {
	js, bin := binaryAnswer(3)
	f.Add(okHead(js, bin) + js + bin)
	f.Add("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nInference-Header-Content-Length: " + strconv.Itoa(len(js)) + "\r\n\r\n" +
		chunk(js) + chunk(bin) + "0\r\n\r\n")
	f.Add("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 9\r\n\r\n{\"error\":")
	f.Add("HTTP/1.0 200 OK\r\n\r\n" + `{"outputs":[{"name":"l","datatype":"FP32","shape":[3],"data":[1,2,3]}]}`)
	f.Add("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	f.Fuzz(func(t *testing.T, raw string) {
		for _, out := range [][]float32{nil, make([]float32, 3)} {
			_, ir, logits, _, err := readAnswer(raw, out)
			if err != nil {
				continue
			}
			n, nerr := ir.outputLen()
			if nerr != nil || len(logits) != n {
				t.Fatalf("accepted an answer with %d logits for %d values (%v)", len(logits), n, nerr)
			}
			if len(logits) > len(raw) {
				t.Fatalf("%d logits from %d bytes", len(logits), len(raw))
			}
		}
	})
}
