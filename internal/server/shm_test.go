package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"goinfer/internal/kservepb"
	"goinfer/internal/server"
	"goinfer/internal/server/servertest"
	"goinfer/internal/shm"
	"goinfer/internal/tensor"
)

// shmObject creates a shared memory object for a test and removes it at
// the end.
func shmObject(t testing.TB, size int) (*shm.Mapping, string) {
	t.Helper()
	if !shm.Supported() {
		t.Skip("system shared memory needs Linux")
	}
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skipf("no /dev/shm on this machine: %v", err)
	}
	key := fmt.Sprintf("/goinfer-srvtest-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	m, err := shm.Create(key, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		shm.Unlink(key)
	})
	return m, key
}

func allowShm(c *server.Config) { c.AllowSharedMemory = true }

func postJSON(t *testing.T, url string, v any) httpResult {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, "POST", url, b, map[string]string{"Content-Type": "application/json"})
}

func shmParams(region string, off, size int) map[string]any {
	return map[string]any{"shared_memory_region": region, "shared_memory_offset": off, "shared_memory_byte_size": size}
}

// The object used by most tests: the input at offset 0, the output in a
// second region at an odd page offset.
const (
	shmImages = 3
	shmInSize = shmImages * 3 * 16 * 16 * 4
	shmOutOff = shmInSize + 4096 + 12
	shmSize   = shmOutOff + 4096
)

func TestSharedMemoryHTTP(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Server: allowShm, Labels: []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}})
	base := "http://" + s.HTTPAddr + "/v2/systemsharedmemory"
	m, key := shmObject(t, shmSize)
	x := randImages(shmImages, 16, 21)
	want := s.Expected(t, x, shmImages)
	copy(m.Bytes(), tensor.F32Bytes(x))

	var md struct{ Extensions []string }
	if err := json.Unmarshal(do(t, "GET", "http://"+s.HTTPAddr+"/v2", nil, nil).body, &md); err != nil || !strings.Contains(fmt.Sprint(md.Extensions), "system_shared_memory") {
		t.Fatalf("server metadata extensions %v (%v); want system_shared_memory", md.Extensions, err)
	}
	for _, r := range []struct {
		name     string
		off, len int
	}{{"in", 0, shmInSize}, {"out", shmOutOff, shmSize - shmOutOff}} {
		if res := postJSON(t, base+"/region/"+r.name+"/register", map[string]any{"key": key, "offset": r.off, "byte_size": r.len}); res.status != http.StatusOK {
			t.Fatalf("register %s: %d %s", r.name, res.status, res.body)
		}
	}
	var st []map[string]any
	if err := json.Unmarshal(do(t, "GET", base+"/status", nil, nil).body, &st); err != nil || len(st) != 2 || st[0]["name"] != "in" || st[1]["key"] != key || st[1]["offset"] != float64(shmOutOff) {
		t.Fatalf("status %v (%v)", st, err)
	}
	if err := json.Unmarshal(do(t, "GET", base+"/region/out/status", nil, nil).body, &st); err != nil || len(st) != 1 || st[0]["byte_size"] != float64(shmSize-shmOutOff) {
		t.Fatalf("status of out: %v (%v)", st, err)
	}
	infer := "http://" + s.HTTPAddr + "/v2/models/tiny/infer"
	input := map[string]any{"name": "input", "datatype": "FP32", "shape": []int{shmImages, 3, 16, 16}, "parameters": shmParams("in", 0, shmInSize)}

	t.Run("input and output in shared memory", func(t *testing.T) {
		clear(m.Bytes()[shmOutOff:])
		jr, bin := splitResponse(t, postJSON(t, infer, map[string]any{"id": "s1", "inputs": []any{input},
			"outputs": []any{map[string]any{"name": "logits", "parameters": shmParams("out", 8, shmImages*10*4)}}}))
		o := jr.Outputs[0]
		if len(bin) != 0 || len(o.Data) != 0 || o.Parameters["shared_memory_region"] != "out" || o.Parameters["shared_memory_byte_size"] != float64(shmImages*40) || fmt.Sprint(o.Shape) != "[3 10]" {
			t.Fatalf("response %+v, %d binary bytes; want the output described, not carried", o, len(bin))
		}
		checkLogits(t, tensor.BytesF32(m.Bytes()[shmOutOff+8:shmOutOff+8+shmImages*40]), want)
	})
	t.Run("input in shared memory, output in the response", func(t *testing.T) {
		jr, _ := splitResponse(t, postJSON(t, infer, map[string]any{"inputs": []any{input}}))
		var got []float32
		if err := json.Unmarshal(jr.Outputs[0].Data, &got); err != nil {
			t.Fatal(err)
		}
		checkLogits(t, got, want)
	})
	t.Run("classification into shared memory", func(t *testing.T) {
		jr, _ := splitResponse(t, postJSON(t, infer, map[string]any{"inputs": []any{input},
			"outputs": []any{map[string]any{"name": "logits", "parameters": map[string]any{"classification": 2,
				"shared_memory_region": "out", "shared_memory_byte_size": 4096}}}}))
		o := jr.Outputs[0]
		n := int(o.Parameters["shared_memory_byte_size"].(float64))
		if o.Datatype != "BYTES" || n <= 0 || n > 4096 {
			t.Fatalf("output %+v", o)
		}
		var got []string
		for b := m.Bytes()[shmOutOff : shmOutOff+n]; len(b) >= 4; {
			l := int(b[0]) | int(b[1])<<8 | int(b[2])<<16 | int(b[3])<<24
			got = append(got, string(b[4:4+l]))
			b = b[4+l:]
		}
		if len(got) != shmImages*2 || !strings.Contains(got[0], ":") {
			t.Fatalf("classification strings in shared memory: %q", got)
		}
	})
	t.Run("unregister", func(t *testing.T) {
		if res := do(t, "POST", base+"/region/in/unregister", nil, nil); res.status != http.StatusOK {
			t.Fatalf("unregister: %d %s", res.status, res.body)
		}
		res := postJSON(t, infer, map[string]any{"inputs": []any{input}})
		if res.status != http.StatusBadRequest || !strings.Contains(string(res.body), `no shared memory region \"in\"`) {
			t.Fatalf("infer from an unregistered region: %d %s", res.status, res.body)
		}
		if res := do(t, "POST", base+"/unregister", nil, nil); res.status != http.StatusOK {
			t.Fatalf("unregister all: %d %s", res.status, res.body)
		}
		if err := json.Unmarshal(do(t, "GET", base+"/status", nil, nil).body, &st); err != nil || len(st) != 0 {
			t.Fatalf("status after unregistering all: %v (%v)", st, err)
		}
		if res := do(t, "GET", base+"/region/out/status", nil, nil); res.status != http.StatusNotFound {
			t.Fatalf("status of an unregistered region: %d %s", res.status, res.body)
		}
	})
}

