package irexec

import (
	"math/rand/v2"
	"testing"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// twoConvGraph is two convolutions of stride 2 over one input, in order,
// both outputs of the graph: a ResNet block's first 3x3 and its
// downsampling 1x1 when k1, k2 = 3, 1.
func twoConvGraph(r *rand.Rand, k1, k2 int) *ir.Graph {
	g := &ir.Graph{Name: "two convs"}
	cst := func(name string, shape ...int) *ir.Value {
		c := randConst(r, shape...)
		return &ir.Value{Name: name, Type: ir.Type{DType: tensor.Float32, Shape: c.c.Shape}, Const: c.c}
	}
	x := &ir.Value{Name: "x", Type: ir.Type{DType: tensor.Float32, Shape: tensor.Shape{2, 24, 15, 14}}}
	g.Inputs = []*ir.Value{x}
	for i, k := range []int{k1, k2} {
		y := &ir.Value{Name: "y" + string(rune('0'+i))}
		n := &ir.Node{Name: "conv" + string(rune('0'+i)),
			Op:     &ir.Conv{Strides: []int{2, 2}, Pads: []int{k / 2, k / 2, k / 2, k / 2}, Group: 1, Epilogue: ir.Epilogue{Act: ir.ActRelu}},
			Inputs: []*ir.Value{x, cst("w", 40, 24, k, k), cst("b", 40)}, Outputs: []*ir.Value{y}}
		y.Producer = n
		g.Nodes = append(g.Nodes, n)
		g.Outputs = append(g.Outputs, y)
	}
	return g
}

// TestSharePhases checks two strided convolutions of one input against
// ir, and that the second reads the first's phase planes only where the
// first split every phase it reads.
func TestSharePhases(t *testing.T) {
	for _, c := range []struct {
		name   string
		k1, k2 int
		shared bool
	}{
		{"3x3 then 1x1", 3, 1, true},
		{"1x1 then 3x3", 1, 3, false},
		{"3x3 then 3x3", 3, 3, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, threads := range []int{1, 3} {
				p := checkOpts(t, twoConvGraph(rand.New(rand.NewPCG(8, 9)), c.k1, c.k2), 1e-5, 3, Options{Threads: threads})
				var got []bool
				for _, s := range p.steps {
					if cs, ok := s.s.(*convStep); ok {
						got = append(got, cs.phasesShared)
					}
				}
				if len(got) != 2 || got[0] || got[1] != c.shared {
					t.Errorf("phases shared %v, want [false %v]", got, c.shared)
				}
			}
		})
	}
}
