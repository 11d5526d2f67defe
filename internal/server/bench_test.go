package server_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"goinfer/internal/backend"
	"goinfer/internal/client"
	"goinfer/internal/engine"
	"goinfer/internal/kservepb"
	"goinfer/internal/server"
	"goinfer/internal/server/batcher"
	"goinfer/internal/shm"
	"goinfer/internal/tensor"
)

// instantBackend answers every batch at once with zero logits. It stands
// in for the device only in the benchmarks below, which measure what the
// server itself adds: decoding, batching, copies, encoding, the sockets.
type instantBackend struct{ classes int }

func (n instantBackend) Submit(req backend.Request) error {
	k := req.Input.Shape[0] * n.classes
	req.Reply <- backend.Response{ID: req.ID, Logits: req.Output[:k], N: req.Input.Shape[0], Classes: n.classes, DoneAt: time.Now()}
	return nil
}

// startInstant serves a 1000-class model of size x size FP32 images.
func startInstant(b *testing.B, size int, cfg server.Config) (httpAddr, grpcAddr string) {
	b.Helper()
	return startInstantDType(b, size, tensor.Float32, cfg)
}

// startInstantDType serves a 1000-class model of size x size images whose
// engine takes dtype.
func startInstantDType(b *testing.B, size int, dtype tensor.DType, cfg server.Config) (httpAddr, grpcAddr string) {
	b.Helper()
	cfg.ModelName, cfg.Logger = "m", slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	bt, err := batcher.New(instantBackend{1000}, batcher.Config{Channels: 3, Height: size, Width: size, DType: dtype,
		Classes: 1000, MaxBatch: 64, MaxDelay: 2 * time.Millisecond, IdleDispatch: true, MaxQueue: 1024, MaxInflight: 8,
		Observe: srv.ObserveBatch})
	if err != nil {
		b.Fatal(err)
	}
	info := engine.Info{Engine: "none", MaxBatch: 256}
	info.Inputs, info.Outputs = engine.ClassifierSpecs(dtype, 3, size, size, 1000)
	if err := srv.SetModel(&server.Model{Info: info, Lanes: []server.Lane{{Height: size, Width: size, Batcher: bt}}}); err != nil {
		b.Fatal(err)
	}
	hl, _ := net.Listen("tcp", "127.0.0.1:0")
	gl, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, hl, gl) }()
	b.Cleanup(func() { cancel(); <-done })
	return hl.Addr().String(), gl.Addr().String()
}

// BenchmarkProtocol measures the server's own cost per request of one
// 250x250 FP32 image (750 KB) over loopback, with the client bench --url
// uses: p50 latency at concurrency 1, throughput at concurrency 64.
// The +shm variants pass the tensors through system shared memory (Linux).
// gRPC runs over h2grpc at both ends, as serve and bench do by default.
func BenchmarkProtocol(b *testing.B) {
	httpAddr, grpcAddr := startInstant(b, 250, server.Config{AllowSharedMemory: true, GRPCTransport: server.GRPCTransportH2})
	for _, proto := range []struct{ name, url string }{{"http", "http://" + httpAddr}, {"grpc", "grpc://" + grpcAddr}} {
		for _, useShm := range []bool{false, true} {
			if useShm && !shm.Supported() {
				continue
			}
			name := proto.name
			if useShm {
				name += "+shm"
			}
			for _, conc := range []int{1, 64} {
				b.Run(name+"/c"+itoa(conc), func(b *testing.B) {
					benchInfer(b, proto.url, client.Options{MaxInflight: conc, SharedMemory: useShm, GRPCTransport: client.GRPCH2}, conc)
				})
			}
		}
	}
}

// BenchmarkRoundTripFloor times the smallest request of each protocol
// (liveness) at concurrency 1: what a round trip over loopback costs on
// this machine with nothing to carry or compute.
func BenchmarkRoundTripFloor(b *testing.B) {
	httpAddr, grpcAddr := startInstant(b, 250, server.Config{})
	b.Run("grpc", func(b *testing.B) {
		c := kservepb.NewGRPCInferenceServiceClient(dialGRPCTB(b, grpcAddr))
		floor(b, func() error {
			_, err := c.ServerLive(context.Background(), &kservepb.ServerLiveRequest{})
			return err
		})
	})
	b.Run("http", func(b *testing.B) {
		hc := &http.Client{Transport: &http.Transport{Proxy: nil}}
		floor(b, func() error {
			resp, err := hc.Get("http://" + httpAddr + "/v2/health/live")
			if err != nil {
				return err
			}
			io.Copy(io.Discard, resp.Body)
			return resp.Body.Close()
		})
	})
}

func floor(b *testing.B, call func() error) {
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		if err := call(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-us")
}

// BenchmarkGRPCBuffers compares sizes of the buffers between gRPC's framer
// and the socket (server read, client write: the request's direction),
// which decide how many times a request's bytes are copied in user space.
func BenchmarkGRPCBuffers(b *testing.B) {
	for _, v := range []struct {
		name string
		size int
	}{{"1MiB", 0}, {"64KiB", 64 << 10}, {"none", -1}} {
		_, grpcAddr := startInstant(b, 250, server.Config{GRPCReadBuffer: v.size, GRPCWriteBuffer: v.size})
		for _, conc := range []int{1, 64} {
			b.Run(v.name+"/c"+itoa(conc), func(b *testing.B) {
				benchInfer(b, "grpc://"+grpcAddr, client.Options{MaxInflight: conc, GRPCReadBuffer: v.size, GRPCWriteBuffer: v.size}, conc)
			})
		}
	}
}

// benchInfer sends b.N single 250x250 FP32 images from conc goroutines and
// reports p50 and p99 latency and throughput.
func benchInfer(b *testing.B, url string, opts client.Options, conc int) {
	benchInferDType(b, url, opts, conc, tensor.Float32)
}

// benchInferDType is benchInfer with images of dtype.
func benchInferDType(b *testing.B, url string, opts client.Options, conc int, dtype tensor.DType) {
	in := tensor.New(dtype, 1, 3, 250, 250)
	c, err := client.DialOptions(context.Background(), url, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	lat := make([][]time.Duration, conc)
	var wg sync.WaitGroup
	b.SetBytes(int64(len(in.Data)))
	b.ResetTimer()
	start := time.Now()
	for w := range conc {
		wg.Go(func() {
			out := make([]float32, 1000)
			for i := w; i < b.N; i += conc {
				t0 := time.Now()
				if _, err := c.Infer(context.Background(), in, out); err != nil {
					b.Error(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-us")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-us")
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "img/s")
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}
