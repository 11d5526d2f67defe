package server_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"goinfer/internal/engine"
	"goinfer/internal/server"
	"goinfer/internal/server/servertest"
	"goinfer/internal/tensor"
)

// randImages returns n images of 3 x size x size, standard normal.
func randImages(n, size int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 99))
	v := make([]float32, n*3*size*size)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

type httpResult struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request. It may run on any goroutine: a transport error is
// returned as status -1 with the error as the body.
func do(t *testing.T, method, url string, body []byte, hdr map[string]string) httpResult {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return httpResult{status: -1, body: []byte(err.Error())}
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return httpResult{status: -1, body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return httpResult{status: -1, body: []byte(err.Error())}
	}
	return httpResult{resp.StatusCode, resp.Header, b}
}

// inferBinary posts a request whose input travels in the binary section.
func inferBinary(t *testing.T, s *servertest.Server, header map[string]any, data []byte) httpResult {
	t.Helper()
	hj, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, "POST", "http://"+s.HTTPAddr+"/v2/models/"+s.Name+"/infer", append(hj, data...),
		map[string]string{server.HeaderContentLength: strconv.Itoa(len(hj)), "Content-Type": "application/octet-stream"})
}

func binaryInput(dt string, shape []int, size int) map[string]any {
	return map[string]any{"name": "input", "datatype": dt, "shape": shape, "parameters": map[string]any{"binary_data_size": size}}
}

type jsonOutput struct {
	Name       string          `json:"name"`
	Datatype   string          `json:"datatype"`
	Shape      []int64         `json:"shape"`
	Parameters map[string]any  `json:"parameters"`
	Data       json.RawMessage `json:"data"`
}

type jsonResponse struct {
	ModelName    string         `json:"model_name"`
	ModelVersion string         `json:"model_version"`
	ID           string         `json:"id"`
	Parameters   map[string]any `json:"parameters"`
	Outputs      []jsonOutput   `json:"outputs"`
}

// splitResponse parses a response that may carry a binary section.
func splitResponse(t *testing.T, r httpResult) (jsonResponse, []byte) {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	body := r.body
	var bin []byte
	if v := r.header.Get(server.HeaderContentLength); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n > len(body) {
			t.Fatalf("bad %s %q for a body of %d bytes", server.HeaderContentLength, v, len(body))
		}
		body, bin = body[:n], body[n:]
	}
	var jr jsonResponse
	if err := json.Unmarshal(body, &jr); err != nil {
		t.Fatalf("response is not JSON: %v: %s", err, body)
	}
	return jr, bin
}

func checkLogits(t *testing.T, got []float32, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d logits, want %d", len(got), len(want))
	}
	if e := servertest.RelErr(got, want); e > 1e-3 {
		t.Fatalf("logits differ from the reference forward by %.2g (relative)", e)
	}
}

