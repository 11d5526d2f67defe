package irexec

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"goinfer/internal/engine/cpu/vec"
	"goinfer/internal/ir"
)

// TestTapsConv covers the direct few-channel convolution (the stem)
// against ir: output channels below, at and past a group of 16, strides
// 1 to 3 and per axis, kernels 1 to 7 (a ResNet stem's 147 taps), asymmetric and zero padding,
// dilation, maps of one strip and of many, batches, fused activations.
func TestTapsConv(t *testing.T) {
	type cs struct {
		name         string
		n, c, m      int
		h, w, kh, kw int
		strides, dil []int
		pads         []int
	}
	cases := []cs{
		{"stem 3->16 s2", 1, 3, 16, 32, 32, 3, 3, []int{2, 2}, nil, []int{1, 1, 1, 1}},
		{"stem 3->64 7x7 s2", 1, 3, 64, 38, 35, 7, 7, []int{2, 2}, nil, []int{3, 3, 3, 3}},
		{"stem 3->32 s2 odd", 2, 3, 32, 33, 29, 3, 3, []int{2, 2}, nil, []int{1, 1, 1, 1}},
		{"3->17 s1", 1, 3, 17, 12, 13, 3, 3, nil, nil, []int{1, 1, 1, 1}},
		{"2->5 3x5 s2 asym", 1, 2, 5, 21, 19, 3, 5, []int{2, 2}, nil, []int{2, 1, 0, 2}},
		{"2->33 s3 no pad", 2, 2, 33, 26, 31, 3, 3, []int{3, 3}, nil, nil},
		{"3->7 row stride", 1, 3, 7, 15, 21, 3, 3, []int{2, 1}, nil, []int{1, 1, 1, 1}},
		{"3->7 column stride", 1, 3, 7, 15, 21, 3, 3, []int{1, 2}, nil, []int{1, 1, 1, 1}},
		{"3->9 dilated", 1, 3, 9, 20, 20, 3, 3, []int{2, 2}, []int{2, 2}, []int{2, 2, 2, 2}},
		{"4->16 3x1", 1, 4, 16, 10, 10, 3, 1, nil, nil, []int{1, 0, 1, 0}},
		{"strips 3->16 s2 160x150", 1, 3, 16, 160, 150, 3, 3, []int{2, 2}, nil, []int{1, 1, 1, 1}},
		{"strips 3->18 s1 90x70 bottom pad", 1, 3, 18, 90, 70, 3, 3, nil, nil, []int{0, 1, 3, 1}},
	}
	eps := []ir.Epilogue{{}, {Act: ir.ActRelu}, {Act: ir.ActSiLU}, {Act: ir.ActHardSwish}}
	r := rand.New(rand.NewPCG(3, 5))
	for _, c := range cases {
		for _, e := range eps {
			t.Run(fmt.Sprintf("%s/act%d", c.name, e.Act), func(t *testing.T) {
				op := &ir.Conv{Strides: c.strides, Dilations: c.dil, Pads: c.pads, Group: 1, Epilogue: e}
				p := check(t, oneNode(op, 1, f32in(c.n, c.c, c.h, c.w), randConst(r, c.m, c.c, c.kh, c.kw), randConst(r, c.m)), 1e-5)
				if _, ok := p.steps[0].s.(*tapsConvStep); !ok && vec.TapsNFast() {
					t.Fatalf("step %T, want the direct kernel", p.steps[0].s)
				}
			})
		}
	}
	t.Run("no bias", func(t *testing.T) {
		op := &ir.Conv{Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}, Group: 1}
		check(t, oneNode(op, 1, f32in(1, 3, 24, 24), randConst(r, 20, 3, 3, 3)), 1e-5)
	})
	if !vec.TapsNFast() {
		t.Log("no AVX-512: these convolutions took the GEMM path")
	}
}
