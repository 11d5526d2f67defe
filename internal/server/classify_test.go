package server_test

import (
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"testing"

	"goinfer/internal/kservepb"
	"goinfer/internal/server/servertest"
	"goinfer/internal/tensor"
)

// TestProbabilitiesOutput checks the softmax output over HTTP and gRPC,
// raw and as classification results, against softmax of the reference
// forward's logits.
func TestProbabilitiesOutput(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	x := randImages(2, 16, 21)
	logits := s.Expected(t, x, 2)
	want := make([]float64, len(logits))
	for i := range 2 {
		row := logits[i*10 : (i+1)*10]
		m := math.Inf(-1)
		for _, v := range row {
			m = max(m, v)
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(v - m)
		}
		for c, v := range row {
			want[i*10+c] = math.Exp(v-m) / sum
		}
	}
	data := tensor.F32Bytes(x)
	in := []any{binaryInput("FP32", []int{2, 3, 16, 16}, len(data))}

	t.Run("HTTP raw", func(t *testing.T) {
		jr, bin := splitResponse(t, inferBinary(t, s, map[string]any{"inputs": in,
			"outputs": []any{map[string]any{"name": "probabilities", "parameters": map[string]any{"binary_data": true}}}}, data))
		if o := jr.Outputs[0]; o.Name != "probabilities" || o.Datatype != "FP32" {
			t.Fatalf("output %+v", o)
		}
		checkLogits(t, tensor.BytesF32(bin), want)
	})
	t.Run("HTTP classification", func(t *testing.T) {
		_, bin := splitResponse(t, inferBinary(t, s, map[string]any{"inputs": in,
			"outputs": []any{map[string]any{"name": "probabilities", "parameters": map[string]any{"classification": 10, "binary_data": true}}}}, data))
		var sum float64
		n := 0
		for len(bin) >= 4 {
			l := binary.LittleEndian.Uint32(bin)
			e := string(bin[4 : 4+l])
			bin = bin[4+l:]
			score, idx, _ := strings.Cut(e, ":")
			p, err1 := strconv.ParseFloat(score, 64)
			c, err2 := strconv.Atoi(idx)
			if err1 != nil || err2 != nil || math.Abs(p-want[n/10*10+c]) > 1e-5 {
				t.Fatalf("entry %d %q; want probability %.6f for class %s", n, e, want[n/10*10+c], idx)
			}
			sum += p
			n++
		}
		if n != 20 || math.Abs(sum-2) > 1e-4 {
			t.Errorf("%d entries summing to %v; want 20 summing to 2", n, sum)
		}
	})
	t.Run("gRPC", func(t *testing.T) {
		c := kservepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.GRPCAddr))
		req := rawInfer(x, 2)
		req.Outputs = []*kservepb.ModelInferRequest_InferRequestedOutputTensor{{Name: "probabilities"}}
		resp, err := c.ModelInfer(ctxT(t), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Outputs[0].Name != "probabilities" {
			t.Fatalf("output named %q", resp.Outputs[0].Name)
		}
		checkLogits(t, rawLogits(t, resp), want)
	})
	t.Run("unknown output", func(t *testing.T) {
		r := inferBinary(t, s, map[string]any{"inputs": in, "outputs": []any{map[string]any{"name": "scores"}}}, data)
		if r.status != 400 || !strings.Contains(string(r.body), `its outputs are`) {
			t.Errorf("status %d: %s", r.status, r.body)
		}
	})
}