func TestHealthAndMetadata(t *testing.T) {
	s := servertest.Start(t, servertest.Options{NoModel: true})
	base := "http://" + s.HTTPAddr
	if r := do(t, "GET", base+"/v2/health/live", nil, nil); r.status != 200 {
		t.Errorf("live while loading: %d", r.status)
	}
	if r := do(t, "GET", base+"/v2/health/ready", nil, nil); r.status != 400 {
		t.Errorf("ready while loading: %d, want 400", r.status)
	}
	if r := do(t, "GET", base+"/v2/models/tiny/ready", nil, nil); r.status != 400 {
		t.Errorf("model ready while loading: %d, want 400", r.status)
	}
	if r := do(t, "GET", base+"/v2/models/tiny", nil, nil); r.status != 503 || !strings.Contains(string(r.body), "loading") {
		t.Errorf("metadata while loading: %d %s, want 503 saying loading", r.status, r.body)
	}
	r := do(t, "POST", base+"/v2/repository/index", nil, nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"state":"LOADING"`) {
		t.Errorf("repository index while loading: %d %s", r.status, r.body)
	}
	if err := s.Srv.SetModel(s.Model()); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		path   string
		status int
		body   string // substring, "" for an empty body
	}{
		{"/v2/health/live", 200, ""},
		{"/v2/health/ready", 200, ""},
		{"/v2/models/tiny/ready", 200, ""},
		{"/v2/models/tiny/versions/1/ready", 200, ""},
		{"/v2/models/other/ready", 404, `"error":"unknown model \"other\"`},
		{"/v2/models/tiny/versions/2/ready", 404, "no version"},
		{"/v2", 200, `"extensions":["binary_tensor_data","classification","model_repository"]`},
		{"/v2/models/tiny", 200, `"inputs":[{"name":"input","datatype":"FP32","shape":[-1,3,16,16]}],"outputs":[{"name":"logits","datatype":"FP32","shape":[-1,10]},{"name":"probabilities","datatype":"FP32","shape":[-1,10]}]`},
		{"/v2/models/tiny/versions/1", 200, `"versions":["1"],"platform":"goinfer_cpu"`},
		{"/v2/models/nope", 404, "unknown model"},
		{"/v3/whatever", 404, "no endpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			r := do(t, "GET", base+tt.path, nil, nil)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d (%s)", r.status, tt.status, r.body)
			}
			if tt.body == "" && len(r.body) != 0 || !strings.Contains(string(r.body), tt.body) {
				t.Fatalf("body %s, want %q", r.body, tt.body)
			}
		})
	}
	r = do(t, "POST", base+"/v2/repository/index", nil, nil)
	if !strings.Contains(string(r.body), `[{"name":"tiny","version":"1","state":"READY"}]`) {
		t.Errorf("repository index: %s", r.body)
	}
}

func TestInferJSON(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	x := randImages(2, 16, 1)
	want := s.Expected(t, x, 2)
	// Nested data, as numpy's tolist() gives, and flat data.
	nested := make([][][][]float32, 2)
	for i := range nested {
		nested[i] = make([][][]float32, 3)
		for c := range 3 {
			nested[i][c] = make([][]float32, 16)
			for h := range 16 {
				off := ((i*3+c)*16 + h) * 16
				nested[i][c][h] = x[off : off+16]
			}
		}
	}
	for name, data := range map[string]any{"flat": x, "nested": nested} {
		t.Run(name, func(t *testing.T) {
			body, _ := json.Marshal(map[string]any{
				"id":     "req-7",
				"inputs": []any{map[string]any{"name": "input", "datatype": "FP32", "shape": []int{2, 3, 16, 16}, "data": data}},
			})
			r := do(t, "POST", "http://"+s.HTTPAddr+"/v2/models/tiny/infer", body, map[string]string{"Content-Type": "application/json"})
			jr, bin := splitResponse(t, r)
			if len(bin) != 0 || r.header.Get("Content-Type") != "application/json" {
				t.Fatalf("JSON request got a binary answer (%s)", r.header.Get("Content-Type"))
			}
			if jr.ID != "req-7" || jr.ModelName != "tiny" || jr.ModelVersion != "1" {
				t.Errorf("id %q model %q version %q", jr.ID, jr.ModelName, jr.ModelVersion)
			}
			o := jr.Outputs[0]
			if o.Name != "logits" || o.Datatype != "FP32" || fmt.Sprint(o.Shape) != "[2 10]" {
				t.Fatalf("output %+v", o)
			}
			var got []float32
			if err := json.Unmarshal(o.Data, &got); err != nil {
				t.Fatal(err)
			}
			checkLogits(t, got, want)
			if _, ok := jr.Parameters["batch_size"]; !ok {
				t.Errorf("response parameters %v lack batch_size", jr.Parameters)
			}
		})
	}
}

