package irexec

import (
	"math/rand/v2"
	"testing"

	"goinfer/internal/engine/cpu/vec"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// stemGraph is a ResNet stem: a 7x7 stride-2 convolution with ReLU and a
// 3x3 stride-2 max pooling, over a batch of n images; convOut also makes
// the convolution's output a graph output.
func stemGraph(r *rand.Rand, n, outC int, convOut bool) *ir.Graph {
	g := &ir.Graph{Name: "stem"}
	cst := func(name string, shape ...int) *ir.Value {
		c := randConst(r, shape...)
		return &ir.Value{Name: name, Type: ir.Type{DType: tensor.Float32, Shape: c.c.Shape}, Const: c.c}
	}
	x := &ir.Value{Name: "x", Type: ir.Type{DType: tensor.Float32, Shape: tensor.Shape{n, 3, 30, 27}}}
	g.Inputs = []*ir.Value{x}
	y := &ir.Value{Name: "y"}
	conv := &ir.Node{Name: "conv", Op: &ir.Conv{Strides: []int{2, 2}, Pads: []int{3, 3, 3, 3}, Group: 1, Epilogue: ir.Epilogue{Act: ir.ActRelu}},
		Inputs: []*ir.Value{x, cst("w", outC, 3, 7, 7), cst("b", outC)}, Outputs: []*ir.Value{y}}
	y.Producer = conv
	z := &ir.Value{Name: "z"}
	pool := &ir.Node{Name: "pool", Op: &ir.Pool{Max: true, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}},
		Inputs: []*ir.Value{y}, Outputs: []*ir.Value{z}}
	z.Producer = pool
	g.Nodes = []*ir.Node{conv, pool}
	g.Outputs = []*ir.Value{z}
	if convOut {
		g.Outputs = append(g.Outputs, y)
	}
	return g
}

// TestStemPool checks the stem convolution fused with its max pooling
// against ir, and that the fusion happens only where the pooling alone
// reads the convolution's output and the batch has several images.
func TestStemPool(t *testing.T) {
	cases := []struct {
		name      string
		n, outC   int
		convOut   bool
		wantFused bool
	}{
		{"batch 3", 3, 20, false, true},
		{"batch 1", 1, 16, false, false},
		{"conv output read too", 3, 16, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := check(t, stemGraph(rand.New(rand.NewPCG(4, 6)), c.n, c.outC, c.convOut), 1e-5)
			_, fused := p.steps[0].s.(*stemPoolStep)
			if want := c.wantFused && vec.TapsNFast(); fused != want {
				t.Errorf("first step %T, fused %v, want %v", p.steps[0].s, fused, want)
			}
		})
	}
}
