package server

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"
	"unsafe"

	"google.golang.org/grpc"

	"goinfer/internal/kservepb"
	"goinfer/internal/server/batcher"
	"goinfer/internal/tensor"
)

// recoverUnary turns a panic in a gRPC handler into a logged INTERNAL
// error.
func (s *Server) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("panic in gRPC handler", "method", info.FullMethod, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			resp, err = nil, grpcError(errorf(kindInternal, "internal error: %v", v))
		}
	}()
	return handler(ctx, req)
}

// grpcService implements inference.GRPCInferenceService.
type grpcService struct {
	kservepb.UnimplementedGRPCInferenceServiceServer
	s *Server
}

func (g *grpcService) ServerLive(context.Context, *kservepb.ServerLiveRequest) (*kservepb.ServerLiveResponse, error) {
	return &kservepb.ServerLiveResponse{Live: true}, nil
}

func (g *grpcService) ServerReady(context.Context, *kservepb.ServerReadyRequest) (*kservepb.ServerReadyResponse, error) {
	return &kservepb.ServerReadyResponse{Ready: g.s.ready()}, nil
}

func (g *grpcService) ServerMetadata(context.Context, *kservepb.ServerMetadataRequest) (*kservepb.ServerMetadataResponse, error) {
	return &kservepb.ServerMetadataResponse{Name: g.s.cfg.ServerName, Version: g.s.cfg.ServerVersion, Extensions: g.s.extensions()}, nil
}

// modelName resolves the name of a request: as a convenience for clients
// that discover the model, an empty name means the one model served (and
// ModelMetadata answers it with the name even while the model loads).
func (g *grpcService) modelName(name string) string {
	if name == "" {
		return g.s.cfg.ModelName
	}
	return name
}

func (g *grpcService) ModelReady(ctx context.Context, req *kservepb.ModelReadyRequest) (*kservepb.ModelReadyResponse, error) {
	st, err := g.s.lookup(g.modelName(req.GetName()), req.GetVersion())
	if err != nil {
		return nil, grpcError(err)
	}
	return &kservepb.ModelReadyResponse{Ready: st != nil && !g.s.draining.Load()}, nil
}

func (g *grpcService) ModelMetadata(ctx context.Context, req *kservepb.ModelMetadataRequest) (*kservepb.ModelMetadataResponse, error) {
	name := g.modelName(req.GetName())
	st, err := g.s.lookup(name, req.GetVersion())
	if err == nil && st == nil && req.GetName() == "" && g.s.loadErr.Load() == nil {
		// Discovery (the empty name) works while the model loads: the
		// name and versions are known, the tensors not yet.
		return &kservepb.ModelMetadataResponse{Name: name, Versions: []string{g.s.cfg.ModelVersion}}, nil
	}
	if err == nil && st == nil {
		_, err = g.s.serving(name, "")
	}
	if err != nil {
		return nil, grpcError(err)
	}
	md := g.s.modelMetadata(st)
	tm := func(t TensorMetadata) *kservepb.ModelMetadataResponse_TensorMetadata {
		return &kservepb.ModelMetadataResponse_TensorMetadata{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape}
	}
	return &kservepb.ModelMetadataResponse{
		Name: md.Name, Versions: md.Versions, Platform: md.Platform,
		Inputs:  mapSlice(md.Inputs, tm),
		Outputs: mapSlice(md.Outputs, tm),
	}, nil
}

func (g *grpcService) ModelInfer(ctx context.Context, req *kservepb.ModelInferRequest) (*kservepb.ModelInferResponse, error) {
	s := g.s
	defer s.codec.Release(req) // its raw contents are done with once this returns
	start := time.Now()
	s.active.Add(1)
	defer s.active.Add(-1)
	gauge := s.metrics.inflightGauge("grpc")
	gauge.Inc()
	defer gauge.Dec()
	if s.cfg.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.RequestTimeout)
		defer cancel()
	}
	// gRPC has read the message by now: the request holds its decoded
	// message from here on instead of the tap's receive reservation.
	releaseRecvReservation(ctx)
	if st := s.stampsOf(ctx); st != nil {
		st[stepHandler] = start
	}
	held := lease{b: s.budget}
	defer held.release()
	var resp *kservepb.ModelInferResponse
	var res batcher.Result
	var err error
	if n := grpcHeldBytes(req); !held.ensure(n) {
		err = errMemoryFull(n)
	} else {
		resp, res, err = g.infer(ctx, req)
	}
	if err != nil {
		k, msg := classify(err)
		s.logFailure("grpc", k, msg)
		s.metrics.observeRequest("grpc", k, false, time.Since(start), 0)
		return nil, grpcError(err)
	}
	s.metrics.observeRequest("grpc", 0, true, time.Since(start), res.QueueWait)
	if st := s.stampsOf(ctx); st != nil && s.fast == nil {
		// gRPC-Go encodes and writes the answer after this returns,
		// unseen: the last step is the answer built.
		st[stepEncoded] = time.Now()
		s.breakdown.record("grpc", st)
	}
	return resp, nil
}