func TestInferBinary(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	x := randImages(3, 16, 2)
	want := s.Expected(t, x, 3)
	data := tensor.F32Bytes(x)
	tests := []struct {
		name      string
		params    map[string]any
		outputs   []any
		binaryOut bool
	}{
		{"binary in, JSON out", nil, nil, false},
		{"binary in and out", nil, []any{map[string]any{"name": "logits", "parameters": map[string]any{"binary_data": true}}}, true},
		{"binary_data_output", map[string]any{"binary_data_output": true}, nil, true},
		{"per-output false wins", map[string]any{"binary_data_output": true}, []any{map[string]any{"name": "logits", "parameters": map[string]any{"binary_data": false}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := map[string]any{"inputs": []any{binaryInput("FP32", []int{3, 3, 16, 16}, len(data))}}
			if tt.params != nil {
				hdr["parameters"] = tt.params
			}
			if tt.outputs != nil {
				hdr["outputs"] = tt.outputs
			}
			jr, bin := splitResponse(t, inferBinary(t, s, hdr, data))
			o := jr.Outputs[0]
			var got []float32
			if tt.binaryOut {
				if size, _ := o.Parameters["binary_data_size"].(float64); int(size) != len(bin) || len(bin) != 3*10*4 {
					t.Fatalf("binary_data_size %v, binary section %d bytes", o.Parameters["binary_data_size"], len(bin))
				}
				got = make([]float32, 30)
				for i := range got {
					got[i] = math.Float32frombits(binary.LittleEndian.Uint32(bin[4*i:]))
				}
			} else {
				if len(bin) != 0 {
					t.Fatal("unexpected binary section")
				}
				if err := json.Unmarshal(o.Data, &got); err != nil {
					t.Fatal(err)
				}
			}
			checkLogits(t, got, want)
		})
	}
}

func TestInferOtherDTypes(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	const n = 2
	per := 3 * 16 * 16
	rng := rand.New(rand.NewPCG(5, 6))
	pix := make([]byte, n*per)
	for i := range pix {
		pix[i] = byte(rng.IntN(256))
	}
	// The reference input: pixels normalized as the engine contract says.
	norm := make([]float32, len(pix))
	for i, p := range pix {
		c := (i / (16 * 16)) % 3
		norm[i] = (float32(p)/255 - engine.ImageNetMean[c]) / engine.ImageNetStd[c]
	}
	wantU8 := s.Expected(t, norm, n)
	x := randImages(n, 16, 3)
	h := make([]byte, 2*len(x))
	for i, v := range x {
		x[i] = tensor.F16ToFloat32(tensor.Float32ToF16(v)) // what FP16 can carry
		binary.LittleEndian.PutUint16(h[2*i:], tensor.Float32ToF16(v))
	}
	wantF16 := s.Expected(t, x, n)
	u8json, _ := json.Marshal(func() []int {
		v := make([]int, len(pix))
		for i, p := range pix {
			v[i] = int(p)
		}
		return v
	}())
	tests := []struct {
		name string
		do   func() httpResult
		want []float64
	}{
		{"UINT8 binary", func() httpResult {
			return inferBinary(t, s, map[string]any{"inputs": []any{binaryInput("UINT8", []int{n, 3, 16, 16}, len(pix))}}, pix)
		}, wantU8},
		{"UINT8 JSON", func() httpResult {
			body := fmt.Sprintf(`{"inputs":[{"name":"input","datatype":"UINT8","shape":[%d,3,16,16],"data":%s}]}`, n, u8json)
			return do(t, "POST", "http://"+s.HTTPAddr+"/v2/models/tiny/infer", []byte(body), nil)
		}, wantU8},
		{"FP16 binary", func() httpResult {
			return inferBinary(t, s, map[string]any{"inputs": []any{binaryInput("FP16", []int{n, 3, 16, 16}, len(h))}}, h)
		}, wantF16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			jr, _ := splitResponse(t, tt.do())
			var got []float32
			if err := json.Unmarshal(jr.Outputs[0].Data, &got); err != nil {
				t.Fatal(err)
			}
			checkLogits(t, got, tt.want)
		})
	}
}

