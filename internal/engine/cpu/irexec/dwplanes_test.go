package irexec

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"goinfer/internal/ir"
)

// TestDepthwisePlanes covers the phase-plane depthwise path against ir:
// feature maps whose flattened runs end inside and outside the assembly's
// 32- and 8-wide blocks, strides 1 to 3 (2 deinterleaves with vectors),
// odd and even left pads (which phase the first column lands in), zero
// and asymmetric pads, dilations, channel multipliers, kernels wider than
// the input, 1-D, and every fused epilogue part.
func TestDepthwisePlanes(t *testing.T) {
	type cs struct {
		name            string
		n, c, h, w, mul int
		kh, kw          int
		strides, dil    []int
		pads            []int
	}
	cases := []cs{
		{"3x3 s1 56", 1, 3, 56, 56, 1, 3, 3, nil, nil, []int{1, 1, 1, 1}},
		{"3x3 s2 odd 33x35", 2, 3, 33, 35, 1, 3, 3, []int{2, 2}, nil, []int{1, 1, 1, 1}},
		{"3x3 s2 pad 0 left", 1, 4, 20, 41, 1, 3, 3, []int{2, 2}, nil, []int{0, 0, 1, 1}},
		{"3x3 s2 pad 2 left", 1, 2, 18, 40, 1, 3, 3, []int{2, 2}, nil, []int{2, 2, 0, 1}},
		{"5x5 s1 7x7", 2, 9, 7, 7, 1, 5, 5, nil, nil, []int{2, 2, 2, 2}},
		{"5x5 s2 14", 1, 5, 14, 14, 1, 5, 5, []int{2, 2}, nil, []int{2, 2, 2, 2}},
		{"5x5 s1 no pad", 1, 3, 11, 30, 1, 5, 5, nil, nil, nil},
		{"3x3 s3", 1, 3, 16, 29, 1, 3, 3, []int{3, 3}, nil, []int{1, 1, 1, 1}},
		{"row stride only", 1, 3, 15, 21, 1, 3, 3, []int{2, 1}, nil, []int{1, 1, 1, 1}},
		{"column stride only", 1, 3, 15, 21, 1, 3, 3, []int{1, 2}, nil, []int{1, 1, 1, 1}},
		{"dilated s2", 1, 4, 19, 23, 1, 3, 3, []int{2, 2}, []int{2, 2}, []int{2, 2, 2, 2}},
		{"multiplier 3 s2", 1, 4, 12, 17, 3, 3, 3, []int{2, 2}, nil, []int{1, 1, 1, 1}},
		{"kernel wider than input", 1, 3, 2, 3, 1, 5, 5, nil, nil, []int{2, 2, 2, 2}},
		{"1x1 depthwise", 2, 5, 6, 9, 1, 1, 1, nil, nil, nil},
		{"7x1", 1, 4, 12, 10, 1, 7, 1, nil, nil, []int{3, 0, 3, 0}},
	}
	eps := []ir.Epilogue{{}, {Act: ir.ActRelu}, {Act: ir.ActSiLU}, {Act: ir.ActHardSwish, Residual: true}, {Act: ir.ActRelu6}}
	r := rand.New(rand.NewPCG(4, 9))
	// Constant weights without a residual take the blocked kernel
	// (dwblock.go) unless it is off.
	opts := Options{Threads: 2, noDWBlocks: true}
	for _, c := range cases {
		for _, e := range eps {
			t.Run(fmt.Sprintf("%s/act%d/res%v", c.name, e.Act, e.Residual), func(t *testing.T) {
				op := &ir.Conv{Strides: c.strides, Dilations: c.dil, Pads: c.pads, Group: c.c, Epilogue: e}
				ins := []in{f32in(c.n, c.c, c.h, c.w), randConst(r, c.c*c.mul, 1, c.kh, c.kw), randConst(r, c.c*c.mul)}
				if e.Residual {
					oh, ow := convOut(c.h, c.kh, c.strides, c.dil, c.pads, 0), convOut(c.w, c.kw, c.strides, c.dil, c.pads, 1)
					ins = append(ins, f32in(c.n, c.c*c.mul, oh, ow))
				}
				p := checkOpts(t, oneNode(op, 1, ins...), 1e-5, 1, opts)
				for _, st := range p.steps {
					if _, ok := st.s.(*dwBlockStep); ok {
						t.Fatalf("%s took the blocked kernel, with it off", st.node)
					}
				}
			})
		}
	}
	t.Run("runtime weights and bias", func(t *testing.T) {
		op := &ir.Conv{Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}, Group: 6}
		check(t, oneNode(op, 1, f32in(2, 6, 13, 17), f32in(6, 1, 3, 3), f32in(6)), 1e-5)
	})
	t.Run("1-D", func(t *testing.T) {
		op := &ir.Conv{Strides: []int{2}, Pads: []int{2, 1}, Group: 4}
		check(t, oneNode(op, 1, f32in(2, 4, 37), randConst(r, 8, 1, 5)), 1e-5)
	})
}

// convOut is a convolution's output extent along spatial axis i.
func convOut(in, k int, strides, dil, pads []int, i int) int {
	s, d, p := 1, 1, 0
	if strides != nil {
		s = strides[i]
	}
	if dil != nil {
		d = dil[i]
	}
	if pads != nil {
		p = pads[i] + pads[i+len(pads)/2]
	}
	return (in+p-(k-1)*d-1)/s + 1
}
