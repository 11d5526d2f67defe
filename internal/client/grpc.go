package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"goinfer/internal/busypoll"
	"goinfer/internal/kservepb"
	"goinfer/internal/tensor"
)

// grpcTransport speaks inference.GRPCInferenceService over several
// connections, round robin.
type grpcTransport struct {
	codec   kservepb.Codec
	conns   []*grpc.ClientConn
	clients []kservepb.GRPCInferenceServiceClient
	next    atomic.Uint64
	fast    *h2Conns // inference calls over h2grpc when set (Options.GRPCTransport)
}

func newGRPCTransport(host string, opts Options) (*grpcTransport, error) {
	t := &grpcTransport{}
	switch opts.GRPCTransport {
	case "", GRPCGo:
	case GRPCH2:
		t.fast = &h2Conns{host: host, opts: opts, max: max(opts.MaxInflight, 1)}
	default:
		return nil, fmt.Errorf("gRPC transport %q: want %s or %s", opts.GRPCTransport, GRPCGo, GRPCH2)
	}
	dopts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30),
			grpc.ForceCodecV2(&t.codec)), // sends raw_input_contents without copying it
		grpc.WithReadBufferSize(bufferSize(opts.GRPCReadBuffer)),
		grpc.WithWriteBufferSize(bufferSize(opts.GRPCWriteBuffer)),
	}
	if opts.BusyPoll > 0 || opts.SocketBuffer > 0 {
		dopts = append(dopts, grpc.WithContextDialer(tunedDialer(opts)))
	}
	switch w := opts.GRPCWindow; {
	case w == 0:
		dopts = append(dopts, grpc.WithInitialWindowSize(defaultGRPCWindow), grpc.WithInitialConnWindowSize(defaultGRPCWindow))
	case w > 0:
		dopts = append(dopts, grpc.WithInitialWindowSize(w), grpc.WithInitialConnWindowSize(w))
	}
	for range opts.Conns {
		conn, err := grpc.NewClient(host, dopts...)
		if err != nil {
			t.close()
			return nil, fmt.Errorf("grpc://%s: %w", host, err)
		}
		t.conns = append(t.conns, conn)
		t.clients = append(t.clients, kservepb.NewGRPCInferenceServiceClient(conn))
	}
	return t, nil
}

// defaultGRPCWindow is Options.GRPCWindow's default: tensors are hundreds
// of kilobytes, and a response no larger than the window never waits on a
// flow-control round trip.
const defaultGRPCWindow = 16 << 20

// bufferSize maps Options' buffer sizes to gRPC's: 0 is 1 MiB, negative
// is none (gRPC's 0).
func bufferSize(n int) int {
	switch {
	case n == 0:
		return 1 << 20
	case n < 0:
		return 0
	}
	return n
}

func (t *grpcTransport) client() kservepb.GRPCInferenceServiceClient {
	return t.clients[t.next.Add(1)%uint64(len(t.clients))]
}

func (t *grpcTransport) close() error {
	var errs []error
	for _, c := range t.conns {
		errs = append(errs, c.Close())
	}
	if t.fast != nil {
		t.fast.close()
	}
	return errors.Join(errs...)
}

// grpcErr turns a status error into a ServerError.
func grpcErr(err error) error {
	if s, ok := status.FromError(err); ok && err != nil {
		return &ServerError{Code: s.Code(), Message: s.Message()}
	}
	return err
}

// resolveModel asks for the metadata of the model named "": goinfer
// answers with the one model it serves.
func (t *grpcTransport) resolveModel(ctx context.Context) (string, error) {
	md, err := t.client().ModelMetadata(ctx, &kservepb.ModelMetadataRequest{})
	if err != nil {
		return "", grpcErr(err)
	}
	return md.Name, nil
}