// TestClassification asks for the top classes, ranked in the batcher from
// the logits or in the backend (as the GPU does on the cuda engine).
func TestClassification(t *testing.T) {
	for _, rank := range []bool{false, true} {
		t.Run(fmt.Sprintf("rank in backend %v", rank), func(t *testing.T) { testClassification(t, rank) })
	}
}

func testClassification(t *testing.T, rankInBackend bool) {
	labels := []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"}
	s := servertest.Start(t, servertest.Options{Labels: labels, RankInBackend: rankInBackend})
	x := randImages(2, 16, 4)
	want := s.Expected(t, x, 2)
	data := tensor.F32Bytes(x)
	// The expected top 3 of each image.
	var wantStrs []string
	for i := range 2 {
		row := want[i*10 : (i+1)*10]
		used := map[int]bool{}
		for range 3 {
			best := -1
			for c := range row {
				if !used[c] && (best < 0 || row[c] > row[best]) {
					best = c
				}
			}
			used[best] = true
			wantStrs = append(wantStrs, fmt.Sprintf(":%d:%s", best, labels[best]))
		}
	}
	check := func(t *testing.T, got []string) {
		t.Helper()
		if len(got) != 6 {
			t.Fatalf("%d classification strings, want 6: %q", len(got), got)
		}
		for i, g := range got {
			score, rest, ok := strings.Cut(g, ":")
			if _, err := strconv.ParseFloat(score, 32); !ok || err != nil || ":"+rest != wantStrs[i] {
				t.Errorf("result %d = %q, want score%s", i, g, wantStrs[i])
			}
		}
	}
	out := func(binary bool) []any {
		return []any{map[string]any{"name": "logits", "parameters": map[string]any{"classification": 3, "binary_data": binary}}}
	}
	t.Run("JSON", func(t *testing.T) {
		jr, _ := splitResponse(t, inferBinary(t, s, map[string]any{"inputs": []any{binaryInput("FP32", []int{2, 3, 16, 16}, len(data))}, "outputs": out(false)}, data))
		o := jr.Outputs[0]
		if o.Datatype != "BYTES" || fmt.Sprint(o.Shape) != "[2 3]" {
			t.Fatalf("output %+v", o)
		}
		var got []string
		if err := json.Unmarshal(o.Data, &got); err != nil {
			t.Fatal(err)
		}
		check(t, got)
	})
	t.Run("binary", func(t *testing.T) {
		_, bin := splitResponse(t, inferBinary(t, s, map[string]any{"inputs": []any{binaryInput("FP32", []int{2, 3, 16, 16}, len(data))}, "outputs": out(true)}, data))
		var got []string
		for len(bin) >= 4 {
			n := binary.LittleEndian.Uint32(bin)
			got = append(got, string(bin[4:4+n]))
			bin = bin[4+n:]
		}
		check(t, got)
	})
}

