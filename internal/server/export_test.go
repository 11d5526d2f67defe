package server

import "context"

// UnaryInvoker returns a function that calls a unary gRPC method of s
// without a connection: the admission check (tapInfer), the server's codec
// decoding msg, its unary interceptors and the method, exactly as the
// h2grpc transport calls them once a message has arrived; it returns the
// encoded reply. Fuzz targets use it to reach the decoder and the handlers
// thousands of times a second; the transports have their own tests and
// fuzz target (h2grpc's FuzzServerConn).
func (s *Server) UnaryInvoker() func(ctx context.Context, method string, msg []byte) ([]byte, error) {
	fast := s.newFastGRPC(s.cfg)
	return func(ctx context.Context, method string, msg []byte) ([]byte, error) {
		// The RPC's context ends with the call, as a stream's does: that
		// is what gives back tapInfer's receive reservation.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ctx, err := fast.Admit(ctx, method)
		if err != nil {
			return nil, err
		}
		parts, done, err := fast.Handler(ctx, method, msg)
		if err != nil {
			return nil, err
		}
		defer done()
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out, nil
	}
}