func (t *grpcTransport) metadata(ctx context.Context, model string) (Metadata, error) {
	var md Metadata
	c := t.client()
	sm, err := c.ServerMetadata(ctx, &kservepb.ServerMetadataRequest{})
	if err != nil {
		return md, grpcErr(err)
	}
	md.Server, md.ServerVersion = sm.Name, sm.Version
	mm, err := c.ModelMetadata(ctx, &kservepb.ModelMetadataRequest{Name: model})
	if err != nil {
		return md, grpcErr(err)
	}
	ti, img, err := pickInputs(model, len(mm.Inputs), len(mm.Outputs), func(i int) string { return mm.Inputs[i].Datatype })
	if err != nil {
		return md, err
	}
	in, out := mm.Inputs[ti], mm.Outputs[0]
	metadataFrom(&md, mm.Name, mm.Platform, mm.Versions, in.Name, in.Datatype, in.Shape, out.Name, out.Shape)
	if img >= 0 {
		md.ImageInput = mm.Inputs[img].Name
	}
	for _, o := range mm.Outputs {
		md.Outputs = append(md.Outputs, o.Name)
	}
	return md, nil
}

func (t *grpcTransport) modelReady(ctx context.Context, model string) (bool, error) {
	r, err := t.client().ModelReady(ctx, &kservepb.ModelReadyRequest{Name: model})
	if err != nil {
		return false, grpcErr(err)
	}
	return r.Ready, nil
}

// newInferRequest is a ModelInferRequest for in, without its data: one
// input named and shaped as in, one output.
func newInferRequest(c *Client, in *tensor.Tensor) (*kservepb.ModelInferRequest, error) {
	dt, err := wireName(in.DType)
	if err != nil {
		return nil, err
	}
	names := c.names()
	shape := make([]int64, len(in.Shape))
	for i, d := range in.Shape {
		shape[i] = int64(d)
	}
	return &kservepb.ModelInferRequest{
		ModelName: c.model,
		Inputs:    []*kservepb.ModelInferRequest_InferInputTensor{{Name: names.in, Datatype: dt, Shape: shape}},
		Outputs:   []*kservepb.ModelInferRequest_InferRequestedOutputTensor{{Name: names.out}},
	}, nil
}

func (t *grpcTransport) infer(ctx context.Context, c *Client, in *tensor.Tensor, out []float32) (result, error) {
	var r result
	req, err := newInferRequest(c, in)
	if err != nil {
		return r, err
	}
	req.RawInputContents = [][]byte{in.Data}
	var resp *kservepb.ModelInferResponse
	if t.fast != nil {
		resp, err = t.modelInferH2(ctx, req)
	} else {
		resp, err = t.client().ModelInfer(ctx, req)
	}
	if err != nil {
		return r, grpcErr(err)
	}
	n, err := grpcOutputLen(resp)
	if err != nil {
		return r, err
	}
	var src []float32
	switch {
	case len(resp.RawOutputContents) == 1:
		raw := resp.RawOutputContents[0]
		if len(raw) != 4*n {
			return r, fmt.Errorf("response raw_output_contents has %d bytes; shape %v needs %d", len(raw), resp.Outputs[0].Shape, 4*n)
		}
		src = tensor.BytesF32(raw) // unmarshalled bytes are aligned
	case len(resp.Outputs[0].GetContents().GetFp32Contents()) == n:
		src = resp.Outputs[0].GetContents().GetFp32Contents()
	default:
		return r, fmt.Errorf("response carries no logits for shape %v", resp.Outputs[0].Shape)
	}
	if len(out) >= n {
		r.logits = out[:n]
		copy(r.logits, src)
	} else {
		r.logits = src
	}
	r.queue, r.compute, r.batchSize = grpcServerParams(resp)
	return r, nil
}

// grpcOutputLen checks that a response has the one FP32 output expected
// and returns its number of values.
func grpcOutputLen(resp *kservepb.ModelInferResponse) (int, error) {
	if len(resp.Outputs) != 1 || resp.Outputs[0].Datatype != "FP32" {
		return 0, fmt.Errorf("response has %d outputs; want one FP32 tensor", len(resp.Outputs))
	}
	n := 1
	for _, d := range resp.Outputs[0].Shape {
		n *= int(d)
	}
	if n <= 0 || n > 1<<28 {
		return 0, fmt.Errorf("response output shape %v is not valid", resp.Outputs[0].Shape)
	}
	return n, nil
}

