package main

import (
	"flag"
	"fmt"
	"math"
)

// grpcFlags are the gRPC transport sizes that serve and bench --url share:
// large tensors cross HTTP/2 flow control and the buffers between gRPC's
// framer and the socket, so both ends take the same settings.
type grpcFlags struct {
	window      int64
	readBuffer  int
	writeBuffer int
	transport   string
}

// Defaults of the gRPC transport flags (the server and client packages'
// defaults too).
const (
	defaultGRPCWindow = 16 << 20
	defaultGRPCBuffer = 1 << 20
	minGRPCWindow     = 64 << 10 // HTTP/2's initial window; gRPC-Go ignores smaller ones
)

func (g *grpcFlags) register(fs *flag.FlagSet, side string) {
	fs.Int64Var(&g.window, "grpc_window_bytes", defaultGRPCWindow, fmt.Sprintf("gRPC HTTP/2 flow-control window in `BYTES` the %s grants, per stream and per connection: a request larger than the peer's window waits a round trip for WINDOW_UPDATE (0: gRPC-Go's 64 KiB windows, grown by its bandwidth estimator)", side))
	fs.IntVar(&g.readBuffer, "grpc_read_buffer_bytes", defaultGRPCBuffer, fmt.Sprintf("buffer in `BYTES` between the %s's socket and gRPC's HTTP/2 frame reader (0: none, frames are read from the socket directly)", side))
	fs.StringVar(&g.transport, "grpc_transport", "h2grpc", fmt.Sprintf("`TRANSPORT` of the %s's gRPC inference calls: h2grpc (goinfer's unary calls over HTTP/2 with 16 MiB frames and no transport copies, for latency; the server hands streaming RPCs and reflection to gRPC-Go on the same port, and bench sends only ModelInfer over it) or grpcgo (gRPC-Go for everything)", side))
	fs.IntVar(&g.writeBuffer, "grpc_write_buffer_bytes", defaultGRPCBuffer, fmt.Sprintf("buffer in `BYTES` between gRPC's HTTP/2 frame writer and the %s's socket (0: none, each frame is a write)", side))
}

// check validates the values; its errors are usage errors.
func (g *grpcFlags) check() error {
	switch {
	case g.window != 0 && (g.window < minGRPCWindow || g.window > math.MaxInt32):
		return fmt.Errorf("--grpc_window_bytes %d: want 0 or %d to %d", g.window, minGRPCWindow, math.MaxInt32)
	case g.readBuffer < 0:
		return fmt.Errorf("--grpc_read_buffer_bytes %d: must not be negative", g.readBuffer)
	case g.writeBuffer < 0:
		return fmt.Errorf("--grpc_write_buffer_bytes %d: must not be negative", g.writeBuffer)
	case g.transport != "grpcgo" && g.transport != "h2grpc":
		return fmt.Errorf("--grpc_transport %q: want grpcgo or h2grpc", g.transport)
	}
	return nil
}

// The server and client packages read 0 as their default and a negative
// value as "none" (gRPC-Go's own window, no buffer); the flags say 0 for
// none, their defaults being explicit.

func (g *grpcFlags) windowOption() int32 {
	if g.window == 0 {
		return -1
	}
	return int32(g.window)
}

func bufferOption(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

func (g *grpcFlags) readBufferOption() int  { return bufferOption(g.readBuffer) }
func (g *grpcFlags) writeBufferOption() int { return bufferOption(g.writeBuffer) }
