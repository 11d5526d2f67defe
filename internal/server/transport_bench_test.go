package server_test

import (
	"testing"

	"goinfer/internal/client"
	"goinfer/internal/server"
	"goinfer/internal/tensor"
)

// BenchmarkGRPCWindow compares HTTP/2 flow-control windows, the same at
// both ends: gRPC-Go's own (64 KiB, grown by its bandwidth estimator),
// 1 MiB (a little over one 750 KB request) and the default 16 MiB.
func BenchmarkGRPCWindow(b *testing.B) {
	for _, v := range []struct {
		name   string
		window int32
	}{{"grpc-go", -1}, {"1MiB", 1 << 20}, {"16MiB", 0}} {
		_, grpcAddr := startInstant(b, 250, server.Config{GRPCWindow: v.window})
		for _, conc := range []int{1, 64} {
			b.Run(v.name+"/c"+itoa(conc), func(b *testing.B) {
				benchInfer(b, "grpc://"+grpcAddr, client.Options{MaxInflight: conc, GRPCWindow: v.window}, conc)
			})
		}
	}
}

// BenchmarkHTTPClient compares the client's HTTP clients for inference
// requests: its lean HTTP/1.1 one (BenchmarkProtocol's) and net/http.
func BenchmarkHTTPClient(b *testing.B) {
	httpAddr, _ := startInstant(b, 250, server.Config{})
	for _, hc := range []string{client.HTTPLean, client.HTTPNetHTTP} {
		for _, conc := range []int{1, 64} {
			b.Run(hc+"/c"+itoa(conc), func(b *testing.B) {
				benchInfer(b, "http://"+httpAddr, client.Options{MaxInflight: conc, HTTPClient: hc}, conc)
			})
		}
	}
}

// BenchmarkProtocolDType sends the 250x250 images as FP16 (375 KB) and
// UINT8 pixels (188 KB) to an engine that takes them as they are: what
// fewer bytes in the messages save.
func BenchmarkProtocolDType(b *testing.B) {
	for _, dt := range []tensor.DType{tensor.Float16, tensor.Uint8} {
		httpAddr, grpcAddr := startInstantDType(b, 250, dt, server.Config{})
		for _, proto := range []struct{ name, url string }{{"http", "http://" + httpAddr}, {"grpc", "grpc://" + grpcAddr}} {
			b.Run(dt.String()+"/"+proto.name+"/c1", func(b *testing.B) {
				benchInferDType(b, proto.url, client.Options{MaxInflight: 1}, 1, dt)
			})
		}
	}
}

// BenchmarkGRPCTransport compares gRPC-Go and h2grpc on each end for
// 250x250 FP32 requests (serve/bench --grpc_transport), with the lean
// HTTP/1.1 client for reference.
func BenchmarkGRPCTransport(b *testing.B) {
	httpAddr, grpcgoAddr := startInstant(b, 250, server.Config{})
	_, h2Addr := startInstant(b, 250, server.Config{GRPCTransport: server.GRPCTransportH2})
	for _, v := range []struct{ name, addr, client string }{
		{"grpcgo-server/grpcgo-client", grpcgoAddr, client.GRPCGo},
		{"grpcgo-server/h2grpc-client", grpcgoAddr, client.GRPCH2},
		{"h2grpc-server/grpcgo-client", h2Addr, client.GRPCGo},
		{"h2grpc-server/h2grpc-client", h2Addr, client.GRPCH2},
	} {
		for _, conc := range []int{1, 64} {
			b.Run(v.name+"/c"+itoa(conc), func(b *testing.B) {
				benchInfer(b, "grpc://"+v.addr, client.Options{MaxInflight: conc, GRPCTransport: v.client}, conc)
			})
		}
	}
	b.Run("http-lean/c1", func(b *testing.B) {
		benchInfer(b, "http://"+httpAddr, client.Options{MaxInflight: 1}, 1)
	})
}

// BenchmarkHTTPTransport compares the server's HTTP transports for
// 250x250 FP32 requests from the lean client: internal/h1's fast loop and
// net/http alone (serve --http_transport).
func BenchmarkHTTPTransport(b *testing.B) {
	for _, t := range []string{server.HTTPTransportFast, server.HTTPTransportNetHTTP} {
		httpAddr, _ := startInstant(b, 250, server.Config{HTTPTransport: t})
		for _, conc := range []int{1, 64} {
			b.Run(t+"/c"+itoa(conc), func(b *testing.B) {
				benchInfer(b, "http://"+httpAddr, client.Options{MaxInflight: conc}, conc)
			})
		}
	}
}
