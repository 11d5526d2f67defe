package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"goinfer/internal/kservepb"
	"goinfer/internal/server"
	"goinfer/internal/server/servertest"
	"goinfer/internal/tensor"
)

// TestLatencyBreakdown checks that, with Config.LatencyBreakdown, every
// answered HTTP and gRPC inference request is recorded with its steps on
// both gRPC transports, that ?reset=1 drops them, and that the endpoint
// says it is off without the flag.
func TestLatencyBreakdown(t *testing.T) {
	for _, tt := range []struct {
		transport, label string
		// steps only a transport's path sees, besides the common ones
		steps []string
	}{
		{server.GRPCTransportGRPCGo, "grpc", []string{"handler", "encoded"}},
		{server.GRPCTransportH2, "h2grpc", []string{"handler", "encoded", "written"}},
	} {
		t.Run(tt.transport, func(t *testing.T) {
			s := servertest.Start(t, servertest.Options{Stages: true, Server: func(c *server.Config) {
				c.LatencyBreakdown, c.GRPCTransport = true, tt.transport
			}})
			x := randImages(1, 16, 7)
			img := tensor.F32Bytes(x)
			hdr := map[string]any{"inputs": []any{binaryInput("FP32", []int{1, 3, 16, 16}, len(img))}}
			const n = 3
			c := kservepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.GRPCAddr))
			for range n {
				inferBinary(t, s, hdr, img)
				if _, err := c.ModelInfer(ctxT(t), rawInfer(x, 1)); err != nil {
					t.Fatal(err)
				}
			}
			// h2grpc records a request after its answer is written, which
			// may be after the client has read it: wait for the last one.
			url := "http://" + s.HTTPAddr + "/debug/latency"
			var got string
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
				got = getText(t, url, http.StatusOK)
				if strings.Contains(got, "http: 3 requests") && strings.Contains(got, tt.label+": 3 requests") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("breakdown lacks 3 requests of http and %s:\n%s", tt.label, got)
				}
			}
			getText(t, url+"?reset=1", http.StatusOK)
			// Each protocol's table names the steps its path sees.
			for _, part := range strings.Split(got, "requests;")[1:] {
				for _, step := range []string{"input", "submit", "formed", "dequeued", "forward", "host_done", "answered", "total"} {
					if !strings.Contains(part, "\n  "+step+" ") {
						t.Errorf("a table lacks step %q:\n%s", step, got)
					}
				}
			}
			grpcPart := got[strings.Index(got, tt.label+":"):]
			for _, step := range tt.steps {
				if !strings.Contains(grpcPart, "\n  "+step+" ") {
					t.Errorf("%s's table lacks step %q:\n%s", tt.label, step, got)
				}
			}
			if got := getText(t, url, http.StatusOK); !strings.Contains(got, "no requests recorded") {
				t.Errorf("after ?reset=1:\n%s", got)
			}
		})
	}
	t.Run("off", func(t *testing.T) {
		s := servertest.Start(t, servertest.Options{})
		getText(t, "http://"+s.HTTPAddr+"/debug/latency", http.StatusNotFound)
	})
}

func getText(t *testing.T, url string, code int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != code {
		t.Fatalf("GET %s: %s, want %d: %s", url, resp.Status, code, b)
	}
	return string(b)
}
