package ir

import (
	"errors"
	"testing"

	"goinfer/internal/tensor"
)

func TestResize(t *testing.T) {
	f := func(vs ...float64) *Array { return arrOf(f32T, tensor.Shape{len(vs)}, vs...) }
	base := func(mode, coord string) *Resize {
		return &Resize{Mode: mode, CoordinateTransformMode: coord, NearestMode: "round_prefer_floor", CubicCoeffA: -0.75}
	}
	with := func(r *Resize, edit func(*Resize)) *Resize { edit(r); return r }
	x4 := iotaArr(f32T, tensor.Shape{4})
	runOpCases(t, []opCase{
		{name: "upsample_nearest_legacy", op: &Resize{Mode: "nearest", CoordinateTransformMode: "asymmetric", NearestMode: "floor", ScalesOnly: true},
			in: []*Array{f(1, 2), f(2)}, want: []*Array{f(1, 1, 2, 2)}},
		{name: "linear_half_pixel_sizes", op: base("linear", "half_pixel"), in: []*Array{f(0, 1), nil, nil, i64s(4)},
			want: []*Array{f(0, 0.25, 0.75, 1)}},
		{name: "linear_align_corners", op: base("linear", "align_corners"), in: []*Array{f(0, 2), nil, nil, i64s(3)},
			want: []*Array{f(0, 1, 2)}},
		{name: "nearest_round_prefer_ceil", op: with(base("nearest", "asymmetric"), func(r *Resize) { r.NearestMode = "round_prefer_ceil" }),
			in: []*Array{f(0, 1), nil, f(4)}, want: []*Array{f(0, 0, 1, 1, 1, 1, 1, 1)}},
		{name: "nearest_round_prefer_floor", op: base("nearest", "asymmetric"),
			in: []*Array{f(0, 1), nil, f(4)}, want: []*Array{f(0, 0, 0, 1, 1, 1, 1, 1)}},
		{name: "cubic_identity_scale", op: base("cubic", "half_pixel"), in: []*Array{x4, nil, f(1)}, want: []*Array{x4}},
		{name: "tf_crop_and_resize_extrapolates", op: with(base("linear", "tf_crop_and_resize"), func(r *Resize) { r.ExtrapolationValue = 9 }),
			in: []*Array{f(0, 1, 2), f(0.5, 1.5), nil, i64s(3)}, want: []*Array{f(1, 2, 9)}},
		{name: "antialias_linear_halves", op: with(base("linear", "half_pixel"), func(r *Resize) { r.Antialias = true }),
			in: []*Array{x4, nil, f(0.5)}, want: []*Array{f(0.625, 2.375)}},
		{name: "keep_aspect_not_larger", op: with(base("nearest", "half_pixel"), func(r *Resize) { r.Axes = []int{2, 3}; r.KeepAspectRatioPolicy = "not_larger" }),
			in:   []*Array{iotaArr(f32T, tensor.Shape{1, 1, 2, 4}), nil, nil, i64s(4, 4)},
			want: []*Array{iotaArr(f32T, tensor.Shape{1, 1, 2, 4})}},
		{name: "axes_subset_2d", op: with(base("nearest", "asymmetric"), func(r *Resize) { r.Axes = []int{-1} }),
			in:   []*Array{iotaArr(f32T, tensor.Shape{2, 2}), nil, f(2)},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 4}, 0, 0, 1, 1, 2, 2, 3, 3)}},
		{name: "uint8_nearest", op: base("nearest", "asymmetric"), in: []*Array{arrOf(tensor.Uint8, tensor.Shape{2}, 7, 9), nil, f(2)},
			want: []*Array{arrOf(tensor.Uint8, tensor.Shape{4}, 7, 7, 9, 9)}},
		{name: "both_scales_and_sizes", op: base("nearest", "asymmetric"), in: []*Array{x4, nil, f(2), i64s(8)}, err: "both given"},
		{name: "neither", op: base("nearest", "asymmetric"), in: []*Array{x4}, err: "neither scales nor sizes"},
		{name: "bad_mode", op: base("area", "asymmetric"), in: []*Array{x4, nil, f(2)}, err: `mode "area"`},
		{name: "bad_coordinate_mode", op: base("linear", "center"), in: []*Array{x4, nil, f(2)}, err: "coordinate_transformation_mode"},
		{name: "antialias_nearest", op: with(base("nearest", "asymmetric"), func(r *Resize) { r.Antialias = true }), in: []*Array{x4, nil, f(2)}, err: "antialias"},
		{name: "scales_length", op: base("nearest", "asymmetric"), in: []*Array{x4, nil, f(2, 2)}, err: "want 1"},
		{name: "negative_scale", op: base("nearest", "asymmetric"), in: []*Array{x4, nil, f(-2)}, err: "positive"},
		{name: "huge_scale", op: base("nearest", "asymmetric"), in: []*Array{x4, nil, f(1e30)}, err: "too large"},
		{name: "shrinks_to_nothing", op: base("nearest", "asymmetric"), in: []*Array{x4, nil, f(0.1)}, err: "resizes to 0"},
	})
}

func TestResizeSizesMustBeKnown(t *testing.T) {
	x := &Value{Name: "x", Type: Type{DType: f32T, Shape: tensor.Shape{1, 4}}}
	sizes := &Value{Name: "sizes", Type: Type{DType: i64T, Shape: tensor.Shape{2}}}
	r := &Resize{Mode: "nearest", CoordinateTransformMode: "asymmetric", NearestMode: "floor"}
	_, err := r.Infer([]*Value{x, nil, nil, sizes})
	if !errors.Is(err, ErrNotConstant) {
		t.Fatalf("error %v, want ErrNotConstant", err)
	}
}
