package server_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"goinfer/internal/kservepb"
	"goinfer/internal/server"
	"goinfer/internal/server/servertest"
	"goinfer/internal/tensor"
)

func dialGRPC(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	return dialGRPCTB(t, addr, opts...)
}

func dialGRPCTB(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func rawInfer(x []float32, n int) *kservepb.ModelInferRequest {
	return &kservepb.ModelInferRequest{
		ModelName: "tiny",
		Id:        "r1",
		Inputs: []*kservepb.ModelInferRequest_InferInputTensor{{
			Name: "input", Datatype: "FP32", Shape: []int64{int64(n), 3, 16, 16},
		}},
		RawInputContents: [][]byte{tensor.F32Bytes(x)},
	}
}

func rawLogits(t *testing.T, resp *kservepb.ModelInferResponse) []float32 {
	t.Helper()
	if len(resp.RawOutputContents) != 1 {
		t.Fatalf("%d raw outputs", len(resp.RawOutputContents))
	}
	b := resp.RawOutputContents[0]
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func TestGRPCHealthAndMetadata(t *testing.T) {
	s := servertest.Start(t, servertest.Options{NoModel: true})
	c := kservepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.GRPCAddr))
	ctx := ctxT(t)
	if r, err := c.ServerLive(ctx, &kservepb.ServerLiveRequest{}); err != nil || !r.Live {
		t.Fatalf("ServerLive: %v %v", r, err)
	}
	if r, err := c.ServerReady(ctx, &kservepb.ServerReadyRequest{}); err != nil || r.Ready {
		t.Fatalf("ServerReady while loading: %v %v", r, err)
	}
	if _, err := c.ModelMetadata(ctx, &kservepb.ModelMetadataRequest{Name: "tiny"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("ModelMetadata while loading: %v, want UNAVAILABLE", err)
	}
	// Discovery by the empty name works while loading.
	if md, err := c.ModelMetadata(ctx, &kservepb.ModelMetadataRequest{}); err != nil || md.Name != "tiny" || len(md.Inputs) != 0 {
		t.Fatalf("ModelMetadata(\"\") while loading: %v %v", md, err)
	}
	h := healthpb.NewHealthClient(dialGRPC(t, s.GRPCAddr))
	if r, err := h.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health while loading: %v %v", r, err)
	}
	if err := s.Srv.SetModel(s.Model()); err != nil {
		t.Fatal(err)
	}
	if r, err := c.ServerReady(ctx, &kservepb.ServerReadyRequest{}); err != nil || !r.Ready {
		t.Fatalf("ServerReady: %v %v", r, err)
	}
	if r, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: "inference.GRPCInferenceService"}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", r, err)
	}
	for _, name := range []string{"tiny", ""} {
		r, err := c.ModelReady(ctx, &kservepb.ModelReadyRequest{Name: name})
		if err != nil || !r.Ready {
			t.Fatalf("ModelReady(%q): %v %v", name, r, err)
		}
	}
	if _, err := c.ModelReady(ctx, &kservepb.ModelReadyRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("ModelReady(nope): %v, want NOT_FOUND", err)
	}
	sm, err := c.ServerMetadata(ctx, &kservepb.ServerMetadataRequest{})
	if err != nil || sm.Name != "goinfer" || !strings.Contains(fmt.Sprint(sm.Extensions), "binary_tensor_data") {
		t.Fatalf("ServerMetadata: %v %v", sm, err)
	}
	md, err := c.ModelMetadata(ctx, &kservepb.ModelMetadataRequest{Name: "tiny", Version: "1"})
	if err != nil {
		t.Fatal(err)
	}
	in, out := md.Inputs[0], md.Outputs[0]
	if md.Name != "tiny" || md.Platform != "goinfer_cpu" || in.Name != "input" || in.Datatype != "FP32" ||
		fmt.Sprint(in.Shape) != "[-1 3 16 16]" || out.Name != "logits" || fmt.Sprint(out.Shape) != "[-1 10]" {
		t.Fatalf("ModelMetadata: %v", md)
	}
	if _, err := c.ModelMetadata(ctx, &kservepb.ModelMetadataRequest{Name: "tiny", Version: "3"}); status.Code(err) != codes.NotFound {
		t.Fatalf("ModelMetadata version 3: %v, want NOT_FOUND", err)
	}
}

