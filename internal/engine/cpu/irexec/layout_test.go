package irexec

import (
	"testing"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

func TestLayoutOps(t *testing.T) {
	i64in := func(shape ...int) in { return in{dt: tensor.Int64, shape: shape} }
	tests := []struct {
		name string
		op   ir.Op
		nout int
		ins  []in
	}{
		{"reshape", &ir.Reshape{}, 1, []in{f32in(2, 3, 4), i64c(4, -1)}},
		{"flatten", &ir.Flatten{Axis: 2}, 1, []in{f32in(2, 3, 4, 5)}},
		{"transpose", &ir.Transpose{Perm: []int{0, 2, 3, 1}}, 1, []in{f32in(2, 3, 5, 7)}},
		{"transpose default", &ir.Transpose{}, 1, []in{f32in(3, 4, 5)}},
		{"transpose int64", &ir.Transpose{Perm: []int{1, 0}}, 1, []in{i64in(5, 3)}},
		{"transpose inner kept", &ir.Transpose{Perm: []int{0, 2, 1, 3}}, 1, []in{f32in(2, 3, 4, 8)}},
		{"transpose of size-1 dimensions", &ir.Transpose{Perm: []int{1, 0, 2}}, 1, []in{f32in(3, 1, 4)}},
		{"transpose of size-1 dimensions 4-d", &ir.Transpose{Perm: []int{2, 1, 3, 0}}, 1, []in{f32in(1, 5, 1, 7)}},
		{"expand", &ir.Expand{}, 1, []in{f32in(3, 1), i64c(2, 3, 4)}},
		{"expand bool", &ir.Expand{}, 1, []in{{dt: tensor.Bool, shape: []int{1, 4}}, i64c(3, 1)}},
		{"concat", &ir.Concat{Axis: 1}, 1, []in{f32in(2, 3, 4), f32in(2, 1, 4), f32in(2, 5, 4)}},
		{"concat last", &ir.Concat{Axis: -1}, 1, []in{f32in(2, 3), f32in(2, 1)}},
		{"split", &ir.Split{Axis: 1, NumOutputs: 3}, 3, []in{f32in(2, 7, 3)}},
		{"split sizes", &ir.Split{Axis: 0}, 2, []in{f32in(5, 2), i64c(2, 3)}},
		{"slice", &ir.Slice{}, 1, []in{f32in(4, 10, 6), i64c(1, 2), i64c(3, -1), i64c(1, 2)}},
		{"slice steps", &ir.Slice{}, 1, []in{f32in(4, 10, 6), i64c(-1, 8), i64c(-100, 1), i64c(0, 1), i64c(-2, -3)}},
		{"pad constant", &ir.Pad{}, 1, []in{f32in(2, 3, 4), i64c(0, 1, 2, 0, 2, 1), f32c(nil, 1.5)}},
		{"pad zero", &ir.Pad{}, 1, []in{f32in(1, 2, 5, 5), i64c(0, 0, 1, 1, 0, 0, 1, 1)}},
		{"pad reflect", &ir.Pad{Mode: "reflect"}, 1, []in{f32in(2, 5, 6), i64c(0, 2, 3, 0, 1, 2)}},
		{"pad edge", &ir.Pad{Mode: "edge"}, 1, []in{f32in(2, 5, 6), i64c(0, 2, 3, 0, 1, 2)}},
		{"tile", &ir.Tile{}, 1, []in{f32in(2, 3), i64c(2, 3)}},
		{"gather const", &ir.Gather{Axis: 1}, 1, []in{f32in(3, 5, 2), i64c(4, 0, -1)}},
		{"gather runtime", &ir.Gather{Axis: 0}, 1, []in{f32c([]int{4, 3}, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12), {dt: tensor.Int64, shape: []int{2, 2}}}},
		{"gather elements runtime", &ir.GatherElements{Axis: 1}, 1, []in{f32in(3, 4, 2), {dt: tensor.Int64, shape: []int{3, 2, 2}}}},
		{"gather elements const", &ir.GatherElements{Axis: -1}, 1, []in{f32in(2, 3), i64shaped([]int{2, 3}, 2, 0, -1, 1, 1, 0)}},
		{"resize nearest scales", &ir.Resize{Mode: "nearest", CoordinateTransformMode: "asymmetric", NearestMode: "floor"}, 1, []in{f32in(1, 2, 3, 4), absent, f32c([]int{4}, 1, 1, 2, 1.5)}},
		{"resize nearest sizes", &ir.Resize{Mode: "nearest", CoordinateTransformMode: "half_pixel", NearestMode: "round_prefer_ceil"}, 1, []in{f32in(2, 2, 5, 5), absent, absent, i64c(2, 2, 3, 8)}},
		{"depth to space", &ir.DepthToSpace{BlockSize: 2, Mode: "DCR"}, 1, []in{f32in(1, 8, 3, 2)}},
		{"space to depth", &ir.SpaceToDepth{BlockSize: 2}, 1, []in{f32in(2, 3, 4, 6)}},
		{"squeeze", &ir.Squeeze{}, 1, []in{f32in(1, 3, 1, 2), i64c(0, 2)}},
		{"unsqueeze", &ir.Unsqueeze{}, 1, []in{f32in(3, 2), i64c(1)}},
		{"cast f32->i64", &ir.Cast{To: tensor.Int64}, 1, []in{f32in(3, 4)}},
		{"cast i64->f32", &ir.Cast{To: tensor.Float32}, 1, []in{i64in(3, 4)}},
		{"cast f32->bool", &ir.Cast{To: tensor.Bool}, 1, []in{f32in(3, 4)}},
		{"cast f32->f16", &ir.Cast{To: tensor.Float16}, 1, []in{f32in(7)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := oneNode(tc.op, tc.nout, tc.ins...)
			if tc.name == "gather runtime" {
				// Indices in range, negatives included.
				checkSeed(t, g, 0, 3)
				return
			}
			check(t, g, 0)
		})
	}
}

// i64shaped is an int64 constant of the given shape.
func i64shaped(shape []int, v ...int64) in {
	c := i64c(v...)
	c.c.Shape = tensor.Shape(shape)
	return c
}

// TestTransposeView checks that a transpose moving only size-1 dimensions
// is a view (no step), and one that reorders longer dimensions is not.
func TestTransposeView(t *testing.T) {
	for _, c := range []struct {
		perm  []int
		shape []int
		steps int
	}{
		{[]int{1, 0, 2}, []int{3, 1, 4}, 0},
		{[]int{2, 1, 3, 0}, []int{1, 5, 1, 7}, 0},
		{[]int{2, 1, 0}, []int{3, 1, 4}, 1},
	} {
		p := check(t, oneNode(&ir.Transpose{Perm: c.perm}, 1, f32in(c.shape...)), 0)
		if len(p.steps) != c.steps {
			t.Errorf("transpose %v of %v: %d steps, want %d", c.perm, c.shape, len(p.steps), c.steps)
		}
	}
}
