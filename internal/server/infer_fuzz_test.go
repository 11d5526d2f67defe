package server_test

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"goinfer/internal/kservepb"
	"goinfer/internal/server"
	"goinfer/internal/server/servertest"
	"goinfer/internal/tensor"
)

// FuzzHTTPInfer feeds arbitrary bodies and binary-header lengths to the
// real infer handler (real batcher, backend and cpu engine behind it): it
// must answer every one with a protocol status and an error body, never a
// 500 (a recovered panic) or a hang. A shared memory region "r" is
// registered, so that tensors in shared memory are fuzzed too.
func FuzzHTTPInfer(f *testing.F) {
	s := servertest.Start(f, servertest.Options{Size: 8, Server: func(c *server.Config) { c.MaxRequestBytes = 1 << 16; c.AllowSharedMemory = true }})
	h := s.Srv.Handler()
	registerFuzzRegion(f, s)
	img := tensor.F32Bytes(randImages(1, 8, 1))
	hdr, _ := json.Marshal(map[string]any{"inputs": []any{binaryInput("FP32", []int{1, 3, 8, 8}, len(img))},
		"outputs": []any{map[string]any{"name": "logits", "parameters": map[string]any{"binary_data": true, "classification": 2}}}})
	f.Add(append(append([]byte{}, hdr...), img...), len(hdr))
	f.Add(hdr, len(hdr))
	f.Add([]byte(`{"inputs":[{"name":"input","datatype":"UINT8","shape":[1,3,8,8],"data":[1,2,3]}]}`), -1)
	f.Add([]byte(`{"inputs":[{"name":"input","datatype":"FP16","shape":[1,3,8,8],"parameters":{"binary_data_size":384}}]}`), 10)
	f.Add([]byte(`{"inputs":[{"name":"input","datatype":"FP32","shape":[1,3,8,8],"parameters":{"shared_memory_region":"r","shared_memory_byte_size":768}}],`+
		`"outputs":[{"name":"logits","parameters":{"shared_memory_region":"r","shared_memory_offset":768,"shared_memory_byte_size":40}}]}`), -1)
	f.Fuzz(func(t *testing.T, body []byte, hlen int) {
		req := httptest.NewRequest("POST", "/v2/models/tiny/infer", bytes.NewReader(body))
		if hlen >= 0 {
			req.Header.Set(server.HeaderContentLength, strconv.Itoa(hlen))
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case 200:
		case 400, 404, 413, 503:
			var e struct{ Error string }
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
				t.Fatalf("status %d with body %q: want {\"error\": ...}", rec.Code, rec.Body)
			}
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	})
}

// FuzzGRPCInfer hands arbitrary bytes as the ModelInferRequest message to
// the server's unary call path (admission, the server's own decoder, the
// aliasing codec, its interceptors and ModelInfer, with the real batcher,
// backend and cpu engine behind it): every answer must be OK with a reply
// that decodes, or a client-side error code, a malformed message
// INVALID_ARGUMENT. The server is set up once per fuzzing process, and
// the call path is in memory: a loopback connection per call made the
// target about 20 times slower (gRPC-Go's client and transport, both
// coverage-instrumented, and their background goroutines' coverage noise),
// while the transports are tested and fuzzed on their own (FuzzServerConn).
func FuzzGRPCInfer(f *testing.F) {
	s := servertest.Start(f, servertest.Options{Size: 8, Server: allowShm})
	registerFuzzRegion(f, s)
	invoke := s.Srv.UnaryInvoker()
	x := randImages(1, 8, 2)
	seed := &kservepb.ModelInferRequest{ModelName: "tiny", Inputs: []*kservepb.ModelInferRequest_InferInputTensor{{
		Name: "input", Datatype: "FP32", Shape: []int64{1, 3, 8, 8}}}, RawInputContents: [][]byte{tensor.F32Bytes(x)}}
	b, _ := proto.Marshal(seed)
	f.Add(b)
	f.Add(b[:len(b)-5])
	seed.RawInputContents = nil
	seed.Inputs[0].Contents = &kservepb.InferTensorContents{Fp32Contents: x[:5]}
	b, _ = proto.Marshal(seed)
	f.Add(b)
	seed.Inputs[0].Contents = nil
	seed.Inputs[0].Parameters = map[string]*kservepb.InferParameter{
		"shared_memory_region":    {ParameterChoice: &kservepb.InferParameter_StringParam{StringParam: "r"}},
		"shared_memory_byte_size": {ParameterChoice: &kservepb.InferParameter_Int64Param{Int64Param: 768}},
	}
	seed.Outputs = []*kservepb.ModelInferRequest_InferRequestedOutputTensor{{Name: "logits", Parameters: map[string]*kservepb.InferParameter{
		"classification": {ParameterChoice: &kservepb.InferParameter_Int64Param{Int64Param: 2}}}}}
	b, _ = proto.Marshal(seed)
	f.Add(b)
	const method = "/inference.GRPCInferenceService/ModelInfer"
	f.Fuzz(func(t *testing.T, msg []byte) {
		resp, err := invoke(t.Context(), method, msg)
		switch status.Code(err) {
		case codes.OK:
			if err := proto.Unmarshal(resp, &kservepb.ModelInferResponse{}); err != nil {
				t.Fatalf("an OK reply that does not decode: %v", err)
			}
		case codes.NotFound, codes.ResourceExhausted, codes.Unavailable:
		case codes.InvalidArgument:
			if status.Convert(err).Message() == "" {
				t.Fatal("INVALID_ARGUMENT without a message")
			}
		default:
			t.Fatalf("ModelInfer: %v", err)
		}
	})
}

// registerFuzzRegion registers region "r": an 8x8 FP32 image, then room
// for its logits.
func registerFuzzRegion(f *testing.F, s *servertest.Server) {
	_, key := shmObject(f, 768+4096)
	body, _ := json.Marshal(map[string]any{"key": key, "byte_size": 768 + 4096})
	req := httptest.NewRequest("POST", "/v2/systemsharedmemory/region/r/register", bytes.NewReader(body))
	rec := httptest.NewRecorder()
	s.Srv.Handler().ServeHTTP(rec, req)
	if rec.Code != 200 {
		f.Fatalf("registering the fuzz region: %d %s", rec.Code, rec.Body)
	}
}
