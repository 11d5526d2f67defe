package client

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc/mem"

	"goinfer/internal/h2grpc"
	"goinfer/internal/kservepb"
)

// GRPC transports for inference calls (Options.GRPCTransport).
const (
	// GRPCGo sends inference calls with gRPC-Go (default).
	GRPCGo = "grpcgo"
	// GRPCH2 sends inference calls with internal/h2grpc: one call at a
	// time per connection, large HTTP/2 frames, the tensor written from
	// the caller's memory. Other calls (metadata, readiness, shared
	// memory) still use gRPC-Go.
	GRPCH2 = "h2grpc"
)

const inferMethod = "/inference.GRPCInferenceService/ModelInfer"

// h2Conns keeps idle h2grpc connections (one call each at a time) and
// dials another when none is idle.
type h2Conns struct {
	host string
	opts Options
	max  int // idle connections kept
	mu   sync.Mutex
	idle []*h2grpc.ClientConn
}

func (p *h2Conns) get(ctx context.Context) (*h2grpc.ClientConn, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		cc := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return cc, nil
	}
	p.mu.Unlock()
	nc, err := tunedDialer(p.opts)(ctx, p.host)
	if err != nil {
		return nil, fmt.Errorf("grpc://%s: %w", p.host, err)
	}
	cc, err := h2grpc.NewClientConn(nc, p.host, h2grpc.ClientOptions{MaxRecvMsgSize: 1 << 30})
	if err != nil {
		return nil, fmt.Errorf("grpc://%s: %w", p.host, err)
	}
	return cc, nil
}

// put keeps cc for the next call, or closes it when it cannot carry one
// or enough are idle.
func (p *h2Conns) put(cc *h2grpc.ClientConn) {
	if cc.Err() == nil {
		p.mu.Lock()
		if len(p.idle) < p.max {
			p.idle = append(p.idle, cc)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	cc.Close()
}

func (p *h2Conns) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cc := range p.idle {
		cc.Close()
	}
	p.idle = nil
}

// modelInferH2 is ModelInfer over h2grpc: the request is marshalled by the
// codec (raw_input_contents not copied) and written with one writev.
func (t *grpcTransport) modelInferH2(ctx context.Context, req *kservepb.ModelInferRequest) (*kservepb.ModelInferResponse, error) {
	bs, err := t.codec.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("marshal ModelInferRequest: %w", err)
	}
	defer bs.Free()
	parts := make([][]byte, len(bs))
	for i, b := range bs {
		parts[i] = b.ReadOnlyData()
	}
	cc, err := t.fast.get(ctx)
	if err != nil {
		return nil, err
	}
	reply, err := cc.Invoke(ctx, inferMethod, parts, nil)
	t.fast.put(cc)
	if err != nil {
		return nil, err
	}
	resp := new(kservepb.ModelInferResponse)
	if err := t.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(reply)}, resp); err != nil {
		return nil, fmt.Errorf("unmarshal ModelInferResponse: %w", err)
	}
	return resp, nil
}
