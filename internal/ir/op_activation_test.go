package ir

import (
	"math"
	"testing"

	"goinfer/internal/tensor"
)

func TestActivations(t *testing.T) {
	x := arrOf(f32T, tensor.Shape{4}, -2, -0.5, 0, 3)
	v := func(vs ...float64) *Array { return arrOf(f32T, tensor.Shape{len(vs)}, vs...) }
	sc := func(s float64) *Array { return arrOf(f32T, tensor.Shape{}, s) }
	e := math.Expm1
	runOpCases(t, []opCase{
		{name: "leakyrelu", op: &LeakyRelu{Alpha: 0.1}, in: []*Array{x}, want: []*Array{v(-0.2, -0.05, 0, 3)}},
		{name: "elu", op: &Elu{Alpha: 2}, in: []*Array{x}, want: []*Array{v(2*e(-2), 2*e(-0.5), 0, 3)}},
		{name: "selu", op: &Selu{Alpha: 2, Gamma: 3}, in: []*Array{x}, want: []*Array{v(6*e(-2), 6*e(-0.5), 0, 9)}},
		{name: "celu", op: &Celu{Alpha: 2}, in: []*Array{x}, want: []*Array{v(2*e(-1), 2*e(-0.25), 0, 3)}},
		{name: "hardsigmoid", op: &HardSigmoid{Alpha: 0.2, Beta: 0.5}, in: []*Array{x}, want: []*Array{v(0.1, 0.4, 0.5, 1)}},
		{name: "gelu", op: &Gelu{}, in: []*Array{x}, want: []*Array{v(-2*0.5*math.Erfc(math.Sqrt2), -0.5*0.5*math.Erfc(0.5/math.Sqrt2), 0, 3*0.5*(1+math.Erf(3/math.Sqrt2)))}},
		{name: "gelu_tanh", op: &Gelu{Tanh: true}, in: []*Array{v(1)}, want: []*Array{v(0.5 * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(1+0.044715))))}},
		{name: "thresholdedrelu", op: &ThresholdedRelu{Alpha: 1}, in: []*Array{x}, want: []*Array{v(0, 0, 0, 3)}},
		{name: "shrink", op: &Shrink{Bias: 1, Lambd: 1}, in: []*Array{x}, want: []*Array{v(-1, 0, 0, 2)}},
		{name: "clip_both", op: &Clip{}, in: []*Array{x, sc(-1), sc(1)}, want: []*Array{v(-1, -0.5, 0, 1)}},
		{name: "clip_max_only", op: &Clip{}, in: []*Array{x, nil, sc(0)}, want: []*Array{v(-2, -0.5, 0, 0)}},
		{name: "clip_none", op: &Clip{}, in: []*Array{x}, want: []*Array{x}},
		{name: "clip_min_above_max", op: &Clip{}, in: []*Array{x, sc(2), sc(1)}, want: []*Array{v(1, 1, 1, 1)}},
		{name: "clip_int", op: &Clip{}, in: []*Array{i64s(-5, 5), arrOf(i64T, tensor.Shape{}, 0), nil}, want: []*Array{i64s(0, 5)}},
		{name: "clip_dtype_mismatch", op: &Clip{}, in: []*Array{x, arrOf(i64T, tensor.Shape{}, 0)}, err: "min"},
		{name: "clip_vector_bound", op: &Clip{}, in: []*Array{x, v(0, 1)}, err: "scalar"},
		{name: "leakyrelu_int", op: &LeakyRelu{}, in: []*Array{i64s(1)}, err: "floating-point"},
	})
}

func TestSoftmax(t *testing.T) {
	x := arrOf(f32T, tensor.Shape{2, 2}, 0, math.Log(3), 1, 1)
	runOpCases(t, []opCase{
		{name: "last_axis", op: &Softmax{Axis: -1}, in: []*Array{x}, want: []*Array{arrOf(f32T, tensor.Shape{2, 2}, 0.25, 0.75, 0.5, 0.5)}},
		{name: "axis0", op: &Softmax{Axis: 0}, in: []*Array{arrOf(f32T, tensor.Shape{2, 2}, 0, 1, math.Log(3), 1)},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 2}, 0.25, 0.5, 0.75, 0.5)}},
		{name: "log", op: &Softmax{Axis: 1, Log: true}, in: []*Array{x}, want: []*Array{arrOf(f32T, tensor.Shape{2, 2}, math.Log(0.25), math.Log(0.75), math.Log(0.5), math.Log(0.5))}},
		{name: "hardmax_first_max", op: &Softmax{Axis: -1, Hard: true}, in: []*Array{arrOf(f32T, tensor.Shape{2, 3}, 1, 3, 3, 5, 0, 1)},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 3}, 0, 1, 0, 1, 0, 0)}},
		// Before opset 13 axis=0 makes the whole tensor one row.
		{name: "coerce2d", op: &Softmax{Axis: 0, Coerce2D: true}, in: []*Array{arrOf(f32T, tensor.Shape{2, 2}, 0, 0, 0, math.Log(5))},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 2}, 0.125, 0.125, 0.125, 0.625)}},
		{name: "large_values_stable", op: &Softmax{Axis: -1}, in: []*Array{arrOf(f32T, tensor.Shape{2}, 1000, 1000)}, want: []*Array{arrOf(f32T, tensor.Shape{2}, 0.5, 0.5)}},
		{name: "bad_axis", op: &Softmax{Axis: 2}, in: []*Array{x}, err: "axis 2"},
	})
}
