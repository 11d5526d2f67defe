package cuda

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
	"goinfer/internal/torchvision"
)

// randInput is a reproducible normal input of shape.
func randInput(shape []int, seed uint64) *ir.Array {
	r := rand.New(rand.NewPCG(seed, 3))
	a := &ir.Array{DType: tensor.Float32, Shape: slices.Clone(shape)}
	n := 1
	for _, d := range shape {
		n *= d
	}
	a.Data = make([]float64, n)
	for i := range a.Data {
		a.Data[i] = float64(float32(r.NormFloat64()))
	}
	return a
}

var (
	modelsMu sync.Mutex
	models   = map[string]*ir.Graph{}
)

// cachedModel builds a torchvision architecture with random weights once
// per test binary (the weights take most of the time).
func cachedModel(arch string, size int) (*ir.Graph, error) {
	modelsMu.Lock()
	defer modelsMu.Unlock()
	key := fmt.Sprint(arch, size)
	if g, ok := models[key]; ok {
		return g, nil
	}
	g, err := buildModel(modelCase{arch: arch, size: size})
	if err == nil {
		models[key] = g
	}
	return g, err
}

// checkPlanned optimizes g for batch, plans it, simulates the plan and
// compares every output with the float64 reference of the unoptimized
// graph.
func checkPlanned(t *testing.T, g *ir.Graph, batch int, cl bool, tol float64) *gplan {
	t.Helper()
	return checkPlannedWith(t, g, batch, cl, tol, planOptions{})
}

// checkPlannedWith is checkPlanned with planning options.
func checkPlannedWith(t *testing.T, g *ir.Graph, batch int, cl bool, tol float64, opts planOptions) *gplan {
	t.Helper()
	b, _, err := ir.Optimize(g, batch)
	if err != nil {
		t.Fatal(err)
	}
	p, err := planGraphWith(b, batch, 4, cl, opts)
	if err != nil {
		t.Fatal(err)
	}
	in := randInput(b.Inputs[0].Type.Shape, uint64(batch))
	want := evalRef(t, g, batch, in)
	got := simulate(t, p, in.Data)
	for k := range want {
		if e := relErr64(got[k], want[k].Data); e > tol {
			t.Errorf("batch %d output %d: relative error %.3g > %.3g", batch, k, e, tol)
		}
	}
	return p
}

func TestGraphPlanOps(t *testing.T) {
	for _, c := range opCases() {
		t.Run(c.name, func(t *testing.T) {
			for _, n := range []int{1, 3} {
				for _, cl := range []bool{false, true} {
					checkPlanned(t, c.g, n, cl, 1e-5)
				}
			}
		})
	}
}

func TestGraphPlanTinyModels(t *testing.T) {
	for _, c := range tinyModels {
		t.Run(c.arch, func(t *testing.T) {
			g := modelGraph(t, c)
			checkPlanned(t, g, 2, false, 1e-5)
			checkPlanned(t, g, 2, true, 1e-5)
		})
	}
}

// TestGraphPlanFusion checks the lowering decisions on whole models:
// every convolution and product is one library call, batch norms are
// folded, epilogues (bias, residual, activation) are fused into the
// convolution call or take one kernel, and the arena is shared.
func TestGraphPlanFusion(t *testing.T) {
	for _, tc := range []struct {
		arch             string
		size             int
		convs, dw, gemms int
		fc               int
		maxAffine, maxEW int
	}{
		// The RGB stem is padded to 8 channels: a fill and a copy.
		{"resnet18", 64, 20, 0, 1, 0, 1, 2},
		// Depthwise convolutions run graph.cu's kernel, epilogue fused;
		// at 16 pixels the last stages' maps are 1x1, so at batch 2 the
		// 1x1 convolutions there are dense layers (fc), like the 16 of
		// the squeeze-and-excitation blocks.
		{"mobilenet_v3_large", 16, 19, 15, 2, 28, 49, 11},
		// Concatenations in place, batch norm + ReLU one kernel
		// (graphconcat_test.go details it).
		{"densenet121", 64, 120, 0, 1, 0, 126, 2},
	} {
		t.Run(tc.arch, func(t *testing.T) {
			g, err := cachedModel(tc.arch, tc.size)
			if err != nil {
				t.Fatal(err)
			}
			b, _, err := ir.Optimize(g, 2)
			if err != nil {
				t.Fatal(err)
			}
			p, err := planGraph(b, 2, 2, true)
			if err != nil {
				t.Fatal(err)
			}
			k := p.kindCounts()
			if k[stConv] != tc.convs || k[stDW] != tc.dw || k[stGemm] != tc.gemms || k[stFC] != tc.fc {
				t.Errorf("%d convolutions, %d depthwise, %d products and %d dense layers, want %d, %d, %d and %d",
					k[stConv], k[stDW], k[stGemm], k[stFC], tc.convs, tc.dw, tc.gemms, tc.fc)
			}
			if k[stAffine] > tc.maxAffine || k[stEW] > tc.maxEW {
				t.Errorf("%d epilogue and %d elementwise kernels, want at most %d and %d", k[stAffine], k[stEW], tc.maxAffine, tc.maxEW)
			}
			// Liveness shares memory: a deep chain needs a few slots,
			// not one per value.
			arena := 0
			for _, v := range p.vals {
				if v.kind == gArena {
					arena++
				}
			}
			if 8*len(p.slotBytes) > arena {
				t.Errorf("%d arena slots for %d values; want liveness to share them", len(p.slotBytes), arena)
			}
			for _, s := range p.steps {
				if s.node == "" {
					t.Errorf("a %s step names no IR node", s.kind)
				}
			}
		})
	}
}

// TestGraphPlanRefusals checks that unsupported nodes are all named in one
// error.
func TestGraphPlanRefusals(t *testing.T) {
	b, x := newGB("bad", 4, 6, 6)
	y := b.node(&ir.Unary{Fn: ir.OpSin}, x)
	z := b.node(&ir.Pool{Max: true, Kernel: []int{3}, Strides: []int{1}, Pads: []int{0, 0}, Dilations: []int{1}},
		b.node(&ir.Reshape{}, y, b.ints(0, 4, 36)))
	g := b.out(z)
	bg, err := ir.Bind(g, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = planGraph(bg, 1, 4, false)
	if err == nil {
		t.Fatal("planning succeeded; want a refusal")
	}
	for _, want := range []string{"Sin", "MaxPool"} {
		if !containsStr(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	var _ = torchvision.Archs
}

func containsStr(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
