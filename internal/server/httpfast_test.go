package server_test

import (
	"encoding/binary"
	"math"
	"net/http"
	"testing"

	"goinfer/internal/server"
	"goinfer/internal/server/servertest"
	"goinfer/internal/tensor"
)

// TestHTTPTransports runs inference requests on each HTTP transport,
// before and after a metadata request on the same keep-alive connections
// (which moves a fast-loop connection to net/http), and checks the logits
// against the reference forward.
func TestHTTPTransports(t *testing.T) {
	for _, transport := range []string{server.HTTPTransportFast, server.HTTPTransportNetHTTP} {
		t.Run(transport, func(t *testing.T) {
			s := servertest.Start(t, servertest.Options{Server: func(c *server.Config) { c.HTTPTransport = transport }})
			x := randImages(2, 16, 5)
			want := s.Expected(t, x, 2)
			data := tensor.F32Bytes(x)
			hdr := map[string]any{
				"inputs":  []any{binaryInput("FP32", []int{2, 3, 16, 16}, len(data))},
				"outputs": []any{map[string]any{"name": "logits", "parameters": map[string]any{"binary_data": true}}},
			}
			for _, step := range []string{"infer", "metadata", "infer", "infer"} {
				if step == "metadata" {
					if r := do(t, "GET", "http://"+s.HTTPAddr+"/v2/models/"+s.Name, nil, nil); r.status != http.StatusOK {
						t.Fatalf("metadata: %d %s", r.status, r.body)
					}
					continue
				}
				_, bin := splitResponse(t, inferBinary(t, s, hdr, data))
				got := make([]float32, len(bin)/4)
				for i := range got {
					got[i] = math.Float32frombits(binary.LittleEndian.Uint32(bin[4*i:]))
				}
				checkLogits(t, got, want)
			}
		})
	}
}