func TestGRPCInfer(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Labels: []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}})
	c := kservepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.GRPCAddr))
	ctx := ctxT(t)
	x := randImages(2, 16, 20)
	want := s.Expected(t, x, 2)

	t.Run("raw", func(t *testing.T) {
		resp, err := c.ModelInfer(ctx, rawInfer(x, 2))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Id != "r1" || resp.ModelName != "tiny" || resp.Outputs[0].Name != "logits" || fmt.Sprint(resp.Outputs[0].Shape) != "[2 10]" {
			t.Fatalf("response %v", resp)
		}
		checkLogits(t, rawLogits(t, resp), want)
		if resp.Parameters["batch_size"].GetInt64Param() != 2 {
			t.Errorf("batch_size parameter %v", resp.Parameters["batch_size"])
		}
	})
	t.Run("typed fp32_contents", func(t *testing.T) {
		req := rawInfer(x, 2)
		req.RawInputContents = nil
		req.Inputs[0].Contents = &kservepb.InferTensorContents{Fp32Contents: x}
		resp, err := c.ModelInfer(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		checkLogits(t, rawLogits(t, resp), want)
	})
	t.Run("typed uint_contents", func(t *testing.T) {
		req := rawInfer(x, 1)
		req.RawInputContents = nil
		req.Inputs[0].Datatype = "UINT8"
		v := make([]uint32, 3*16*16)
		for i := range v {
			v[i] = uint32(i % 256)
		}
		req.Inputs[0].Contents = &kservepb.InferTensorContents{UintContents: v}
		resp, err := c.ModelInfer(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(rawLogits(t, resp)) != 10 {
			t.Fatal("no logits")
		}
	})
	t.Run("classification", func(t *testing.T) {
		req := rawInfer(x, 2)
		req.Outputs = []*kservepb.ModelInferRequest_InferRequestedOutputTensor{{
			Name:       "logits",
			Parameters: map[string]*kservepb.InferParameter{"classification": {ParameterChoice: &kservepb.InferParameter_Int64Param{Int64Param: 1}}},
		}}
		resp, err := c.ModelInfer(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Outputs[0].Datatype != "BYTES" || fmt.Sprint(resp.Outputs[0].Shape) != "[2 1]" {
			t.Fatalf("output %v", resp.Outputs[0])
		}
		b := resp.RawOutputContents[0]
		for i := range 2 {
			n := binary.LittleEndian.Uint32(b)
			got := string(b[4 : 4+n])
			b = b[4+n:]
			best := 0
			for c := range 10 {
				if want[i*10+c] > want[i*10+best] {
					best = c
				}
			}
			if !strings.HasSuffix(got, fmt.Sprintf(":%d:%c", best, 'a'+best)) {
				t.Errorf("image %d: %q, want class %d", i, got, best)
			}
		}
	})
}

func TestGRPCErrors(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Server: func(c *server.Config) { c.MaxRequestBytes = 64 << 10 }})
	c := kservepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.GRPCAddr))
	ctx := ctxT(t)
	x := randImages(1, 16, 21)
	tests := []struct {
		name string
		mod  func(r *kservepb.ModelInferRequest)
		code codes.Code
		msg  string
	}{
		{"unknown model", func(r *kservepb.ModelInferRequest) { r.ModelName = "big" }, codes.NotFound, `unknown model "big"`},
		{"unknown version", func(r *kservepb.ModelInferRequest) { r.ModelVersion = "4" }, codes.NotFound, "no version"},
		{"no inputs", func(r *kservepb.ModelInferRequest) { r.Inputs = nil }, codes.InvalidArgument, "0 inputs"},
		{"unknown input", func(r *kservepb.ModelInferRequest) { r.Inputs[0].Name = "img" }, codes.InvalidArgument, "inputs[0].name"},
		{"wrong datatype", func(r *kservepb.ModelInferRequest) { r.Inputs[0].Datatype = "BF16" }, codes.InvalidArgument, "inputs[0].datatype"},
		{"wrong rank", func(r *kservepb.ModelInferRequest) { r.Inputs[0].Shape = []int64{3, 16, 16} }, codes.InvalidArgument, "rank 3"},
		{"wrong size", func(r *kservepb.ModelInferRequest) { r.Inputs[0].Shape = []int64{1, 3, 15, 16} }, codes.InvalidArgument, "15x16 are not served"},
		{"short raw", func(r *kservepb.ModelInferRequest) { r.RawInputContents[0] = r.RawInputContents[0][:10] }, codes.InvalidArgument, "raw_input_contents[0] has 10 bytes"},
		{"two raw", func(r *kservepb.ModelInferRequest) { r.RawInputContents = append(r.RawInputContents, nil) }, codes.InvalidArgument, "raw_input_contents has 2 entries"},
		{"raw and typed", func(r *kservepb.ModelInferRequest) {
			r.Inputs[0].Contents = &kservepb.InferTensorContents{Fp32Contents: []float32{1}}
		}, codes.InvalidArgument, "contents must be empty"},
		{"typed count", func(r *kservepb.ModelInferRequest) {
			r.RawInputContents = nil
			r.Inputs[0].Contents = &kservepb.InferTensorContents{Fp32Contents: []float32{1, 2}}
		}, codes.InvalidArgument, "fp32_contents has 2 values"},
		{"typed FP16", func(r *kservepb.ModelInferRequest) {
			r.RawInputContents = nil
			r.Inputs[0].Datatype = "FP16"
		}, codes.InvalidArgument, "raw_input_contents"},
		{"UINT8 over 255", func(r *kservepb.ModelInferRequest) {
			r.RawInputContents = nil
			r.Inputs[0].Datatype = "UINT8"
			v := make([]uint32, 768)
			v[5] = 256
			r.Inputs[0].Contents = &kservepb.InferTensorContents{UintContents: v}
		}, codes.InvalidArgument, "uint_contents[5] is 256"},
		{"unknown output", func(r *kservepb.ModelInferRequest) {
			r.Outputs = []*kservepb.ModelInferRequest_InferRequestedOutputTensor{{Name: "probs"}}
		}, codes.InvalidArgument, "outputs[0].name"},
		{"bad classification", func(r *kservepb.ModelInferRequest) {
			r.Outputs = []*kservepb.ModelInferRequest_InferRequestedOutputTensor{{Name: "logits",
				Parameters: map[string]*kservepb.InferParameter{"classification": {ParameterChoice: &kservepb.InferParameter_StringParam{StringParam: "3"}}}}}
		}, codes.InvalidArgument, "classification"},
		{"shm offset over int64", func(r *kservepb.ModelInferRequest) {
			r.RawInputContents = nil
			r.Inputs[0].Parameters = map[string]*kservepb.InferParameter{
				"shared_memory_region":    {ParameterChoice: &kservepb.InferParameter_StringParam{StringParam: "in"}},
				"shared_memory_byte_size": {ParameterChoice: &kservepb.InferParameter_Int64Param{Int64Param: 3072}},
				"shared_memory_offset":    {ParameterChoice: &kservepb.InferParameter_Uint64Param{Uint64Param: 1 << 63}},
			}
		}, codes.InvalidArgument, "shared_memory_offset 9223372036854775808 exceeds the largest supported offset"},
		{"shm offset a string", func(r *kservepb.ModelInferRequest) {
			r.RawInputContents = nil
			r.Inputs[0].Parameters = map[string]*kservepb.InferParameter{
				"shared_memory_region":    {ParameterChoice: &kservepb.InferParameter_StringParam{StringParam: "in"}},
				"shared_memory_byte_size": {ParameterChoice: &kservepb.InferParameter_Int64Param{Int64Param: 3072}},
				"shared_memory_offset":    {ParameterChoice: &kservepb.InferParameter_StringParam{StringParam: "0"}},
			}
		}, codes.InvalidArgument, "shared_memory_offset must be an int64_param or a uint64_param"},
		{"too large", func(r *kservepb.ModelInferRequest) {
			big := randImages(30, 16, 1)
			r.Inputs[0].Shape[0] = 30
			r.RawInputContents[0] = tensor.F32Bytes(big)
		}, codes.ResourceExhausted, "larger than max"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := rawInfer(x, 1)
			tt.mod(req)
			_, err := c.ModelInfer(ctx, req)
			if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Fatalf("got %v, want %v mentioning %q", err, tt.code, tt.msg)
			}
		})
	}
}