func (g *grpcService) infer(ctx context.Context, req *kservepb.ModelInferRequest) (*kservepb.ModelInferResponse, batcher.Result, error) {
	s := g.s
	var res batcher.Result
	st, err := s.serving(req.GetModelName(), req.GetModelVersion())
	if err != nil {
		return nil, res, err
	}
	if len(req.Inputs) != 1 {
		return nil, res, errorf(kindInvalid, "request has %d inputs; the model takes one, %q", len(req.Inputs), st.input.name)
	}
	in := req.Inputs[0]
	outs := make([]outputSpec, len(req.Outputs))
	for i, o := range req.Outputs {
		outs[i].name = o.GetName()
		if prm, ok := o.GetParameters()["classification"]; ok {
			k, ok := prm.GetParameterChoice().(*kservepb.InferParameter_Int64Param)
			if !ok || k.Int64Param < 0 || k.Int64Param > maxDim {
				return nil, res, errorf(kindInvalid, "outputs[%d].parameters.classification must be a positive int64_param", i)
			}
			outs[i].classification = int(k.Int64Param)
		}
	}
	if st.isImageInput(in.GetName()) {
		return g.inferImages(ctx, req, st, outs)
	}
	p, err := st.plan(inputSpec{name: in.GetName(), datatype: in.GetDatatype(), shape: in.GetShape()}, outs)
	if err != nil {
		return nil, res, err
	}
	inRef, inShm, err := grpcShmParams(in.GetParameters(), "inputs[0]")
	if err != nil {
		return nil, res, err
	}
	var outRef shmRef
	var outShm bool
	if len(req.Outputs) == 1 {
		if outRef, outShm, err = grpcShmParams(req.Outputs[0].GetParameters(), "outputs[0]"); err != nil {
			return nil, res, err
		}
	}
	classes := st.model.Info.OutputElems()
	use := shmUse{reg: &s.shm, pool: &s.reqs}
	defer use.done()
	if outShm {
		if err := use.holdOutput(outRef, p.outBytes(classes)); err != nil {
			return nil, res, err
		}
	}
	var data []byte
	var pinned bool
	if inShm {
		if len(req.RawInputContents) > 0 || in.GetContents() != nil {
			return nil, res, errorf(kindInvalid, "inputs[0] is in shared memory (parameters.%s) but the request also carries its data", paramShmRegion)
		}
		if data, pinned, err = use.input(inRef, p.bytes, st.registerHost(p.dtype)); err != nil {
			return nil, res, err
		}
	} else {
		var free *[]byte
		if data, free, err = g.inputData(req, p); err != nil {
			return nil, res, err
		}
		if free != nil {
			defer s.bufs.put(free)
		}
		pinned = s.reqs.Pinned(data)
	}
	stp := s.stampsOf(ctx)
	if stp != nil {
		stp[stepInput] = time.Now()
	}
	// The response is marshalled after this returns, so its bytes cannot
	// come from a pool.
	raw := make([]byte, p.n*classes*4)
	logits := tensor.BytesF32(raw)
	bin := batcher.Input{DType: p.dtype, N: p.n, Data: data, Pinned: pinned}
	p.ranking(&bin)
	if stp != nil {
		stp[stepSubmit] = time.Now()
	}
	res, err = p.lane.Infer(ctx, bin, logits)
	if stp != nil {
		stp[stepAnswered] = time.Now()
		stp.setResult(res)
	}
	if err != nil {
		return nil, res, err
	}
	p.postprocess(logits, classes)
	out := &kservepb.ModelInferResponse_InferOutputTensor{Name: p.out.name, Datatype: "FP32", Shape: st.output.batched(p.n)}
	if k := p.out.classification; k > 0 {
		out.Datatype, out.Shape = "BYTES", []int64{int64(p.n), int64(k)}
		var b []byte
		p.classify(st.model.Labels, func(e []byte) { b = appendBytesElem(b, e) })
		raw = b
	}
	resp := &kservepb.ModelInferResponse{
		ModelName:    s.cfg.ModelName,
		ModelVersion: s.cfg.ModelVersion,
		Id:           req.GetId(),
		Parameters:   resultParams(res),
		Outputs:      []*kservepb.ModelInferResponse_InferOutputTensor{out},
	}
	if outShm {
		n, err := use.writeOutput(raw)
		if err != nil {
			return nil, res, err
		}
		out.Parameters = map[string]*kservepb.InferParameter{
			paramShmRegion: {ParameterChoice: &kservepb.InferParameter_StringParam{StringParam: outRef.region}},
			paramShmSize:   {ParameterChoice: &kservepb.InferParameter_Int64Param{Int64Param: int64(n)}},
		}
		return resp, res, nil
	}
	resp.RawOutputContents = [][]byte{raw}
	return resp, res, nil
}

// grpcHeldBytes is what a request's tensor data holds in memory.
func grpcHeldBytes(req *kservepb.ModelInferRequest) int64 {
	var n int64
	for _, b := range req.GetRawInputContents() {
		n += int64(len(b))
	}
	for _, in := range req.GetInputs() {
		c := in.GetContents()
		n += 4 * int64(len(c.GetFp32Contents())+len(c.GetUintContents())+len(c.GetIntContents()))
		n += 8 * int64(len(c.GetFp64Contents())+len(c.GetInt64Contents())+len(c.GetUint64Contents()))
	}
	return n
}

