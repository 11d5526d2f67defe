package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"goinfer/internal/tensor"
)

// TestPredictTorchvisionParity classifies the committed photos with
// predict (internal/jpeg and image/png, PIL's resize, the cpu engine) and
// compares the logits with those PyTorch computed for torchvision's PIL
// transform of the same files (tools/images/parity.py): the network input
// is bit-identical, so only fp32 against float64 model arithmetic remains,
// max|got-ref|/max|ref| <= 1e-5 per image, top-1 identical.
func TestPredictTorchvisionParity(t *testing.T) {
	const dir = "../../testdata/parity/"
	b, err := os.ReadFile(dir + "parity.json")
	if err != nil {
		t.Fatal(err)
	}
	var meta struct{ Files []string }
	if err := json.Unmarshal(b, &meta); err != nil {
		t.Fatal(err)
	}
	args := []string{"predict", "--engine", "cpu", "--checkpoint", goldenDir + "resnet18_w8.pth", "--topk", "0", "--batch_size", "8"}
	for _, f := range meta.Files {
		args = append(args, "--input", filepath.Join("../..", f))
	}
	out := filepath.Join(t.TempDir(), "logits.npy")
	if code, _, stderr := goinfer(t, append(args, "--output", out)...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got, err := tensor.LoadNPY(out)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := tensor.LoadNPY(dir + "parity_logits.npy")
	if err != nil {
		t.Fatal(err)
	}
	g, r := got.Float32s(), float64s(t, ref)
	classes := ref.Shape[1]
	if len(g) != len(r) || ref.Shape[0] != len(meta.Files) {
		t.Fatalf("logits %v, reference %v for %d files", got.Shape, ref.Shape, len(meta.Files))
	}
	for i, f := range meta.Files {
		gi, ri := g[i*classes:(i+1)*classes], r[i*classes:(i+1)*classes]
		var maxd, maxr float64
		top, ref1 := 0, 0
		for j := range gi {
			maxd = max(maxd, math.Abs(float64(gi[j])-ri[j]))
			maxr = max(maxr, math.Abs(ri[j]))
			if gi[j] > gi[top] {
				top = j
			}
			if ri[j] > ri[ref1] {
				ref1 = j
			}
		}
		rel := maxd / maxr
		t.Logf("%s: max|got-ref|/max|ref| = %.3g, top-1 %d (torchvision %d)", f, rel, top, ref1)
		if rel > 1e-5 || top != ref1 {
			t.Errorf("%s: max|got-ref|/max|ref| = %.3g (want <= 1e-5), top-1 %d, torchvision's %d", f, rel, top, ref1)
		}
	}
}

// float64s reads a float64 tensor (PyTorch's reference logits).
func float64s(t *testing.T, x *tensor.Tensor) []float64 {
	t.Helper()
	if x.DType != tensor.Float64 {
		t.Fatalf("reference is %s, want float64", x.DType)
	}
	out := make([]float64, x.NumElements())
	for i := range out {
		out[i] = math.Float64frombits(leUint64(x.Data[8*i:]))
	}
	return out
}