func TestInferErrors(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Server: func(c *server.Config) { c.MaxRequestBytes = 64 << 10 }})
	url := "http://" + s.HTTPAddr + "/v2/models/tiny/infer"
	img := tensor.F32Bytes(randImages(1, 16, 8))
	hdr := func(in map[string]any, extra ...string) []byte {
		m := map[string]any{"inputs": []any{in}}
		for i := 0; i+1 < len(extra); i += 2 {
			var v any
			json.Unmarshal([]byte(extra[i+1]), &v)
			m[extra[i]] = v
		}
		b, _ := json.Marshal(m)
		return b
	}
	good := binaryInput("FP32", []int{1, 3, 16, 16}, len(img))
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for a, b := range good {
			m[a] = b
		}
		m[k] = v
		return m
	}
	type req struct {
		url    string
		header []byte // JSON part
		bin    []byte // binary part; with hlen
		hlen   string // Inference-Header-Content-Length, "" for none; "auto" for len(header)
	}
	tests := []struct {
		name   string
		r      req
		status int
		msg    string
	}{
		{"malformed JSON", req{url, []byte(`{"inputs": [`), nil, ""}, 400, "malformed JSON"},
		{"wrong JSON type", req{url, []byte(`{"inputs": [{"name": 5}]}`), nil, ""}, 400, "inputs.name"},
		{"no inputs", req{url, []byte(`{"inputs": []}`), nil, ""}, 400, "0 inputs"},
		{"unknown input", req{url, hdr(with("name", "image")), img, "auto"}, 400, `inputs[0].name "image"`},
		{"wrong datatype", req{url, hdr(with("datatype", "INT64")), img, "auto"}, 400, "inputs[0].datatype"},
		{"wrong rank", req{url, hdr(with("shape", []int{3, 16, 16})), img, "auto"}, 400, "rank 3"},
		{"wrong channels", req{url, hdr(with("shape", []int{1, 1, 16, 16})), img, "auto"}, 400, "channels"},
		{"unserved size", req{url, hdr(with("shape", []int{1, 3, 8, 8})), img, "auto"}, 400, "not served (served: 16x16)"},
		{"zero batch", req{url, hdr(with("shape", []int{0, 3, 16, 16})), nil, "auto"}, 400, "inputs[0].shape[0]"},
		{"negative dim", req{url, hdr(with("shape", []int{1, 3, -16, 16})), img, "auto"}, 400, "inputs[0].shape[2]"},
		{"binary size mismatch", req{url, hdr(with("parameters", map[string]any{"binary_data_size": 12})), img[:12], "auto"}, 400, "binary_data_size is 12"},
		{"truncated binary", req{url, hdr(good), img[:100], "auto"}, 400, "binary data truncated"},
		{"extra binary", req{url, hdr(good), append(append([]byte{}, img...), 1, 2, 3), "auto"}, 400, "3 unexpected bytes"},
		{"binary without header length", req{url, append(hdr(good), img...), nil, ""}, 400, "data after the request object"},
		{"bad header length", req{url, hdr(good), img, "x"}, 400, "Inference-Header-Content-Length"},
		{"header length past body", req{url, hdr(good), nil, "100000"}, 413, "over the limit"},
		{"JSON data too short for shape", req{url, []byte(`{"inputs":[{"name":"input","datatype":"FP32","shape":[1,3,16,16],"data":[1,2,3]}]}`), nil, ""}, 400, "inputs[0].data has 7 bytes, too few for the 768 values FP32[1 3 16 16] needs"},
		{"JSON data count", req{url, []byte(`{"inputs":[{"name":"input","datatype":"FP32","shape":[1,3,16,16],"data":[0` + strings.Repeat(",0", 766) + `]}]}`), nil, ""}, 400, "inputs[0].data has 767 values; inputs[0].shape needs 768"},
		{"JSON data not numbers", req{url, []byte(`{"inputs":[{"name":"input","datatype":"FP32","shape":[1,3,16,16],"data":["a"]}]}`), nil, ""}, 400, "inputs[0].data"},
		{"UINT8 out of range", req{url, []byte(`{"inputs":[{"name":"input","datatype":"UINT8","shape":[1,3,16,16],"data":[300` + strings.Repeat(",0", 767) + `]}]}`), nil, ""}, 400, "inputs[0].data[0] = 300"},
		{"no data", req{url, []byte(`{"inputs":[{"name":"input","datatype":"FP32","shape":[1,3,16,16]}]}`), nil, ""}, 400, "inputs[0] has no data"},
		{"data and binary", req{url, hdr(with("data", []int{1})), img, "auto"}, 400, "both data and"},
		{"unknown output", req{url, hdr(good, "outputs", `[{"name":"probs"}]`), img, "auto"}, 400, `outputs[0].name "probs"`},
		{"bad classification", req{url, hdr(good, "outputs", `[{"name":"logits","parameters":{"classification":"x"}}]`), img, "auto"}, 400, "outputs[0].parameters.classification"},
		{"bad binary_data_output", req{url, hdr(good, "parameters", `{"binary_data_output":"yes"}`), img, "auto"}, 400, "binary_data_output"},
		{"unknown model", req{"http://" + s.HTTPAddr + "/v2/models/big/infer", hdr(good), img, "auto"}, 404, `unknown model "big"`},
		{"unknown version", req{"http://" + s.HTTPAddr + "/v2/models/tiny/versions/9/infer", hdr(good), img, "auto"}, 404, "no version"},
		{"body too large", req{url, hdr(binaryInput("FP32", []int{30, 3, 16, 16}, 30*len(img))), bytes.Repeat(img, 30), "auto"}, 413, "over the limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := map[string]string{}
			switch tt.r.hlen {
			case "":
			case "auto":
				h[server.HeaderContentLength] = strconv.Itoa(len(tt.r.header))
			default:
				h[server.HeaderContentLength] = tt.r.hlen
			}
			r := do(t, "POST", tt.r.url, append(append([]byte{}, tt.r.header...), tt.r.bin...), h)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
			}
			var e struct{ Error string }
			if err := json.Unmarshal(r.body, &e); err != nil {
				t.Fatalf("error body is not {\"error\": ...}: %s", r.body)
			}
			if !strings.Contains(e.Error, tt.msg) {
				t.Fatalf("error %q does not mention %q", e.Error, tt.msg)
			}
		})
	}
	// The server is still healthy after all that.
	jr, _ := splitResponse(t, inferBinary(t, s, map[string]any{"inputs": []any{good}}, img))
	if len(jr.Outputs) != 1 {
		t.Fatal("no output after the error cases")
	}
}

