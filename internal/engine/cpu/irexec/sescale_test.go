package irexec

import (
	"context"
	"fmt"
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

// BenchmarkSEScale times MobileNetV3's 14x14 and 7x7 SE block tails at
// batch 1 on one and two threads, the scaling fused into the projection's
// packing and as a separate Mul step. A batch of several images cannot be
// fused (s differs per image and a packed panel may span two): scaling
// each packed lane by its image's s measured slower than the Mul step at
// batch 4 on one thread (notes/cpu-mnv3.md).
func BenchmarkSEScale(b *testing.B) {
	for _, sh := range []struct{ c, hw, oc int }{{672, 14, 112}, {960, 7, 160}} {
		for _, threads := range []int{1, 2} {
			for _, fused := range []bool{false, true} {
				b.Run(fmt.Sprintf("%dx%dx%d->%d/threads=%d/fused=%v", sh.c, sh.hw, sh.hw, sh.oc, threads, fused), func(b *testing.B) {
					g := seGraph(rand.New(rand.NewPCG(1, 2)), 1, sh.c, sh.hw, sh.hw, sh.oc, ir.ActNone, true, false)
					bg, err := ir.Bind(g, 1)
					if err != nil {
						b.Fatal(err)
					}
					p, err := Compile(context.Background(), bg, Options{Threads: threads, noSEScale: !fused})
					if err != nil {
						b.Fatal(err)
					}
					if got := len(p.steps) == 1; got != fused {
						b.Fatalf("%d steps, fused %v", len(p.steps), fused)
					}
					x := p.NewExec()
					defer x.Close()
					in := [][]byte{make([]byte, 4*sh.c*sh.hw*sh.hw), make([]byte, 4*sh.c)}
					out := [][]byte{make([]byte, 4*sh.oc*sh.hw*sh.hw)}
					for b.Loop() {
						if err := x.Run(context.Background(), in, out); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
