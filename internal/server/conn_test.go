package server_test

import (
	"encoding/json"
	"testing"
	"time"

	"goinfer/internal/kservepb"
	"goinfer/internal/server"
	"goinfer/internal/server/servertest"
	"goinfer/internal/tensor"
)

// TestConnectionSettings serves HTTP and gRPC requests with busy-polling
// reads and set socket buffers, alone and together, and checks the
// answers and the handler's phase metrics.
func TestConnectionSettings(t *testing.T) {
	for _, tt := range []struct {
		name   string
		poll   time.Duration
		buffer int
	}{
		{"defaults", 0, 0},
		{"busy poll", 200 * time.Microsecond, 0},
		{"socket buffers", 0, 1 << 20},
		{"both", time.Millisecond, 4 << 20},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := servertest.Start(t, servertest.Options{Server: func(c *server.Config) {
				c.BusyPoll, c.SocketBuffer = tt.poll, tt.buffer
			}})
			x := randImages(2, 16, 30)
			want := s.Expected(t, x, 2)
			img := tensor.F32Bytes(x)
			hdr := map[string]any{"inputs": []any{binaryInput("FP32", []int{2, 3, 16, 16}, len(img))}}
			const n = 3
			for range n {
				jr, _ := splitResponse(t, inferBinary(t, s, hdr, img))
				var got []float32
				if err := json.Unmarshal(jr.Outputs[0].Data, &got); err != nil {
					t.Fatal(err)
				}
				checkLogits(t, got, want)
			}
			c := kservepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.GRPCAddr))
			resp, err := c.ModelInfer(ctxT(t), rawInfer(x, 2))
			if err != nil {
				t.Fatal(err)
			}
			checkLogits(t, rawLogits(t, resp), want)

			total, _ := metricValue(t, s, `goinfer_request_duration_seconds_sum{protocol="http"}`)
			var sum float64
			for _, phase := range []string{"read", "infer", "reply"} {
				v, ok := metricValue(t, s, `goinfer_request_phase_seconds_total{phase="`+phase+`",protocol="http"}`)
				if !ok || v <= 0 {
					t.Errorf("phase %s: %v (found %v), want > 0", phase, v, ok)
				}
				sum += v
			}
			// The phases tile the requests' time (to the sums' rounding).
			if sum > total*(1+1e-9) {
				t.Errorf("phases sum to %v s, more than the requests' %v s", sum, total)
			}
		})
	}
}
