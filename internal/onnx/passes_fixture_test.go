package onnx

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// relDiff is max|a-b| / max|b|.
func relDiff(a, b *ir.Array) float64 {
	scale, diff := 0.0, 0.0
	for i := range b.Data {
		scale = math.Max(scale, math.Abs(b.Data[i]))
		diff = math.Max(diff, math.Abs(a.Data[i]-b.Data[i]))
	}
	if scale == 0 {
		return diff
	}
	return diff / scale
}

func loadArray(t *testing.T, path string) *ir.Array {
	t.Helper()
	tt, err := tensor.LoadNPY(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ir.ArrayFromTensor(tt)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestPassesOnExportedModels runs the exporters' torchvision fixtures
// (testdata/onnx, both exporters) through the reference evaluator as
// loaded, after Optimize and after Decompose: the reference matches
// PyTorch's float64 logits, and the rewritten graphs match the reference.
// The rewrites round folded weights to float32, hence 1e-6 rather than
// float64's precision.
func TestPassesOnExportedModels(t *testing.T) {
	models, err := filepath.Glob("../../testdata/onnx/*/*.onnx")
	if err != nil || len(models) == 0 {
		t.Skipf("no ONNX fixtures in testdata/onnx (%v)", err)
	}
	ctx := context.Background()
	for _, path := range models {
		if filepath.Base(filepath.Dir(path)) == "static" {
			continue // batch fixed at 1: TestTorchvisionFixtures evaluates them a sample at a time
		}
		base := strings.TrimSuffix(path, ".onnx")
		t.Run(filepath.Base(filepath.Dir(path))+"/"+filepath.Base(base), func(t *testing.T) {
			g, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			x := loadArray(t, base+".input.npy")
			want := loadArray(t, base+".logits.npy")
			in := map[string]*ir.Array{g.Inputs[0].Name: x}
			ref, err := ir.EvaluateBound(ctx, g, in)
			if err != nil {
				t.Fatal(err)
			}
			dRef := relDiff(ref[0], want)
			if dRef > 1e-5 {
				t.Errorf("reference evaluator: %.2e from PyTorch's float64 logits", dRef)
			}
			opt, st, err := ir.Optimize(g, x.Shape[0])
			if err != nil {
				t.Fatal(err)
			}
			if st.NodesAfter >= st.NodesBefore {
				t.Errorf("Optimize did not shrink the graph: %s", st)
			}
			got, err := ir.Evaluate(ctx, opt, in)
			if err != nil {
				t.Fatal(err)
			}
			dOpt := relDiff(got[0], ref[0])
			if dOpt > 1e-6 {
				t.Errorf("optimized (%s): %.2e from the reference", st, dOpt)
			}
			if _, err := ir.Decompose(opt, nil); err != nil {
				t.Fatal(err)
			}
			if err := opt.Validate(); err != nil {
				t.Fatal(err)
			}
			if got, err = ir.Evaluate(ctx, opt, in); err != nil {
				t.Fatal(err)
			}
			dDec := relDiff(got[0], ref[0])
			if dDec > 1e-6 {
				t.Errorf("decomposed: %.2e from the reference", dDec)
			}
			t.Logf("reference %.1e from PyTorch; optimized %s, %.1e; decomposed %.1e", dRef, st, dOpt, dDec)
		})
	}
}
