package cpu

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"goinfer/internal/engine"
	"goinfer/internal/onnx"
	"goinfer/internal/tensor"
)

// TestLoadGraphONNXFixtures runs the ONNX exports of small torchvision
// classifiers (testdata/onnx: both PyTorch exporters) on the cpu engine and
// compares with PyTorch's float64 logits: max|got-ref|/max|ref| <= 1e-4,
// top-1 identical.
func TestLoadGraphONNXFixtures(t *testing.T) {
	const dir = "../../../testdata/onnx"
	for _, exporter := range []string{"torchscript", "dynamo"} {
		models, err := filepath.Glob(filepath.Join(dir, exporter, "*.onnx"))
		if err != nil || len(models) == 0 {
			t.Fatalf("no fixtures in %s/%s (%v)", dir, exporter, err)
		}
		for _, path := range models {
			name := strings.TrimSuffix(filepath.Base(path), ".onnx")
			t.Run(exporter+"/"+name, func(t *testing.T) {
				g, err := onnx.Load(path)
				if err != nil {
					t.Fatal(err)
				}
				base := strings.TrimSuffix(path, ".onnx")
				in, err := tensor.LoadNPY(base + ".input.npy")
				if err != nil {
					t.Fatal(err)
				}
				want, err := tensor.LoadNPY(base + ".logits.npy")
				if err != nil {
					t.Fatal(err)
				}
				x, err := in.ToFloat32()
				if err != nil {
					t.Fatal(err)
				}
				w, err := want.ToFloat32()
				if err != nil {
					t.Fatal(err)
				}
				n := in.Shape[0]
				for _, compile := range []bool{false, true} {
					m, err := Engine{}.LoadGraph(context.Background(), g, engine.Options{Compile: compile, MaxBatch: n})
					if err != nil {
						t.Fatal(err)
					}
					got := runModel(t, m, n, x)
					m.Close()
					d := relDiff(got, w)
					t.Logf("compile=%v: max|got-ref|/max|ref| = %.3g", compile, d)
					if d > 1e-4 {
						t.Errorf("compile=%v: max|got-ref|/max|ref| = %.3g, want <= 1e-4", compile, d)
					}
					k := len(w) / n
					for i := 0; i < n; i++ {
						if a, b := argmax(got[i*k:(i+1)*k]), argmax(w[i*k:(i+1)*k]); a != b {
							t.Errorf("compile=%v: sample %d: top-1 %d, PyTorch's %d", compile, i, a, b)
						}
					}
				}
			})
		}
	}
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}