func TestSharedMemoryGRPC(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Server: allowShm})
	c := kservepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.GRPCAddr))
	ctx := ctxT(t)
	m, key := shmObject(t, shmSize)
	x := randImages(shmImages, 16, 22)
	want := s.Expected(t, x, shmImages)
	copy(m.Bytes(), tensor.F32Bytes(x))
	for _, r := range []struct {
		name     string
		off, len uint64
	}{{"in", 0, shmInSize}, {"out", shmOutOff, shmSize - shmOutOff}} {
		if _, err := c.SystemSharedMemoryRegister(ctx, &kservepb.SystemSharedMemoryRegisterRequest{Name: r.name, Key: key, Offset: r.off, ByteSize: r.len}); err != nil {
			t.Fatalf("register %s: %v", r.name, err)
		}
	}
	_, err := c.SystemSharedMemoryRegister(ctx, &kservepb.SystemSharedMemoryRegisterRequest{Name: "in", Key: key, ByteSize: 1})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "already registered") {
		t.Fatalf("registering a name twice: %v", err)
	}
	st, err := c.SystemSharedMemoryStatus(ctx, &kservepb.SystemSharedMemoryStatusRequest{})
	if err != nil || len(st.Regions) != 2 || st.Regions["out"].GetOffset() != shmOutOff || st.Regions["in"].GetKey() != key {
		t.Fatalf("status %v (%v)", st, err)
	}
	str := func(v string) *kservepb.InferParameter {
		return &kservepb.InferParameter{ParameterChoice: &kservepb.InferParameter_StringParam{StringParam: v}}
	}
	i64 := func(v int64) *kservepb.InferParameter {
		return &kservepb.InferParameter{ParameterChoice: &kservepb.InferParameter_Int64Param{Int64Param: v}}
	}
	req := &kservepb.ModelInferRequest{
		ModelName: "tiny",
		Inputs: []*kservepb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{shmImages, 3, 16, 16},
			Parameters: map[string]*kservepb.InferParameter{"shared_memory_region": str("in"), "shared_memory_byte_size": i64(shmInSize)}}},
		Outputs: []*kservepb.ModelInferRequest_InferRequestedOutputTensor{{Name: "logits",
			Parameters: map[string]*kservepb.InferParameter{"shared_memory_region": str("out"), "shared_memory_byte_size": i64(shmImages * 40), "shared_memory_offset": i64(4)}}},
	}
	resp, err := c.ModelInfer(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.RawOutputContents) != 0 || resp.Outputs[0].Parameters["shared_memory_byte_size"].GetInt64Param() != shmImages*40 {
		t.Fatalf("response carries %d raw outputs, parameters %v; want the output in shared memory", len(resp.RawOutputContents), resp.Outputs[0].Parameters)
	}
	checkLogits(t, tensor.BytesF32(m.Bytes()[shmOutOff+4:shmOutOff+4+shmImages*40]), want)

	// The input from shared memory, the output in the response.
	req.Outputs = nil
	resp, err = c.ModelInfer(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	checkLogits(t, rawLogits(t, resp), want)

	// Raw contents besides shared memory is ambiguous.
	req.RawInputContents = [][]byte{tensor.F32Bytes(x)}
	if _, err := c.ModelInfer(ctx, req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "also carries its data") {
		t.Fatalf("shared memory and raw contents: %v", err)
	}
	if _, err := c.SystemSharedMemoryUnregister(ctx, &kservepb.SystemSharedMemoryUnregisterRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SystemSharedMemoryStatus(ctx, &kservepb.SystemSharedMemoryStatusRequest{Name: "in"}); status.Code(err) != codes.NotFound {
		t.Fatalf("status of an unregistered region: %v", err)
	}
}

func TestSharedMemoryErrors(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Server: allowShm})
	off := servertest.Start(t, servertest.Options{})
	m, key := shmObject(t, shmSize)
	copy(m.Bytes(), tensor.F32Bytes(randImages(shmImages, 16, 23)))
	base := "http://" + s.HTTPAddr + "/v2/systemsharedmemory"
	if res := postJSON(t, base+"/region/in/register", map[string]any{"key": key, "byte_size": shmInSize}); res.status != http.StatusOK {
		t.Fatalf("register: %d %s", res.status, res.body)
	}
	if res := postJSON(t, base+"/region/small/register", map[string]any{"key": key, "offset": shmOutOff, "byte_size": 8}); res.status != http.StatusOK {
		t.Fatalf("register: %d %s", res.status, res.body)
	}
	input := func(p map[string]any) map[string]any {
		return map[string]any{"inputs": []any{map[string]any{"name": "input", "datatype": "FP32", "shape": []int{shmImages, 3, 16, 16}, "parameters": p}}}
	}
	withOut := func(p map[string]any) map[string]any {
		r := input(shmParams("in", 0, shmInSize))
		r["outputs"] = []any{map[string]any{"name": "logits", "parameters": p}}
		return r
	}
	tests := []struct {
		name   string
		url    string
		body   any
		status int
		msg    string
	}{
		{"disabled", "http://" + off.HTTPAddr + "/v2/systemsharedmemory/region/x/register", map[string]any{"key": key, "byte_size": 8}, 400, "--allow_shared_memory"},
		{"disabled infer", "http://" + off.HTTPAddr + "/v2/models/tiny/infer", input(shmParams("in", 0, shmInSize)), 400, "--allow_shared_memory"},
		{"no such object", base + "/region/x/register", map[string]any{"key": key + "-none", "byte_size": 8}, 400, "does not exist"},
		{"bad key", base + "/region/x/register", map[string]any{"key": "../etc/passwd", "byte_size": 8}, 400, "must start with '/'"},
		{"past the end", base + "/region/x/register", map[string]any{"key": key, "offset": shmSize - 4, "byte_size": 8}, 400, "lies outside"},
		{"no byte_size", base + "/region/x/register", map[string]any{"key": key}, 400, `needs \"key\" and \"byte_size\"`},
		{"unknown field", base + "/region/x/register", map[string]any{"key": key, "byte_size": 8, "size": 8}, 400, "unknown field"},
		{"twice", base + "/region/in/register", map[string]any{"key": key, "byte_size": 8}, 400, "already registered"},
		{"region without size", "", input(map[string]any{"shared_memory_region": "in"}), 400, "shared_memory_region is set without shared_memory_byte_size"},
		{"size without region", "", input(map[string]any{"shared_memory_byte_size": 8}), 400, "shared_memory_byte_size is set without shared_memory_region"},
		{"region not a string", "", input(map[string]any{"shared_memory_region": 3, "shared_memory_byte_size": 8}), 400, "want a string"},
		{"wrong size", "", input(shmParams("in", 0, 100)), 400, "shared_memory_byte_size is 100; the tensor needs"},
		{"negative offset", "", input(shmParams("in", -4, shmInSize)), 400, "want an offset >= 0"},
		{"offset over int64", "", input(map[string]any{"shared_memory_region": "in", "shared_memory_byte_size": shmInSize, "shared_memory_offset": json.RawMessage("18446744073709551615")}),
			400, "shared_memory_offset 18446744073709551615 exceeds the largest supported offset"},
		{"size over int64", "", input(map[string]any{"shared_memory_region": "in", "shared_memory_byte_size": json.RawMessage("9223372036854775808")}),
			400, "shared_memory_byte_size 9223372036854775808 exceeds the largest supported byte size"},
		{"offset not an integer", "", input(map[string]any{"shared_memory_region": "in", "shared_memory_byte_size": shmInSize, "shared_memory_offset": 1.5}),
			400, "shared_memory_offset is 1.5; want an integer"},
		{"outside the region", "", input(shmParams("in", 4, shmInSize)), 400, "lie outside shared memory region"},
		{"unknown region", "", input(shmParams("nope", 0, shmInSize)), 400, `no shared memory region \"nope\"`},
		{"data too", "", func() any {
			r := input(shmParams("in", 0, shmInSize))
			r["inputs"].([]any)[0].(map[string]any)["data"] = []float32{1}
			return r
		}(), 400, "also carries its data"},
		{"output region too small", "", withOut(shmParams("small", 0, 8)), 400, "the output needs at least 120 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.url
			if url == "" {
				url = "http://" + s.HTTPAddr + "/v2/models/tiny/infer"
			}
			res := postJSON(t, url, tc.body)
			if res.status != tc.status || !strings.Contains(string(res.body), tc.msg) {
				t.Fatalf("got %d %s; want %d with %q", res.status, res.body, tc.status, tc.msg)
			}
		})
	}
}