func TestGRPCQueueFullAndDeadline(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Gated: true, Inflight: 1, MaxQueue: 1})
	c := kservepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.GRPCAddr))
	ctx := ctxT(t)
	x := randImages(1, 16, 22)
	errc := make(chan error, 2)
	go func() { _, err := c.ModelInfer(ctx, rawInfer(x, 1)); errc <- err }()
	s.Gate.WaitHeld(t, 1)
	// A deadline while queued: DEADLINE_EXCEEDED, and the queue is freed.
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.ModelInfer(dctx, rawInfer(x, 1)); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("deadline while queued: %v", err)
	}
	waitMetric(t, s, "goinfer_queue_depth", 0)
	go func() { _, err := c.ModelInfer(ctx, rawInfer(x, 1)); errc <- err }()
	waitMetric(t, s, "goinfer_queue_depth", 1)
	_, err := c.ModelInfer(ctx, rawInfer(x, 1))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("full queue: %v, want RESOURCE_EXHAUSTED", err)
	}
	s.Gate.Open()
	for range 2 {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
}

// rawCodec sends and receives message bytes as they are, so that a test
// can speak the protocol without any generated code.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestGRPCWireCompatibility talks to the server with messages encoded by
// hand from the field numbers of the public KServe v2 definition
// (grpc_predict_v2.proto as KServe publishes it), not from goinfer's
// generated code: it pins the wire format that existing clients use.
func TestGRPCWireCompatibility(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	conn := dialGRPC(t, s.GRPCAddr, grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	ctx := ctxT(t)
	x := randImages(1, 16, 23)
	want := s.Expected(t, x, 1)

	// ModelInferRequest: model_name = 1, id = 3, inputs = 5
	// (InferInputTensor: name = 1, datatype = 2, shape = 3 packed),
	// raw_input_contents = 7.
	var in []byte
	in = protowire.AppendTag(in, 1, protowire.BytesType)
	in = protowire.AppendString(in, "input")
	in = protowire.AppendTag(in, 2, protowire.BytesType)
	in = protowire.AppendString(in, "FP32")
	var shape []byte
	for _, d := range []uint64{1, 3, 16, 16} {
		shape = protowire.AppendVarint(shape, d)
	}
	in = protowire.AppendTag(in, 3, protowire.BytesType)
	in = protowire.AppendBytes(in, shape)
	var req []byte
	req = protowire.AppendTag(req, 1, protowire.BytesType)
	req = protowire.AppendString(req, "tiny")
	req = protowire.AppendTag(req, 3, protowire.BytesType)
	req = protowire.AppendString(req, "wire-1")
	req = protowire.AppendTag(req, 5, protowire.BytesType)
	req = protowire.AppendBytes(req, in)
	req = protowire.AppendTag(req, 7, protowire.BytesType)
	req = protowire.AppendBytes(req, tensor.F32Bytes(x))

	var resp []byte
	if err := conn.Invoke(ctx, "/inference.GRPCInferenceService/ModelInfer", &req, &resp); err != nil {
		t.Fatal(err)
	}
	// ModelInferResponse: model_name = 1, id = 3, outputs = 5
	// (InferOutputTensor: name = 1, datatype = 2, shape = 3),
	// raw_output_contents = 6.
	fields := map[protowire.Number][][]byte{}
	for b := resp; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatal(protowire.ParseError(n))
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		fields[num] = append(fields[num], v)
		b = b[n:]
	}
	if string(fields[1][0]) != "tiny" || string(fields[3][0]) != "wire-1" {
		t.Fatalf("model_name %q id %q", fields[1], fields[3])
	}
	out := fields[5][0]
	name, _, _ := protowire.ConsumeTag(out)
	if name != 1 {
		t.Fatalf("output tensor starts with field %d", name)
	}
	if !strings.Contains(string(out), "logits") || !strings.Contains(string(out), "FP32") {
		t.Fatalf("output tensor %q", out)
	}
	raw := fields[6][0]
	got := make([]float32, len(raw)/4)
	for i := range got {
		got[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	checkLogits(t, got, want)
}

// TestGRPCMalformedMessage sends bytes that are not protobuf to unary and
// streaming methods: each answers INVALID_ARGUMENT naming the message, not
// INTERNAL, and the server goes on answering well-formed calls.
func TestGRPCMalformedMessage(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	conn := dialGRPC(t, s.GRPCAddr)
	ctx := ctxT(t)
	good, err := proto.Marshal(rawInfer(randImages(1, 16, 3), 1))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method, msg string
		body              []byte
	}{
		{"infer bad tag", "/inference.GRPCInferenceService/ModelInfer", "malformed ModelInferRequest", []byte{0xff, 0xff, 0xff}},
		{"infer truncated", "/inference.GRPCInferenceService/ModelInfer", "malformed ModelInferRequest", good[:len(good)-7]},
		{"infer field 0", "/inference.GRPCInferenceService/ModelInfer", "malformed ModelInferRequest", []byte{0x02, 0x00}},
		{"register", "/inference.GRPCInferenceService/SystemSharedMemoryRegister", "malformed SystemSharedMemoryRegisterRequest", []byte{0x0a, 0x10, 'x'}},
		{"live", "/inference.GRPCInferenceService/ServerLive", "malformed ServerLiveRequest", []byte{0x0b}},
		{"health", "/grpc.health.v1.Health/Check", "malformed HealthCheckRequest", []byte{0x0a, 0xff}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, out := tc.body, []byte(nil)
			err := conn.Invoke(ctx, tc.method, &in, &out, grpc.ForceCodec(rawCodec{}))
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.msg) {
				t.Fatalf("got %v; want InvalidArgument mentioning %q", err, tc.msg)
			}
		})
	}
	t.Run("stream", func(t *testing.T) {
		st, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true},
			"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", grpc.ForceCodec(rawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		in := []byte{0xff, 0xff}
		// io.EOF: the server answered first; RecvMsg has the status.
		if err := st.SendMsg(&in); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		var out []byte
		if err := st.RecvMsg(&out); status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "malformed ServerReflectionRequest") {
			t.Fatalf("got %v; want InvalidArgument naming the message", err)
		}
	})
	resp, err := kservepb.NewGRPCInferenceServiceClient(conn).ModelInfer(ctx, rawInfer(randImages(1, 16, 3), 1))
	if err != nil || len(resp.RawOutputContents) != 1 {
		t.Fatalf("a good request after the malformed ones: %v", err)
	}
}
