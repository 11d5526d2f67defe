package client_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"goinfer/internal/client"
)

// classBytes is BYTES elements in the binary layout.
func classBytes(entries ...string) []byte {
	var b []byte
	for _, e := range entries {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(e)))
		b = append(b, e...)
	}
	return b
}

// TestInferImagesAnswers feeds both HTTP clients hand-made answers to an
// image request: the forms a server may answer in are read, malformed
// ones are errors, and a good request after each still succeeds.
func TestInferImagesAnswers(t *testing.T) {
	bin := classBytes("0.75:3:cat", "0.25:1")
	js := `{"model_name":"m","outputs":[{"name":"probabilities","datatype":"BYTES","shape":[1,2],"parameters":{"binary_data_size":` + strconv.Itoa(len(bin)) + `}}]}`
	good := func(w http.ResponseWriter) {
		w.Header().Set("Inference-Header-Content-Length", strconv.Itoa(len(js)))
		w.Header().Set("Content-Length", strconv.Itoa(len(js)+len(bin)))
		io.WriteString(w, js)
		w.Write(bin)
	}
	tests := []struct {
		name   string
		answer func(w http.ResponseWriter)
		want   string // "" for success
	}{
		{"binary", good, ""},
		{"json", func(w http.ResponseWriter) {
			io.WriteString(w, `{"outputs":[{"name":"probabilities","datatype":"BYTES","shape":[1,2],"data":["0.75:3:cat","0.25:1"]}]}`)
		}, ""},
		{"binary, chunked", func(w http.ResponseWriter) {
			w.Header().Set("Inference-Header-Content-Length", strconv.Itoa(len(js)))
			io.WriteString(w, js)
			w.(http.Flusher).Flush()
			w.Write(bin)
		}, ""},
		{"binary size over the body", func(w http.ResponseWriter) {
			w.Header().Set("Inference-Header-Content-Length", strconv.Itoa(len(js)))
			io.WriteString(w, js)
			w.Write(bin[:5])
		}, "Content-Length"},
		{"binary without its header length", func(w http.ResponseWriter) {
			io.WriteString(w, js)
			w.Write(bin)
		}, "response JSON"},
		{"bytes after JSON", func(w http.ResponseWriter) {
			j := `{"outputs":[{"name":"probabilities","datatype":"BYTES","shape":[1,2],"data":["0.75:3:cat","0.25:1"]}]}`
			w.Header().Set("Inference-Header-Content-Length", strconv.Itoa(len(j)))
			w.Header().Set("Content-Length", strconv.Itoa(len(j)+6))
			io.WriteString(w, j+"xxxxxx")
		}, "announces no binary output"},
		{"logits instead of classes", func(w http.ResponseWriter) {
			io.WriteString(w, `{"outputs":[{"name":"logits","datatype":"FP32","shape":[1,2],"data":[1,2]}]}`)
		}, "want one BYTES"},
		{"wrong count", func(w http.ResponseWriter) {
			io.WriteString(w, `{"outputs":[{"name":"probabilities","datatype":"BYTES","shape":[1,2],"data":["0.75:3:cat"]}]}`)
		}, "1 classification strings for shape [1 2]"},
		{"not value:index", func(w http.ResponseWriter) {
			io.WriteString(w, `{"outputs":[{"name":"probabilities","datatype":"BYTES","shape":[1,1],"data":["cat"]}]}`)
		}, "not value:index"},
		{"element overruns", func(w http.ResponseWriter) {
			b := classBytes("0.5:1")
			b[0] = 99
			j := `{"outputs":[{"name":"probabilities","datatype":"BYTES","shape":[1,1],"parameters":{"binary_data_size":` + strconv.Itoa(len(b)) + `}}]}`
			w.Header().Set("Inference-Header-Content-Length", strconv.Itoa(len(j)))
			io.WriteString(w, j)
			w.Write(b)
		}, "overruns"},
		{"refusal", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":"inputs[0] element 0: corrupt JPEG"}`)
		}, "server answered 400: inputs[0] element 0: corrupt JPEG"},
	}
	// The handler runs on the server's goroutines: the answer to give
	// is passed through an atomic.
	var answer atomic.Pointer[func(w http.ResponseWriter)]
	set := func(f func(w http.ResponseWriter)) { answer.Store(&f) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v2":
			io.WriteString(w, `{"name":"fake","version":"1"}`)
		case "/v2/models/m":
			io.WriteString(w, `{"name":"m","versions":["1"],"platform":"x","inputs":[{"name":"input","datatype":"FP32","shape":[-1,3,16,16]},`+
				`{"name":"image","datatype":"BYTES","shape":[-1]}],"outputs":[{"name":"logits","datatype":"FP32","shape":[-1,10]},`+
				`{"name":"probabilities","datatype":"FP32","shape":[-1,10]}]}`)
		case "/v2/models/m/infer":
			body, _ := io.ReadAll(r.Body)
			if !strings.Contains(string(body), `"name":"probabilities"`) {
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprintf(w, `{"error":"unexpected request %q"}`, body)
				return
			}
			(*answer.Load())(w)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	for _, hc := range httpClients {
		c := dial(t, srv.URL, client.Options{Model: "m", HTTPClient: hc})
		for _, tt := range tests {
			t.Run(hc+"/"+tt.name, func(t *testing.T) {
				set(tt.answer)
				res, err := c.InferImages(context.Background(), [][]byte{{0xff, 0xd8}}, 2)
				switch {
				case tt.want == "" && err != nil:
					t.Fatalf("error %v", err)
				case tt.want == "":
					if len(res.Classes) != 1 || len(res.Classes[0]) != 2 || res.Classes[0][0] != (client.Class{Score: 0.75, Index: 3, Label: "cat"}) ||
						res.Classes[0][1] != (client.Class{Score: 0.25, Index: 1}) {
						t.Errorf("classes %+v", res.Classes)
					}
				case err == nil || !strings.Contains(err.Error(), tt.want):
					t.Fatalf("error %v, want one containing %q", err, tt.want)
				case strings.HasPrefix(tt.want, "server answered"):
					var se *client.ServerError
					if !errors.As(err, &se) || se.HTTPStatus != 400 {
						t.Errorf("error %#v, want a ServerError", err)
					}
				}
				set(good)
				if _, err := c.InferImages(context.Background(), [][]byte{{0xff, 0xd8}}, 2); err != nil {
					t.Errorf("the next request: %v", err)
				}
			})
		}
	}
}
