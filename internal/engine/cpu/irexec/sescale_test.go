package irexec

import (
	"math/rand/v2"
	"testing"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// seGraph is an SE block's tail: x * s (s one value per channel, a graph
// input so that it is computed at run time) read by a 1x1 convolution with
// bias and act; scaleFirst puts s as Mul's first operand (torchvision's
// order), mulOut also makes the product a graph output.
func seGraph(r *rand.Rand, n, c, h, w, outC int, act ir.Activation, scaleFirst, mulOut bool) *ir.Graph {
	g := &ir.Graph{Name: "se"}
	cst := func(name string, shape ...int) *ir.Value {
		k := randConst(r, shape...)
		return &ir.Value{Name: name, Type: ir.Type{DType: tensor.Float32, Shape: k.c.Shape}, Const: k.c}
	}
	x := &ir.Value{Name: "x", Type: ir.Type{DType: tensor.Float32, Shape: tensor.Shape{n, c, h, w}}}
	s := &ir.Value{Name: "s", Type: ir.Type{DType: tensor.Float32, Shape: tensor.Shape{n, c, 1, 1}}}
	g.Inputs = []*ir.Value{x, s}
	y := &ir.Value{Name: "y"}
	ins := []*ir.Value{x, s}
	if scaleFirst {
		ins = []*ir.Value{s, x}
	}
	mul := &ir.Node{Name: "mul", Op: &ir.Binary{Fn: ir.OpMul}, Inputs: ins, Outputs: []*ir.Value{y}}
	y.Producer = mul
	z := &ir.Value{Name: "z"}
	conv := &ir.Node{Name: "project", Op: &ir.Conv{Group: 1, Epilogue: ir.Epilogue{Act: act}},
		Inputs: []*ir.Value{y, cst("w", outC, c, 1, 1), cst("b", outC)}, Outputs: []*ir.Value{z}}
	z.Producer = conv
	g.Nodes = []*ir.Node{mul, conv}
	g.Outputs = []*ir.Value{z}
	if mulOut {
		g.Outputs = append(g.Outputs, y)
	}
	return g
}

// TestSEScale checks the SE scaling folded into the next pointwise
// convolution against ir (through packed B on maps that are not whole
// panels, through the weights where B is read in place), and that it
// happens only for single images, where nothing else reads the product,
// and, through the weights, only where they are smaller than the tensor.
func TestSEScale(t *testing.T) {
	cases := []struct {
		name           string
		n, c, h, w, oc int
		act            ir.Activation
		scaleFirst     bool
		mulOut         bool
		fusable        bool // fused unless B is read in place and the weights are larger
	}{
		{"14x14 project", 1, 72, 14, 14, 24, ir.ActNone, true, false, true},
		{"28x28, x first, relu", 1, 40, 28, 28, 16, ir.ActRelu, false, false, true},
		{"two K blocks", 1, 300, 17, 19, 13, ir.ActNone, true, false, true},
		{"odd map, hardswish", 1, 33, 9, 11, 7, ir.ActHardSwish, true, false, true},
		{"7x7, weights larger", 1, 96, 7, 7, 160, ir.ActNone, true, false, true},
		{"16x16, weights larger", 1, 96, 16, 16, 300, ir.ActNone, true, false, false},
		{"batch 2", 2, 72, 14, 14, 24, ir.ActNone, true, false, false},
		{"product read too", 1, 72, 14, 14, 24, ir.ActNone, true, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := seGraph(rand.New(rand.NewPCG(3, uint64(c.c))), c.n, c.c, c.h, c.w, c.oc, c.act, c.scaleFirst, c.mulOut)
			p := check(t, g, 1e-5)
			var conv *convStep
			for _, s := range p.steps {
				if cs, ok := s.s.(*convStep); ok {
					conv = cs
				}
			}
			if conv == nil {
				t.Fatalf("no GEMM convolution among %d steps", len(p.steps))
			}
			want := c.fusable
			if c.name == "16x16, weights larger" {
				want = !conv.direct
			}
			if fused := conv.scale >= 0; fused != want {
				t.Fatalf("fused %v, want %v (direct %v, %d steps)", fused, want, conv.direct, len(p.steps))
			}
			if !want {
				return
			}
			if len(p.steps) != 1 {
				t.Errorf("%d steps, want the convolution alone", len(p.steps))
			}
			if conv.scaleB == conv.direct {
				t.Errorf("scales B %v, reads B in place %v: want exactly one", conv.scaleB, conv.direct)
			}
		})
	}
}