func grpcServerParams(resp *kservepb.ModelInferResponse) (queue, compute time.Duration, batch int) {
	return serverParams(func(k string) (int64, bool) {
		p, ok := resp.Parameters[k]
		if !ok {
			return 0, false
		}
		v, ok := p.GetParameterChoice().(*kservepb.InferParameter_Int64Param)
		if !ok {
			return 0, false
		}
		return v.Int64Param, true
	})
}

// grpcSHMParams caches the tensor parameters naming one place in shared
// memory, so that a request to the same place as the last one builds no
// map. Requests may share it concurrently: a cached set is never changed.
type grpcSHMParams struct {
	p atomic.Pointer[grpcSHMParamSet]
}

type grpcSHMParamSet struct {
	region    string
	off, size int64
	m         map[string]*kservepb.InferParameter
}

// get returns the parameters for st, from the cache when they are there.
func (c *grpcSHMParams) get(st shmTensor) map[string]*kservepb.InferParameter {
	if ps := c.p.Load(); ps != nil && ps.region == st.region && ps.off == st.off && ps.size == st.size {
		return ps.m
	}
	m := map[string]*kservepb.InferParameter{
		paramSHMRegion:   {ParameterChoice: &kservepb.InferParameter_StringParam{StringParam: st.region}},
		paramSHMByteSize: {ParameterChoice: &kservepb.InferParameter_Int64Param{Int64Param: st.size}},
	}
	if st.off != 0 {
		m[paramSHMOffset] = &kservepb.InferParameter{ParameterChoice: &kservepb.InferParameter_Int64Param{Int64Param: st.off}}
	}
	c.p.Store(&grpcSHMParamSet{region: st.region, off: st.off, size: st.size, m: m})
	return m
}

func (t *grpcTransport) inferSHM(ctx context.Context, c *Client, in *tensor.Tensor, place shmIO) (result, int, error) {
	var r result
	req, err := newInferRequest(c, in)
	if err != nil {
		return r, 0, err
	}
	req.Inputs[0].Parameters = place.in.grpc.get(place.in)
	req.Outputs[0].Parameters = place.out.grpc.get(place.out)
	resp, err := t.client().ModelInfer(ctx, req)
	if err != nil {
		return r, 0, grpcErr(err)
	}
	n, err := grpcOutputLen(resp)
	if err != nil {
		return r, 0, err
	}
	if len(resp.RawOutputContents) > 0 || resp.Outputs[0].Contents != nil {
		return r, 0, fmt.Errorf("response carries the logits in the message; the server did not write them to shared memory region %q", place.out.region)
	}
	r.queue, r.compute, r.batchSize = grpcServerParams(resp)
	return r, n, nil
}

func (t *grpcTransport) registerSHM(ctx context.Context, r SharedMemoryRegion) error {
	_, err := t.client().SystemSharedMemoryRegister(ctx, &kservepb.SystemSharedMemoryRegisterRequest{
		Name: r.Name, Key: r.Key, Offset: r.Offset, ByteSize: r.ByteSize,
	})
	return grpcErr(err)
}

func (t *grpcTransport) unregisterSHM(ctx context.Context, name string) error {
	_, err := t.client().SystemSharedMemoryUnregister(ctx, &kservepb.SystemSharedMemoryUnregisterRequest{Name: name})
	return grpcErr(err)
}

func (t *grpcTransport) statusSHM(ctx context.Context) ([]SharedMemoryRegion, error) {
	resp, err := t.client().SystemSharedMemoryStatus(ctx, &kservepb.SystemSharedMemoryStatusRequest{})
	if err != nil {
		return nil, grpcErr(err)
	}
	rs := make([]SharedMemoryRegion, 0, len(resp.Regions))
	for name, r := range resp.Regions {
		if r.Name != "" {
			name = r.Name
		}
		rs = append(rs, SharedMemoryRegion{Name: name, Key: r.Key, Offset: r.Offset, ByteSize: r.ByteSize})
	}
	return rs, nil
}

// tunedDialer dials gRPC connections with opts' BusyPoll and SocketBuffer.
func tunedDialer(opts Options) func(context.Context, string) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		if err := busypoll.SetBuffers(c, opts.SocketBuffer); err != nil {
			c.Close()
			return nil, err
		}
		return busypoll.Wrap(c, opts.BusyPoll), nil
	}
}
