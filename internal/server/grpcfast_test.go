package server_test

import (
	"testing"

	"goinfer/internal/server"
	"goinfer/internal/server/servertest"
)

// TestH2GRPCTransport runs the gRPC tests with gRPC-Go clients against
// the h2grpc transport (serve --grpc_transport h2grpc): answers, error
// codes, malformed messages, queue-full and deadlines, wire compatibility.
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			servertest.GRPCTransport = server.GRPCTransportH2
			t.Cleanup(func() { servertest.GRPCTransport = "" })
			tc.test(t)
		})
	}
}
