package irexec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"goinfer/internal/ir"
)

func TestExpf(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	xs := []float32{0, -0, 1, -1, 0.5, 1e-3, -2e-5, 3.5, -5.9, 7, 87.9, -86.9, 88.5, -88, -104, 100, float32(math.Inf(1)), float32(math.Inf(-1))}
	for i := 0; i < 100000; i++ {
		xs = append(xs, float32(r.Float64()*180-90))
	}
	for _, x := range xs {
		got, want := float64(expf(x)), math.Exp(float64(x))
		if w32 := float32(want); math.IsInf(float64(w32), 0) || w32 < math.SmallestNonzeroFloat32*(1<<23) {
			// Overflow, and results below float32's normal range, are
			// math.Exp's rounded to float32.
			if float64(w32) != got {
				t.Fatalf("expf(%g) = %g, want %g", x, got, w32)
			}
			continue
		}
		if d := math.Abs(got-want) / want; d > 3e-7 {
			t.Fatalf("expf(%g) = %g, want %g (relative error %.2g)", x, got, want, d)
		}
	}
	if v := expf(float32(math.NaN())); v == v {
		t.Errorf("expf(NaN) = %g", v)
	}
	for _, x := range xs {
		if x != x || math.IsInf(float64(x), 0) {
			continue
		}
		if d := math.Abs(float64(tanh32(x)) - math.Tanh(float64(x))); d > 2e-7 {
			t.Fatalf("tanh32(%g) off by %g", x, d)
		}
		if d := math.Abs(float64(erf32(x)) - math.Erf(float64(x))); d > 5e-7 {
			t.Fatalf("erf32(%g) off by %g", x, d)
		}
	}
}

// TestActivationLoops checks the float32 loops of the activations with an
// exponential (vectorized in chunks) against float64, on lengths that
// leave partial chunks and partial vectors.
func TestActivationLoops(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	for _, n := range []int{1, 7, 64, 65, 200} {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * 20)
		}
		v[0] = float32(math.Inf(-1))
		for _, k := range []ir.Activation{ir.ActSigmoid, ir.ActSiLU, ir.ActTanh, ir.ActGELU} {
			a, _ := newAct(ir.Epilogue{Act: k})
			f, _ := ir.Epilogue{Act: k}.Func()
			got := append([]float32(nil), v...)
			a.apply(got)
			for i, x := range v {
				want := f(float64(x))
				if math.IsNaN(want) {
					continue // -Inf * 0 in SiLU and GELU
				}
				if d := math.Abs(float64(got[i]) - want); d > 1e-6*max(1, math.Abs(want)) {
					t.Fatalf("activation %d, n %d: f(%g) = %g, want %g", k, n, x, got[i], want)
				}
			}
		}
	}
}

// TestEpilogueActivations fuses every activation kind into a convolution
// and a MatMul and compares with ir.
func TestEpilogueActivations(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 1))
	eps := []ir.Epilogue{
		{Act: ir.ActNone}, {Act: ir.ActRelu}, {Act: ir.ActRelu6}, {Act: ir.ActClip, Lo: -0.5, Hi: 1.5},
		{Act: ir.ActSigmoid}, {Act: ir.ActSiLU}, {Act: ir.ActHardSwish}, {Act: ir.ActHardSigmoid, Alpha: 0.2, Beta: 0.5},
		{Act: ir.ActGELU}, {Act: ir.ActGELUTanh}, {Act: ir.ActLeakyRelu, Alpha: 0.01}, {Act: ir.ActTanh},
	}
	for _, e := range eps {
		t.Run(fmt.Sprint(e.Act), func(t *testing.T) {
			check(t, oneNode(&ir.Conv{Pads: []int{1, 1, 1, 1}, Epilogue: e}, 1, f32in(2, 8, 5, 7), randConst(r, 12, 8, 3, 3), randConst(r, 12)), 1e-5)
			check(t, oneNode(&ir.Conv{Pads: []int{1, 1, 1, 1}, Group: 8, Epilogue: e}, 1, f32in(2, 8, 5, 7), randConst(r, 8, 1, 3, 3)), 1e-5)
			check(t, oneNode(&ir.MatMul{Epilogue: e}, 1, f32in(3, 16), randConst(r, 16, 9), randConst(r, 9)), 1e-5)
		})
	}
}
