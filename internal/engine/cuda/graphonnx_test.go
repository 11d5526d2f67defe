package cuda

import (
	"path/filepath"
	"testing"

	"goinfer/internal/ir"
	"goinfer/internal/onnx"
	"goinfer/internal/tensor"
)

// TestGraphPlanONNX plans the ONNX fixtures (torchvision models exported by
// PyTorch's exporters, with PyTorch's logits for their input) in both
// layouts and checks the simulated plan against PyTorch's logits.
func TestGraphPlanONNX(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "testdata", "onnx", "*", "*.onnx"))
	if err != nil || len(files) == 0 {
		t.Skipf("no ONNX fixtures: %v", err)
	}
	for _, f := range files {
		name := filepath.Base(filepath.Dir(f)) + "/" + filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			g, err := onnx.Load(f)
			if err != nil {
				t.Skipf("loading: %v", err)
			}
			base := f[:len(f)-len(".onnx")]
			in, err := tensor.LoadNPY(base + ".input.npy")
			if err != nil {
				t.Skipf("no input: %v", err)
			}
			want, err := tensor.LoadNPY(base + ".logits.npy")
			if err != nil {
				t.Skipf("no logits: %v", err)
			}
			x, err := in.ToFloat32()
			if err != nil {
				t.Fatal(err)
			}
			ref, err := want.ToFloat32()
			if err != nil {
				t.Fatal(err)
			}
			batch := in.Shape[0]
			if d := g.Inputs[0].Type.Shape[0]; d != ir.Dynamic && d < batch {
				// A fixed-batch export: its first samples.
				x, ref = x[:len(x)/batch*d], ref[:len(ref)/batch*d]
				batch = d
			}
			b, _, err := ir.Optimize(g, batch)
			if err != nil {
				t.Fatal(err)
			}
			x64 := make([]float64, len(x))
			for i, v := range x {
				x64[i] = float64(v)
			}
			for _, c := range []struct {
				cl   bool
				opts planOptions
			}{{false, planOptions{}}, {true, planOptions{}}, {true, planOptions{chains: true}}} {
				p, err := planGraphWith(b, batch, 4, c.cl, c.opts)
				if err != nil {
					t.Fatalf("channels-last %v, %+v: %v", c.cl, c.opts, err)
				}
				got := simulate(t, p, x64)[0]
				if e := relErr64(got, f64s(ref)); e > 1e-4 {
					t.Errorf("channels-last %v, %+v: relative error %.3g against PyTorch", c.cl, c.opts, e)
				}
			}
		})
	}
}