// TestSharedMemoryUnregisterInFlight unregisters the output's region while
// a request that writes to it waits in the batcher: the request still
// completes into the mapping, which lives until it is done.
func TestSharedMemoryUnregisterInFlight(t *testing.T) {
	for _, pinned := range []bool{false, true} {
		t.Run(fmt.Sprintf("pinned=%v", pinned), func(t *testing.T) { testUnregisterInFlight(t, pinned) })
	}
}

func testUnregisterInFlight(t *testing.T, pinned bool) {
	s := servertest.Start(t, servertest.Options{Server: allowShm, Gated: true, Pinned: pinned})
	m, key := shmObject(t, shmSize)
	x := randImages(shmImages, 16, 24)
	want := s.Expected(t, x, shmImages)
	copy(m.Bytes(), tensor.F32Bytes(x))
	base := "http://" + s.HTTPAddr + "/v2/systemsharedmemory"
	for _, r := range []struct {
		name     string
		off, len int
	}{{"in", 0, shmInSize}, {"out", shmOutOff, shmSize - shmOutOff}} {
		if res := postJSON(t, base+"/region/"+r.name+"/register", map[string]any{"key": key, "offset": r.off, "byte_size": r.len}); res.status != http.StatusOK {
			t.Fatalf("register %s: %d %s", r.name, res.status, res.body)
		}
	}
	done := make(chan httpResult, 1)
	go func() {
		done <- postJSON(t, "http://"+s.HTTPAddr+"/v2/models/tiny/infer", map[string]any{
			"inputs":  []any{map[string]any{"name": "input", "datatype": "FP32", "shape": []int{shmImages, 3, 16, 16}, "parameters": shmParams("in", 0, shmInSize)}},
			"outputs": []any{map[string]any{"name": "logits", "parameters": shmParams("out", 0, shmImages*40)}},
		})
	}()
	s.Gate.WaitHeld(t, 1)
	if res := do(t, "POST", base+"/unregister", nil, nil); res.status != http.StatusOK {
		t.Fatalf("unregister all: %d %s", res.status, res.body)
	}
	s.Gate.Open()
	select {
	case res := <-done:
		if res.status != http.StatusOK {
			t.Fatalf("in-flight request: %d %s", res.status, res.body)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the in-flight request did not finish")
	}
	checkLogits(t, tensor.BytesF32(m.Bytes()[shmOutOff:shmOutOff+shmImages*40]), want)
	if pinned {
		// The input region was page-locked for the request and unpinned
		// by it, the last user, after the unregister.
		if r, u := s.HostRegisters.Load(), s.HostUnregisters.Load(); r != 1 || u != 1 {
			t.Fatalf("%d page-lockings and %d unpinnings; want 1 and 1", r, u)
		}
	}
}

// TestSharedMemoryZeroCopy checks the GPU path: with a model that can
// page-lock memory, an input region is page-locked once and requests in
// the model's dtype hand the device a view of it; other dtypes, which the
// host converts, are copied.
func TestSharedMemoryZeroCopy(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Server: allowShm, Pinned: true})
	m, key := shmObject(t, shmSize)
	x := randImages(shmImages, 16, 25)
	copy(m.Bytes(), tensor.F32Bytes(x))
	base := "http://" + s.HTTPAddr + "/v2/systemsharedmemory"
	if res := postJSON(t, base+"/region/in/register", map[string]any{"key": key, "byte_size": shmInSize}); res.status != http.StatusOK {
		t.Fatalf("register: %d %s", res.status, res.body)
	}
	infer := func(dt string, n, size int) []float32 {
		t.Helper()
		jr, _ := splitResponse(t, postJSON(t, "http://"+s.HTTPAddr+"/v2/models/tiny/infer", map[string]any{
			"inputs": []any{map[string]any{"name": "input", "datatype": dt, "shape": []int{n, 3, 16, 16}, "parameters": shmParams("in", 0, size)}}}))
		var got []float32
		if err := json.Unmarshal(jr.Outputs[0].Data, &got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	checkLogits(t, infer("FP32", shmImages, shmInSize), s.Expected(t, x, shmImages))
	if n := s.HostRegisters.Load(); n != 1 {
		t.Fatalf("%d page-lockings after the first request; want 1", n)
	}
	// The device reads the region itself: new bytes there are what the
	// next request computes on.
	y := randImages(shmImages, 16, 26)
	copy(m.Bytes(), tensor.F32Bytes(y))
	checkLogits(t, infer("FP32", shmImages, shmInSize), s.Expected(t, y, shmImages))
	if n := s.HostRegisters.Load(); n != 1 {
		t.Fatalf("%d page-lockings after two requests; want 1", n)
	}
	if v, _ := metricValue(t, s, "goinfer_shared_memory_pinned_bytes"); v < shmInSize {
		t.Fatalf("goinfer_shared_memory_pinned_bytes = %v; want the region's %d bytes or more", v, shmInSize)
	}
	if v, _ := metricValue(t, s, "goinfer_shared_memory_regions"); v != 1 {
		t.Fatalf("goinfer_shared_memory_regions = %v; want 1", v)
	}
	// UINT8 pixels are converted on the host: copied, not viewed.
	px := make([]float32, 3*16*16)
	for i := range px {
		m.Bytes()[i] = byte(i * 13)
		px[i] = (float32(byte(i*13))/255 - []float32{0.485, 0.456, 0.406}[i/256]) / []float32{0.229, 0.224, 0.225}[i/256]
	}
	checkLogits(t, infer("UINT8", 1, 3*16*16), s.Expected(t, px, 1))
	if n := s.HostRegisters.Load(); n != 1 {
		t.Fatalf("%d page-lockings after a UINT8 request; want still 1", n)
	}
	if res := do(t, "POST", base+"/unregister", nil, nil); res.status != http.StatusOK {
		t.Fatalf("unregister: %d %s", res.status, res.body)
	}
	if n := s.HostUnregisters.Load(); n != 1 {
		t.Fatalf("%d unpinnings after unregistering; want 1", n)
	}
}

// TestSharedMemoryTruncated shrinks a registered object under the server:
// requests that touch it fail with a clear error and the server lives on.
func TestSharedMemoryTruncated(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Server: allowShm})
	_, key := shmObject(t, shmSize)
	base := "http://" + s.HTTPAddr + "/v2/systemsharedmemory"
	if res := postJSON(t, base+"/region/in/register", map[string]any{"key": key, "byte_size": shmInSize}); res.status != http.StatusOK {
		t.Fatalf("register: %d %s", res.status, res.body)
	}
	if err := os.Truncate("/dev/shm"+key, 0); err != nil {
		t.Fatal(err)
	}
	res := postJSON(t, "http://"+s.HTTPAddr+"/v2/models/tiny/infer", map[string]any{
		"inputs": []any{map[string]any{"name": "input", "datatype": "FP32", "shape": []int{shmImages, 3, 16, 16}, "parameters": shmParams("in", 0, shmInSize)}}})
	if res.status != http.StatusBadRequest || !strings.Contains(string(res.body), "truncated") {
		t.Fatalf("infer from a truncated object: %d %s", res.status, res.body)
	}
	if res := do(t, "GET", "http://"+s.HTTPAddr+"/v2/health/live", nil, nil); res.status != http.StatusOK {
		t.Fatalf("server not live after the fault: %d", res.status)
	}
}
