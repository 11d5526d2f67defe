package server_test

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"goinfer/internal/kservepb"
	"goinfer/internal/server"
	"goinfer/internal/server/servertest"
)

// TestH2GRPCTransport runs the gRPC tests with gRPC-Go clients against
// the h2grpc transport (serve --grpc_transport h2grpc): answers, error
// codes, malformed messages, queue-full and deadlines, wire compatibility,
// the pinned receive path.
func TestH2GRPCTransport(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"Infer", TestGRPCInfer},
		{"Errors", TestGRPCErrors},
		{"QueueFullAndDeadline", TestGRPCQueueFullAndDeadline},
		{"WireCompatibility", TestGRPCWireCompatibility},
		{"MalformedMessage", TestGRPCMalformedMessage},
		// Messages read straight into the pinned request pool.
		{"PinnedReceivePath", TestPinnedReceivePath},
		{"PinnedBuffersOutliveCancelledRequests", TestPinnedBuffersOutliveCancelledRequests},
	} {
		t.Run(tc.name, func(t *testing.T) {
			servertest.GRPCTransport = server.GRPCTransportH2
			t.Cleanup(func() { servertest.GRPCTransport = "" })
			tc.test(t)
		})
	}
}

// reset waits up to within for RST_STREAM on stream 1 and returns its
// code; ok is false when none came.
func (h *grpcHolder) reset(within time.Duration) (code http2.ErrCode, ok bool) {
	h.conn.SetReadDeadline(time.Now().Add(within))
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return 0, false
		}
		if r, isRST := f.(*http2.RSTStreamFrame); isRST && r.StreamID == 1 {
			return r.ErrCode, true
		}
	}
}

// TestH2GRPCReadTimeout: on the h2grpc transport, --read_timeout cuts off
// a message that stalls after its prefix or trickles in: the stream is
// reset (CANCEL), so that the server drops the message's buffer with its
// budget reservation, and later calls are answered.
func TestH2GRPCReadTimeout(t *testing.T) {
	servertest.GRPCTransport = server.GRPCTransportH2
	t.Cleanup(func() { servertest.GRPCTransport = "" })
	const readTimeout = 300 * time.Millisecond
	s := servertest.Start(t, servertest.Options{Server: func(c *server.Config) {
		c.MaxRequestBytes = 4 << 20
		c.MaxInflightBytes = 8 << 20
		c.ReadTimeout = readTimeout
	}})
	for _, trickle := range []bool{false, true} {
		start := time.Now()
		h := startGRPCHolder(t, s.GRPCAddr, 4<<20, 1<<10)
		stop := make(chan struct{})
		if trickle {
			go func() {
				// One DATA frame of one byte on stream 1.
				one := []byte{0, 0, 1, byte(http2.FrameData), 0, 0, 0, 0, 1, 7}
				for {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
						h.conn.Write(one)
					}
				}
			}()
		}
		code, ok := h.reset(5 * time.Second)
		close(stop)
		if !ok || code != http2.ErrCodeCancel {
			t.Fatalf("trickle %v: RST_STREAM %v (received: %v), want CANCEL", trickle, code, ok)
		}
		if el := time.Since(start); el < readTimeout {
			t.Errorf("trickle %v: reset after %v, before --read_timeout", trickle, el)
		}
		waitMetric(t, s, budgetMetric, 0)
	}
	x := randImages(2, 16, 31)
	cl := kservepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.GRPCAddr))
	if _, err := cl.ModelInfer(ctxT(t), rawInfer(x, 2)); err != nil {
		t.Fatalf("after the cut-off messages: %v", err)
	}
}

// TestH2GRPCFallback: on the h2grpc transport, the calls it does not serve
// itself (reflection's bidirectional stream, health's Watch) reach
// gRPC-Go through the same connection as the unary calls, and a Watch the
// client cancels ends.
func TestH2GRPCFallback(t *testing.T) {
	servertest.GRPCTransport = server.GRPCTransportH2
	t.Cleanup(func() { servertest.GRPCTransport = "" })
	s := servertest.Start(t, servertest.Options{})
	conn := dialGRPC(t, s.GRPCAddr)
	ctx := ctxT(t)

	refl, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // two requests on one stream
		if err := refl.Send(&reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		resp, err := refl.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, svc := range resp.GetListServicesResponse().GetService() {
			names = append(names, svc.GetName())
		}
		if !slices.Contains(names, "inference.GRPCInferenceService") {
			t.Fatalf("reflection lists %v, without inference.GRPCInferenceService", names)
		}
	}
	if err := refl.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := refl.Recv(); err != io.EOF {
		t.Fatalf("after CloseSend: %v, want io.EOF", err)
	}

	wctx, cancel := context.WithCancel(ctx)
	watch, err := healthpb.NewHealthClient(conn).Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := watch.Recv(); err != nil || st.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch: %v, %v; want SERVING", st, err)
	}
	cancel()
	if _, err := watch.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("Watch after cancel: %v, want Canceled", err)
	}

	// The unary calls on the same connection still work.
	resp, err := kservepb.NewGRPCInferenceServiceClient(conn).ModelInfer(ctx, rawInfer(randImages(1, 16, 5), 1))
	if err != nil || len(resp.RawOutputContents) != 1 {
		t.Fatalf("ModelInfer after the streams: %v", err)
	}
}
