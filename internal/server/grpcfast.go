package server

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"goinfer/internal/h2grpc"
	"goinfer/internal/kservepb"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// GRPC transports (Config.GRPCTransport).
const (
	// GRPCTransportGRPCGo serves gRPC with gRPC-Go: every service,
	// streaming RPCs and reflection included.
	GRPCTransportGRPCGo = "grpcgo"
	// GRPCTransportH2 serves the unary methods of the inference and health
	// services with internal/h2grpc (large HTTP/2 frames, no copies in the
	// transport); streaming RPCs and reflection are handed to gRPC-Go's
	// ServeHTTP on the same connection.
	GRPCTransportH2 = "h2grpc"
)

// fastMethod is one unary method as the h2grpc transport calls it.
type fastMethod struct {
	impl any
	desc grpc.MethodDesc
	info *grpc.UnaryServerInfo
}

// newFastGRPC builds the h2grpc server for the same services, codec,
// interceptors, admission (tapInfer) and limits as the gRPC-Go one.
func (s *Server) newFastGRPC(cfg Config) *h2grpc.Server {
	methods := map[string]fastMethod{}
	add := func(sd *grpc.ServiceDesc, impl any) {
		for _, md := range sd.Methods {
			name := "/" + sd.ServiceName + "/" + md.MethodName
			methods[name] = fastMethod{impl: impl, desc: md, info: &grpc.UnaryServerInfo{Server: impl, FullMethod: name}}
		}
	}
	add(&kservepb.GRPCInferenceService_ServiceDesc, &grpcService{s: s})
	add(&healthpb.Health_ServiceDesc, s.health)
	window := windowSize(cfg.GRPCWindow)
	return &h2grpc.Server{
		// Streaming RPCs (health Watch) and reflection: gRPC-Go serves
		// them on the same connections through its ServeHTTP.
		Unary: func(method string) bool {
			_, ok := methods[method]
			return ok
		},
		Fallback:             s.grpc,
		MaxRecvMsgSize:       int(min(cfg.MaxRequestBytes, 1<<31-1)),
		MaxConcurrentStreams: cfg.GRPCMaxConcurrentStreams,
		Window:               int(window),
		// ModelInfer's message is read straight into a request buffer
		// (page-locked once the model allows), placed as the codec would
		// place it, so that decoding it copies nothing.
		Buffer: func(method string, n int, head []byte) ([]byte, func()) {
			if method != inferMethod || n == 0 {
				return nil, nil
			}
			const prefix = 5 // gRPC's message prefix, before the message
			bp := s.reqs.Get(prefix + n + kservepb.RawAlign)
			base := uintptr(unsafe.Pointer(unsafe.SliceData(*bp))) + prefix
			shift := kservepb.PlaceRequest(head, base)
			return (*bp)[shift : shift+prefix+n], func() { s.reqs.Put(bp) }
		},
		Admit: func(ctx context.Context, method string) (context.Context, error) {
			return s.tapInfer(ctx, &tap.Info{FullMethodName: method})
		},
		Handler: func(ctx context.Context, method string, msg []byte) ([][]byte, func(), error) {
			m, ok := methods[method]
			if !ok {
				return nil, nil, status.Errorf(codes.Unimplemented, "unknown method %s", method)
			}
			dec := func(v any) error {
				if req, ok := v.(*kservepb.ModelInferRequest); ok && s.placed(msg) {
					return s.codec.UnmarshalPlaced(msg, req)
				}
				return s.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(msg)}, v)
			}
			resp, err := m.desc.Handler(m.impl, ctx, dec, s.fastInterceptor)
			if err != nil {
				return nil, nil, err
			}
			bs, err := s.codec.Marshal(resp)
			if err != nil {
				return nil, nil, status.Errorf(codes.Internal, "marshal %s reply: %v", method, err)
			}
			parts := make([][]byte, len(bs))
			for i, b := range bs {
				parts[i] = b.ReadOnlyData()
			}
			if st := s.stampsOf(ctx); st != nil && method == inferMethod {
				// done runs once the answer is written.
				st[stepEncoded] = time.Now()
				return parts, func() {
					bs.Free()
					st[stepWritten] = time.Now()
					s.breakdown.record("h2grpc", st)
				}, nil
			}
			return parts, bs.Free, nil
		},
	}
}

// placed reports whether an h2grpc message lies where the codec would have
// gathered it: its tensor aligned, and in page-locked memory when the
// model gave the server a pinned pool. The message stays valid until the
// handler returns, longer than the codec's own buffer would (released when
// ModelInfer returns).
func (s *Server) placed(msg []byte) bool {
	if !kservepb.Placed(msg) {
		return false
	}
	return s.reqs.pinned.Load() == nil || s.reqs.Pinned(msg)
}

// fastInterceptor chains the gRPC-Go server's unary interceptors.
func (s *Server) fastInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return s.codec.UnaryServerInterceptor(ctx, req, info, func(ctx context.Context, req any) (any, error) {
		return s.recoverUnary(ctx, req, info, handler)
	})
}

func checkGRPCTransport(t string) error {
	switch t {
	case "", GRPCTransportGRPCGo, GRPCTransportH2:
		return nil
	}
	return fmt.Errorf("server: gRPC transport %q: want %s or %s", t, GRPCTransportGRPCGo, GRPCTransportH2)
}
