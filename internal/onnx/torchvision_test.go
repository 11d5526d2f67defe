package onnx

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// TestTorchvisionFixtures runs the torchvision classifiers of
// testdata/onnx (narrowed, random weights, exported by both of PyTorch's
// ONNX exporters; tools/onnx/export_fixtures.py) through Load and the
// reference evaluator and holds them to the bar against PyTorch's
// float64 logits: max|got-ref|/max|ref| <= 1e-4 and the same top-1 class
// per image.
func TestTorchvisionFixtures(t *testing.T) {
	models, err := filepath.Glob("../../testdata/onnx/*/*.onnx")
	if err != nil {
		t.Fatal(err)
	}
	if len(models) == 0 {
		t.Skip("no fixtures in testdata/onnx")
	}
	for _, path := range models {
		base := strings.TrimSuffix(path, ".onnx")
		name := filepath.Base(filepath.Dir(path)) + "/" + filepath.Base(base)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			g, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			x, err := tensor.LoadNPY(base + ".input.npy")
			if err != nil {
				t.Fatal(err)
			}
			ref, err := tensor.LoadNPY(base + ".logits.npy")
			if err != nil {
				t.Fatal(err)
			}
			xa, err := ir.ArrayFromTensor(x)
			if err != nil {
				t.Fatal(err)
			}
			want, err := ir.ArrayFromTensor(ref)
			if err != nil {
				t.Fatal(err)
			}
			got := evalBatch(t, g, xa)
			if !got.Shape.Equal(want.Shape) || len(want.Shape) != 2 {
				t.Fatalf("logits %v, want %v", got.Shape, want.Shape)
			}
			var maxRef, maxDiff float64
			for i, w := range want.Data {
				maxRef = math.Max(maxRef, math.Abs(w))
				maxDiff = math.Max(maxDiff, math.Abs(got.Data[i]-w))
			}
			if maxDiff > 1e-4*maxRef {
				t.Errorf("max |got-ref| %g, max |ref| %g: relative %g > 1e-4", maxDiff, maxRef, maxDiff/maxRef)
			}
			classes := want.Shape[1]
			for b := 0; b < want.Shape[0]; b++ {
				if g, w := argmax(got.Data[b*classes:(b+1)*classes]), argmax(want.Data[b*classes:(b+1)*classes]); g != w {
					t.Errorf("image %d: top-1 %d, PyTorch's %d", b, g, w)
				}
			}
			t.Logf("%s: relative error %.2g, %v", name, maxDiff/maxRef, time.Since(start).Round(time.Millisecond))
		})
	}
}

func argmax(v []float64) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// evalBatch evaluates g on the batch x, one sample at a time when g was
// exported with its batch fixed at 1 (testdata/onnx/static).
func evalBatch(t *testing.T, g *ir.Graph, x *ir.Array) *ir.Array {
	t.Helper()
	name := g.Inputs[0].Name
	if g.Inputs[0].Type.Shape[0] != 1 || x.Shape[0] == 1 {
		return eval(t, g, map[string]*ir.Array{name: x})[0]
	}
	n := x.Shape[0]
	per := len(x.Data) / n
	var rows []*ir.Array
	for i := range n {
		xi := ir.NewArray(x.DType, append(tensor.Shape{1}, x.Shape[1:]...))
		copy(xi.Data, x.Data[i*per:(i+1)*per])
		rows = append(rows, eval(t, g, map[string]*ir.Array{name: xi})[0])
	}
	out := ir.NewArray(rows[0].DType, append(tensor.Shape{n}, rows[0].Shape[1:]...))
	k := len(rows[0].Data)
	for i, r := range rows {
		copy(out.Data[i*k:], r.Data)
	}
	return out
}
