package irexec

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// TestDepthwiseBlocks covers the channel-blocked depthwise kernel against
// ir: channel counts below, at and past a block of 16 (stale lanes in the
// last block), strides 1 to 3 and per axis, kernels 1 to 5, symmetric,
// asymmetric and zero padding, dilation, maps of one strip and of many
// (top and bottom padding rows met again by later strips), batches of
// several images, and every fused activation.
func TestDepthwiseBlocks(t *testing.T) {
	type cs struct {
		name         string
		n, c, h, w   int
		kh, kw       int
		strides, dil []int
		pads         []int
	}
	cases := []cs{
		{"3x3 s1 7x7 c1", 1, 1, 7, 7, 3, 3, nil, nil, []int{1, 1, 1, 1}},
		{"3x3 s1 14x14 c15", 2, 15, 14, 14, 3, 3, nil, nil, []int{1, 1, 1, 1}},
		{"3x3 s2 13x11 c16", 1, 16, 13, 11, 3, 3, []int{2, 2}, nil, []int{1, 1, 1, 1}},
		{"5x5 s1 7x7 c17", 2, 17, 7, 7, 5, 5, nil, nil, []int{2, 2, 2, 2}},
		{"5x5 s2 14x14 c40", 1, 40, 14, 14, 5, 5, []int{2, 2}, nil, []int{2, 2, 2, 2}},
		{"5x5 s2 odd 15x9 c33", 1, 33, 15, 9, 5, 5, []int{2, 2}, nil, []int{1, 2, 2, 1}},
		{"3x3 no pad c20", 1, 20, 9, 12, 3, 3, nil, nil, nil},
		{"3x3 s3 c5", 1, 5, 16, 29, 3, 3, []int{3, 3}, nil, []int{1, 1, 1, 1}},
		{"row stride only c9", 1, 9, 15, 21, 3, 3, []int{2, 1}, nil, []int{1, 1, 1, 1}},
		{"column stride only c9", 1, 9, 15, 21, 3, 3, []int{1, 2}, nil, []int{1, 1, 1, 1}},
		{"dilated s2 c18", 1, 18, 19, 23, 3, 3, []int{2, 2}, []int{2, 2}, []int{2, 2, 2, 2}},
		{"kernel wider than input c3", 1, 3, 2, 3, 5, 5, nil, nil, []int{2, 2, 2, 2}},
		{"1x1 c21", 2, 21, 6, 9, 1, 1, nil, nil, nil},
		{"7x1 c4", 1, 4, 12, 10, 7, 1, nil, nil, []int{3, 0, 3, 0}},
		{"strips 3x3 s1 90x100 c17", 1, 17, 90, 100, 3, 3, nil, nil, []int{1, 1, 1, 1}},
		{"strips 5x5 s2 75x61 c3", 2, 3, 75, 61, 5, 5, []int{2, 2}, nil, []int{2, 2, 2, 2}},
		{"strips big bottom pad c2", 1, 2, 40, 120, 3, 3, nil, nil, []int{0, 1, 4, 1}},
	}
	eps := []ir.Epilogue{{}, {Act: ir.ActRelu}, {Act: ir.ActSiLU}, {Act: ir.ActHardSwish}}
	r := rand.New(rand.NewPCG(6, 2))
	for _, c := range cases {
		for _, e := range eps {
			t.Run(fmt.Sprintf("%s/act%d", c.name, e.Act), func(t *testing.T) {
				op := &ir.Conv{Strides: c.strides, Dilations: c.dil, Pads: c.pads, Group: c.c, Epilogue: e}
				p := check(t, oneNode(op, 1, f32in(c.n, c.c, c.h, c.w), randConst(r, c.c, 1, c.kh, c.kw), randConst(r, c.c)), 1e-5)
				if _, ok := p.steps[0].s.(*dwBlockStep); !ok {
					t.Fatalf("step %T, want the blocked kernel", p.steps[0].s)
				}
			})
		}
	}
	t.Run("no bias", func(t *testing.T) {
		op := &ir.Conv{Pads: []int{1, 1, 1, 1}, Group: 19}
		check(t, oneNode(op, 1, f32in(2, 19, 10, 10), randConst(r, 19, 1, 3, 3)), 1e-5)
	})
}

// TestDirectConvsAllocateNothing runs the blocked depthwise and the
// direct few-channel steps again and again: no allocation per forward,
// and the same answer each time (the workers' tiles carry nothing over).
func TestDirectConvsAllocateNothing(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 4))
	for name, g := range map[string]*ir.Graph{
		"depthwise": oneNode(&ir.Conv{Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}, Group: 20, Epilogue: ir.Epilogue{Act: ir.ActSiLU}},
			1, f32in(2, 20, 40, 40), randConst(r, 20, 1, 3, 3), randConst(r, 20)),
		"stem": oneNode(&ir.Conv{Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}, Group: 1, Epilogue: ir.Epilogue{Act: ir.ActHardSwish}},
			1, f32in(2, 3, 48, 48), randConst(r, 20, 3, 3, 3), randConst(r, 20)),
	} {
		t.Run(name, func(t *testing.T) {
			b, err := ir.Bind(g, 2)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Compile(context.Background(), b, Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			x := p.NewExec()
			defer x.Close()
			in := randTensor(r, b.Inputs[0].Type)
			first, err := x.RunTensors(context.Background(), []*tensor.Tensor{in})
			if err != nil {
				t.Fatal(err)
			}
			out := [][]byte{make([]byte, len(first[0].Data))}
			ctx := context.Background()
			if n := testing.AllocsPerRun(10, func() {
				if err := x.Run(ctx, [][]byte{in.Data}, out); err != nil {
					t.Fatal(err)
				}
			}); n != 0 {
				t.Errorf("Run allocates %v times per call, want 0", n)
			}
			if string(out[0]) != string(first[0].Data) {
				t.Errorf("a later run's output differs from the first")
			}
		})
	}
}