// inputData returns the request's input bytes in p.dtype's wire layout,
// and a pooled buffer to free after the inference, if one was needed.
func (g *grpcService) inputData(req *kservepb.ModelInferRequest, p plan) ([]byte, *[]byte, error) {
	in := req.Inputs[0]
	c := in.GetContents()
	if len(req.RawInputContents) > 0 {
		if len(req.RawInputContents) != 1 {
			return nil, nil, errorf(kindInvalid, "raw_input_contents has %d entries; want one per input (1)", len(req.RawInputContents))
		}
		if c != nil {
			return nil, nil, errorf(kindInvalid, "inputs[0].contents must be empty when raw_input_contents is used")
		}
		raw := req.RawInputContents[0]
		if len(raw) != p.bytes {
			return nil, nil, errorf(kindInvalid, "raw_input_contents[0] has %d bytes; %s%v needs %d", len(raw), in.GetDatatype(), in.GetShape(), p.bytes)
		}
		// The codec aligns raw contents; a request it could not align
		// (an unusual field order) is copied so that views are safe.
		if uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%8 != 0 {
			buf := g.s.bufs.get(len(raw))
			copy(*buf, raw)
			return *buf, buf, nil
		}
		return raw, nil, nil
	}
	want := p.bytes / p.dtype.Size()
	count := func(field string, got int) error {
		if got != want {
			return errorf(kindInvalid, "inputs[0].contents.%s has %d values; %s%v needs %d", field, got, in.GetDatatype(), in.GetShape(), want)
		}
		return nil
	}
	switch p.dtype {
	case tensor.Float32:
		if err := count("fp32_contents", len(c.GetFp32Contents())); err != nil {
			return nil, nil, err
		}
		return tensor.F32Bytes(c.GetFp32Contents()), nil, nil
	case tensor.Uint8:
		v := c.GetUintContents()
		if err := count("uint_contents", len(v)); err != nil {
			return nil, nil, err
		}
		buf := g.s.bufs.get(want)
		for i, x := range v {
			if x > 255 {
				g.s.bufs.put(buf)
				return nil, nil, errorf(kindInvalid, "inputs[0].contents.uint_contents[%d] is %d; UINT8 values are 0..255", i, x)
			}
			(*buf)[i] = byte(x)
		}
		return *buf, buf, nil
	}
	return nil, nil, errorf(kindInvalid, "%s input must be sent in raw_input_contents (the protocol has no typed field for it)", in.GetDatatype())
}

// resultParams are the response parameters that tell a remote benchmark
// how the request ran on the server.
func resultParams(res batcher.Result) map[string]*kservepb.InferParameter {
	i64 := func(v int64) *kservepb.InferParameter {
		return &kservepb.InferParameter{ParameterChoice: &kservepb.InferParameter_Int64Param{Int64Param: v}}
	}
	return map[string]*kservepb.InferParameter{
		"queue_time_us":   i64(res.QueueWait.Microseconds()),
		"compute_time_us": i64(res.Compute.Microseconds()),
		"batch_size":      i64(int64(res.BatchSize)),
	}
}

// SystemSharedMemoryStatus reports registered regions (Triton's system
// shared memory extension).
func (g *grpcService) SystemSharedMemoryStatus(ctx context.Context, req *kservepb.SystemSharedMemoryStatusRequest) (*kservepb.SystemSharedMemoryStatusResponse, error) {
	st, err := g.s.shm.status(req.GetName())
	if err != nil {
		return nil, grpcError(err)
	}
	resp := &kservepb.SystemSharedMemoryStatusResponse{Regions: map[string]*kservepb.SystemSharedMemoryStatusResponse_RegionStatus{}}
	for _, r := range st {
		resp.Regions[r.Name] = &kservepb.SystemSharedMemoryStatusResponse_RegionStatus{Name: r.Name, Key: r.Key, Offset: r.Offset, ByteSize: r.ByteSize}
	}
	return resp, nil
}

// SystemSharedMemoryRegister maps a region of a client's shared memory
// object under a name requests then use.
func (g *grpcService) SystemSharedMemoryRegister(ctx context.Context, req *kservepb.SystemSharedMemoryRegisterRequest) (*kservepb.SystemSharedMemoryRegisterResponse, error) {
	if err := g.s.shm.register(req.GetName(), req.GetKey(), req.GetOffset(), req.GetByteSize()); err != nil {
		return nil, grpcError(err)
	}
	return &kservepb.SystemSharedMemoryRegisterResponse{}, nil
}

// SystemSharedMemoryUnregister forgets a region, or all of them.
func (g *grpcService) SystemSharedMemoryUnregister(ctx context.Context, req *kservepb.SystemSharedMemoryUnregisterRequest) (*kservepb.SystemSharedMemoryUnregisterResponse, error) {
	if err := g.s.shm.unregister(req.GetName()); err != nil {
		return nil, grpcError(err)
	}
	return &kservepb.SystemSharedMemoryUnregisterResponse{}, nil
}