func TestQueueFullAnswers503(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Gated: true, Inflight: 1, MaxQueue: 2, MaxBatch: 2})
	img := tensor.F32Bytes(randImages(1, 16, 9))
	hdr := map[string]any{"inputs": []any{binaryInput("FP32", []int{1, 3, 16, 16}, len(img))}}
	// One batch held at the gate, two images queued behind it: full.
	results := make(chan httpResult, 3)
	go func() { results <- inferBinary(t, s, hdr, img) }()
	s.Gate.WaitHeld(t, 1)
	for range 2 {
		go func() { results <- inferBinary(t, s, hdr, img) }()
	}
	waitMetric(t, s, "goinfer_queue_depth", 2)
	start := time.Now()
	r := inferBinary(t, s, hdr, img)
	if r.status != 503 || r.header.Get("Retry-After") == "" {
		t.Fatalf("full queue: status %d, Retry-After %q: %s", r.status, r.header.Get("Retry-After"), r.body)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("refusal took %v; want at once", el)
	}
	s.Gate.Open()
	for range 3 {
		if r := <-results; r.status != 200 {
			t.Errorf("queued request: %d %s", r.status, r.body)
		}
	}
}

// waitMetric polls /metrics until the named sample has value v.
func waitMetric(t *testing.T, s *servertest.Server, name string, v float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, ok := metricValue(t, s, name)
		if ok && got == v {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want %v", name, got, v)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// metricValue reads one sample from /metrics: name may include labels.
func metricValue(t *testing.T, s *servertest.Server, name string) (float64, bool) {
	t.Helper()
	r := do(t, "GET", "http://"+s.HTTPAddr+"/metrics", nil, nil)
	for _, line := range strings.Split(string(r.body), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		key, val := line[:i], line[i+1:]
		// Drop the model label, which every goinfer metric carries.
		key = strings.Replace(key, `model="tiny",`, "", 1)
		key = strings.Replace(key, `{model="tiny"}`, "", 1)
		if key == name {
			f, err := strconv.ParseFloat(val, 64)
			return f, err == nil
		}
	}
	return 0, false
}

func TestMetrics(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Server: func(c *server.Config) {
		c.GPUStats = func() []server.GPUStat {
			return []server.GPUStat{{Index: 0, Name: "Test GPU", Utilization: 42, MemoryUsed: 1 << 30, MemoryTotal: 8 << 30}}
		}
	}})
	img := tensor.F32Bytes(randImages(2, 16, 10))
	hdr := map[string]any{"inputs": []any{binaryInput("FP32", []int{2, 3, 16, 16}, len(img))}}
	for range 3 {
		splitResponse(t, inferBinary(t, s, hdr, img))
	}
	inferBinary(t, s, map[string]any{"inputs": []any{binaryInput("INT8", []int{2, 3, 16, 16}, len(img))}}, img)
	want := map[string]float64{
		`goinfer_requests_total{protocol="http",status="success"}`:          3,
		`goinfer_requests_total{protocol="http",status="invalid_argument"}`: 1,
		`goinfer_images_total`:                                     6,
		`goinfer_batch_size_count`:                                 3,
		`goinfer_batch_size_sum`:                                   6,
		`goinfer_request_duration_seconds_count{protocol="http"}`:  4,
		`goinfer_queue_duration_seconds_count`:                     3,
		`goinfer_compute_duration_seconds_count`:                   3,
		`goinfer_queue_depth`:                                      0,
		`goinfer_model_ready`:                                      1,
		`goinfer_gpu_utilization_percent{gpu="0",name="Test GPU"}`: 42,
		`goinfer_gpu_memory_used_bytes{gpu="0",name="Test GPU"}`:   1 << 30,
	}
	for name, v := range want {
		if got, ok := metricValue(t, s, name); !ok || got != v {
			t.Errorf("%s = %v (found %v), want %v", name, got, ok, v)
		}
	}
	if _, ok := metricValue(t, s, "process_resident_memory_bytes"); !ok {
		t.Error("no process metrics")
	}
}

