package main

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"goinfer/internal/engine"
	"goinfer/internal/engine/cpu"
	"goinfer/internal/tensor"
)

// TestONNXFixturesOnCPU runs torchvision architectures exported by both of
// PyTorch's ONNX exporters (testdata/onnx) through the CLI's model loading
// and the cpu engine, eager and compiled, one image at a time and as a
// batch, against PyTorch's float64 logits.
func TestONNXFixturesOnCPU(t *testing.T) {
	models, err := filepath.Glob("../../testdata/onnx/*/*.onnx")
	if err != nil || len(models) == 0 {
		t.Fatalf("no ONNX fixtures in testdata/onnx (%v)", err)
	}
	for _, path := range models {
		base := strings.TrimSuffix(path, ".onnx")
		name := filepath.Base(filepath.Dir(path)) + "/" + filepath.Base(base)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			x, err := tensor.LoadNPY(base + ".input.npy")
			if err != nil {
				t.Fatal(err)
			}
			ref, err := tensor.LoadNPY(base + ".logits.npy")
			if err != nil {
				t.Fatal(err)
			}
			n, per := x.Shape[0], x.Shape.NumElements()/x.Shape[0]
			g, err := readNetGraph(context.Background(), source{Path: path}, x.Shape[2])
			if err != nil {
				t.Fatal(err)
			}
			ref32, err := ref.ToFloat32()
			if err != nil {
				t.Fatal(err)
			}
			want := make([]float64, len(ref32))
			for i, v := range ref32 {
				want[i] = float64(v)
			}
			for _, compile := range []bool{false, true} {
				for _, maxBatch := range []int{1, n} {
					m, err := g.load(context.Background(), cpu.Engine{}, engine.Options{Compile: compile, MaxBatch: maxBatch,
						Height: x.Shape[2], Width: x.Shape[3], InputDType: tensor.Float32, Threads: 2})
					if err != nil {
						t.Fatal(err)
					}
					got, err := forwardAll(context.Background(), m, x.Float32s(), n, per, min(maxBatch, m.Info().MaxBatch))
					if cerr := m.Close(); err == nil {
						err = cerr
					}
					if err != nil {
						t.Fatal(err)
					}
					if e := relErr(got, want); e > 1e-4 || !sameTop1(got, want, len(want)/n) {
						t.Errorf("compile=%v batch %d: max|got-ref|/max|ref| = %.2e, top-1 equal %v", compile, maxBatch, e, sameTop1(got, want, len(want)/n))
					}
				}
			}
		})
	}
}

func relErr(got []float32, want []float64) float64 {
	var d, m float64
	for i, w := range want {
		d = math.Max(d, math.Abs(float64(got[i])-w))
		m = math.Max(m, math.Abs(w))
	}
	return d / m
}

func sameTop1(got []float32, want []float64, classes int) bool {
	for i := 0; i+classes <= len(want); i += classes {
		g, w := 0, 0
		for c := 1; c < classes; c++ {
			if got[i+c] > got[i+g] {
				g = c
			}
			if want[i+c] > want[i+w] {
				w = c
			}
		}
		if g != w {
			return false
		}
	}
	return true
}

// TestPredictUsesTheModelsPreprocessing classifies a photograph with a
// model of 32x32 inputs: the image is resized and cropped to the model's
// own size (and normalised as its preprocessing says), not to ImageNet's
// 224, which the model would refuse.
func TestPredictUsesTheModelsPreprocessing(t *testing.T) {
	code, stdout, stderr := goinfer(t, "predict", "--engine", "cpu", "--checkpoint", "../../testdata/onnx/dynamo/vit.onnx",
		"--topk", "2", "../../testdata/photos/astronaut.jpg")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "(32x32)") || !strings.Contains(stdout, "astronaut.jpg") {
		t.Errorf("want one 32x32 image classified; stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
}

// TestFixedBatchExports checks how exports with the batch fixed at 1 are
// run: batched where the graph computes each sample on its own, one image
// at a time where it hard-codes the batch.
func TestFixedBatchExports(t *testing.T) {
	for _, c := range []struct {
		model    string
		maxBatch int
	}{
		{"regnet_y", 4},
		{"convnext", 4},
		{"shufflenet_v2", 1}, // the channel shuffle reshapes to [1, 2, C/2, H, W]
		{"vit", 1},           // the class token is expanded to a constant [1, 1, D]
	} {
		path := "../../testdata/onnx/static/" + c.model + ".onnx"
		g, err := readNetGraph(context.Background(), source{Path: path}, 0)
		if err != nil {
			t.Fatal(err)
		}
		h, w := g.inputSize(0, 0)
		m, err := g.load(context.Background(), cpu.Engine{}, engine.Options{MaxBatch: 4, Height: h, Width: w, InputDType: tensor.Float32, Threads: 1})
		if err != nil {
			t.Fatalf("%s: %v", c.model, err)
		}
		if got := m.Info().MaxBatch; got != c.maxBatch {
			t.Errorf("%s: MaxBatch %d, want %d", c.model, got, c.maxBatch)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPredictDynamicImageSize runs an export whose height and width are
// symbolic at the size of the tensor given (40x40), not at a default.
func TestPredictDynamicImageSize(t *testing.T) {
	const base = "../../testdata/onnx_dynamic_hw/regnet_y"
	out := filepath.Join(t.TempDir(), "logits.npy")
	code, _, stderr := goinfer(t, "predict", "--engine", "cpu", "--checkpoint", base+".onnx", "--output", out, "--topk", "0", base+".input.npy")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got, err := tensor.LoadNPY(out)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := tensor.LoadNPY(base + ".logits.npy")
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.ToFloat32()
	if err != nil {
		t.Fatal(err)
	}
	w64 := make([]float64, len(want))
	for i, v := range want {
		w64[i] = float64(v)
	}
	if e := relErr(got.Float32s(), w64); e > 1e-4 {
		t.Errorf("max|got-ref|/max|ref| = %.2e", e)
	}
}
