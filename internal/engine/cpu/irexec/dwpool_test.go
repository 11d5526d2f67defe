package irexec

import (
	"math/rand/v2"
	"testing"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// dwPoolGraph is a depthwise kxk convolution (stride st, SiLU) followed by
// a global average pooling of its output, both graph outputs (the
// depthwise output also feeds the SE block's scaling).
func dwPoolGraph(r *rand.Rand, n, c, h, w, k, st int) *ir.Graph {
	g := &ir.Graph{Name: "dwpool"}
	cst := func(name string, shape ...int) *ir.Value {
		v := randConst(r, shape...)
		return &ir.Value{Name: name, Type: ir.Type{DType: tensor.Float32, Shape: v.c.Shape}, Const: v.c}
	}
	x := &ir.Value{Name: "x", Type: ir.Type{DType: tensor.Float32, Shape: tensor.Shape{n, c, h, w}}}
	g.Inputs = []*ir.Value{x}
	y := &ir.Value{Name: "y"}
	p := k / 2
	dw := &ir.Node{Name: "dw", Op: &ir.Conv{Strides: []int{st, st}, Pads: []int{p, p, p, p}, Group: c, Epilogue: ir.Epilogue{Act: ir.ActSiLU}},
		Inputs: []*ir.Value{x, cst("w", c, 1, k, k), cst("b", c)}, Outputs: []*ir.Value{y}}
	y.Producer = dw
	z := &ir.Value{Name: "z"}
	pool := &ir.Node{Name: "squeeze", Op: &ir.GlobalPool{}, Inputs: []*ir.Value{y}, Outputs: []*ir.Value{z}}
	z.Producer = pool
	g.Nodes = []*ir.Node{dw, pool}
	g.Outputs = []*ir.Value{z, y}
	return g
}

// TestDWPool checks the global average pooling fused into the blocked
// depthwise convolution before it against ir: one strip and many, a
// partial channel block, strides 1 and 2, batches 1 and 2.
func TestDWPool(t *testing.T) {
	cases := []struct {
		name              string
		n, c, h, w, k, st int
	}{
		{"7x7 one strip", 1, 40, 7, 7, 5, 1},
		{"112x112 strips", 1, 16, 112, 112, 3, 1},
		{"stride 2, partial block", 1, 20, 57, 41, 3, 2},
		{"batch 2", 2, 24, 30, 30, 5, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := check(t, dwPoolGraph(rand.New(rand.NewPCG(8, uint64(c.c))), c.n, c.c, c.h, c.w, c.k, c.st), 1e-5)
			if len(p.steps) != 1 {
				t.Fatalf("%d steps, want the fused depthwise step alone", len(p.steps))
			}
			dw, ok := p.steps[0].s.(*dwBlockStep)
			if !ok || dw.poolDst < 0 {
				t.Fatalf("step %T is not a depthwise step with the pooling", p.steps[0].s)
			}
			if c.name == "112x112 strips" && dw.nstrip < 2 {
				t.Errorf("%d strips, want several", dw.nstrip)
			}
		})
	}
}