func TestGracefulShutdown(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Gated: true})
	img := tensor.F32Bytes(randImages(1, 16, 11))
	hdr := map[string]any{"inputs": []any{binaryInput("FP32", []int{1, 3, 16, 16}, len(img))}}
	inflight := make(chan httpResult, 1)
	go func() { inflight <- inferBinary(t, s, hdr, img) }()
	s.Gate.WaitHeld(t, 1)
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop() }()
	// Draining: not ready, new connections refused, the request in flight
	// still running.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := http.Get("http://" + s.HTTPAddr + "/v2/health/live")
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("server still accepts connections while draining")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) before the request in flight finished", err)
	default:
	}
	s.Gate.Open()
	if r := <-inflight; r.status != 200 {
		t.Errorf("request in flight during the drain: %d %s", r.status, r.body)
	}
	if err := <-stopped; err != nil {
		t.Errorf("drain: %v", err)
	}
}

func TestDrainTimeoutRefusesQueued(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Gated: true, Inflight: 1, Server: func(c *server.Config) {
		c.DrainTimeout = 100 * time.Millisecond
	}})
	img := tensor.F32Bytes(randImages(1, 16, 12))
	hdr := map[string]any{"inputs": []any{binaryInput("FP32", []int{1, 3, 16, 16}, len(img))}}
	results := make(chan httpResult, 2)
	go func() { results <- inferBinary(t, s, hdr, img) }()
	s.Gate.WaitHeld(t, 1)
	go func() { results <- inferBinary(t, s, hdr, img) }()
	waitMetric(t, s, "goinfer_queue_depth", 1)
	var wg sync.WaitGroup
	var stopErr error
	wg.Go(func() { stopErr = s.Stop() })
	// The queued request is refused when the drain gives up; the one on
	// the "device" finishes once the gate opens.
	var got []int
	r := <-results
	got = append(got, r.status)
	s.Gate.Open()
	wg.Wait()
	if stopErr == nil || !strings.Contains(stopErr.Error(), "drain cut short") {
		t.Errorf("Stop: %v, want a cut-short drain", stopErr)
	}
	select {
	case r := <-results:
		got = append(got, r.status)
	case <-time.After(5 * time.Second):
	}
	if len(got) == 0 || got[0] != 503 {
		t.Errorf("statuses %v, want the queued request refused with 503 first", got)
	}
}
