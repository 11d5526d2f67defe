package ir

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"goinfer/internal/tensor"
)

func intPtr(i int) *int { return &i }

func TestShape(t *testing.T) {
	x := arrOf(f32T, tensor.Shape{2, 3, 4})
	runOpCases(t, []opCase{
		{name: "all", op: &Shape{}, in: []*Array{x}, want: []*Array{i64s(2, 3, 4)}},
		{name: "start_1", op: &Shape{Start: 1}, in: []*Array{x}, want: []*Array{i64s(3, 4)}},
		{name: "start_negative_1", op: &Shape{Start: -1}, in: []*Array{x}, want: []*Array{i64s(4)}},
		{name: "end_negative_1", op: &Shape{End: intPtr(-1)}, in: []*Array{x}, want: []*Array{i64s(2, 3)}},
		{name: "start_1_end_2", op: &Shape{Start: 1, End: intPtr(2)}, in: []*Array{x}, want: []*Array{i64s(3)}},
		{name: "clip_start", op: &Shape{Start: -10}, in: []*Array{x}, want: []*Array{i64s(2, 3, 4)}},
		{name: "clip_end", op: &Shape{End: intPtr(10)}, in: []*Array{x}, want: []*Array{i64s(2, 3, 4)}},
		{name: "start_greater_than_end", op: &Shape{Start: 2, End: intPtr(1)}, in: []*Array{x}, want: []*Array{i64s()}},
		{name: "scalar", op: &Shape{}, in: []*Array{arrOf(f32T, tensor.Shape{}, 1)}, want: []*Array{i64s()}},
		{name: "runtime_input", op: &Shape{}, in: []*Array{x}, nonConst: []int{0}, want: []*Array{i64s(2, 3, 4)}},
		{name: "two_inputs", op: &Shape{}, in: []*Array{x, x}, err: "takes 1 inputs, got 2"},
	})
	got, err := (&Shape{Start: 1}).EvalTypes([]Type{{DType: f32T, Shape: tensor.Shape{5, 6, 7}}})
	if err != nil || !arraysClose(got[0], i64s(6, 7)) {
		t.Errorf("EvalTypes = %v, %v; want [6 7]", got, err)
	}
}

func TestSize(t *testing.T) {
	runOpCases(t, []opCase{
		{name: "3d", op: &Size{}, in: []*Array{arrOf(f32T, tensor.Shape{2, 3, 4})}, want: []*Array{arrOf(i64T, tensor.Shape{}, 24)}},
		{name: "empty", op: &Size{}, in: []*Array{arrOf(f32T, tensor.Shape{2, 0})}, want: []*Array{arrOf(i64T, tensor.Shape{}, 0)}},
	})
	got, err := (&Size{}).EvalTypes([]Type{{DType: f32T, Shape: tensor.Shape{5, 6}}})
	if err != nil || got[0].Data[0] != 30 {
		t.Errorf("EvalTypes = %v, %v; want 30", got, err)
	}
}

func TestReshape(t *testing.T) {
	x := iotaArr(f32T, tensor.Shape{2, 3, 4})
	with := func(shape ...int) *Array {
		a := iotaArr(f32T, tensor.Shape(shape))
		return a
	}
	runOpCases(t, []opCase{
		{name: "negative_dim", op: &Reshape{}, in: []*Array{x, i64s(4, -1)}, want: []*Array{with(4, 6)}},
		{name: "zero_copies", op: &Reshape{}, in: []*Array{x, i64s(0, -1)}, want: []*Array{with(2, 12)}},
		{name: "zero_and_negative", op: &Reshape{}, in: []*Array{x, i64s(2, 0, 1, -1)}, want: []*Array{with(2, 3, 1, 4)}},
		{name: "extended_dims", op: &Reshape{}, in: []*Array{x, i64s(2, 3, 2, 2)}, want: []*Array{with(2, 3, 2, 2)}},
		{name: "one_dim", op: &Reshape{}, in: []*Array{x, i64s(24)}, want: []*Array{with(24)}},
		{name: "allowzero", op: &Reshape{AllowZero: true}, in: []*Array{arrOf(f32T, tensor.Shape{0, 3, 4}), i64s(3, 4, 0)}, want: []*Array{with(3, 4, 0)}},
		{name: "int32_shape", op: &Reshape{}, in: []*Array{x, arrOf(tensor.Int32, tensor.Shape{2}, 6, 4)}, want: []*Array{with(6, 4)}},
		{name: "allowzero_with_negative", op: &Reshape{AllowZero: true}, in: []*Array{x, i64s(0, -1)}, err: "both a 0 and a -1"},
		{name: "two_negatives", op: &Reshape{}, in: []*Array{x, i64s(-1, -1)}, err: "more than one -1"},
		{name: "bad_negative", op: &Reshape{}, in: []*Array{x, i64s(-2, 12)}, err: "negative dimension -2"},
		{name: "count_mismatch", op: &Reshape{}, in: []*Array{x, i64s(5, 5)}, err: "cannot reshape [2 3 4] (24 elements) to [5 5]"},
		{name: "indivisible", op: &Reshape{}, in: []*Array{x, i64s(5, -1)}, err: "the -1 has no integer size"},
		{name: "zero_beyond_rank", op: &Reshape{}, in: []*Array{arrOf(f32T, tensor.Shape{4}), i64s(4, 0)}, err: "copies dimension 1 (a 0) of an input of rank 1"},
		{name: "not_constant", op: &Reshape{}, in: []*Array{x, i64s(24)}, nonConst: []int{1}, err: `Reshape's shape input "in1" is not known at load time`},
		{name: "float_shape", op: &Reshape{}, in: []*Array{x, arrOf(f32T, tensor.Shape{1}, 24)}, err: "want int64 or int32"},
	})
}

func TestFlatten(t *testing.T) {
	x := iotaArr(f32T, tensor.Shape{2, 3, 4})
	runOpCases(t, []opCase{
		{name: "axis0", op: &Flatten{}, in: []*Array{x}, want: []*Array{iotaArr(f32T, tensor.Shape{1, 24})}},
		{name: "axis2", op: &Flatten{Axis: 2}, in: []*Array{x}, want: []*Array{iotaArr(f32T, tensor.Shape{6, 4})}},
		{name: "axis3", op: &Flatten{Axis: 3}, in: []*Array{x}, want: []*Array{iotaArr(f32T, tensor.Shape{24, 1})}},
		{name: "negative_axis", op: &Flatten{Axis: -2}, in: []*Array{x}, want: []*Array{iotaArr(f32T, tensor.Shape{2, 12})}},
		{name: "out_of_range", op: &Flatten{Axis: 4}, in: []*Array{x}, err: "Flatten's axis 4 is out of range for rank 3"},
	})
}

func TestTranspose(t *testing.T) {
	x := iotaArr(f32T, tensor.Shape{2, 3})
	y := iotaArr(f32T, tensor.Shape{2, 1, 3})
	runOpCases(t, []opCase{
		{name: "default_reverses", op: &Transpose{}, in: []*Array{x}, want: []*Array{arrOf(f32T, tensor.Shape{3, 2}, 0, 3, 1, 4, 2, 5)}},
		{name: "perm", op: &Transpose{Perm: []int{2, 0, 1}}, in: []*Array{y}, want: []*Array{arrOf(f32T, tensor.Shape{3, 2, 1}, 0, 3, 1, 4, 2, 5)}},
		{name: "identity", op: &Transpose{Perm: []int{0, 1, 2}}, in: []*Array{y}, want: []*Array{y}},
		{name: "short_perm", op: &Transpose{Perm: []int{1, 0}}, in: []*Array{y}, err: "has 2 entries for an input of rank 3"},
		{name: "repeated_axis", op: &Transpose{Perm: []int{1, 1, 0}}, in: []*Array{y}, err: "names axis 1 twice"},
	})
}

func TestSqueezeUnsqueeze(t *testing.T) {
	x := iotaArr(f32T, tensor.Shape{1, 3, 1, 2})
	runOpCases(t, []opCase{
		{name: "squeeze_all", op: &Squeeze{}, in: []*Array{x}, want: []*Array{iotaArr(f32T, tensor.Shape{3, 2})}},
		{name: "squeeze_axis", op: &Squeeze{}, in: []*Array{x, i64s(0)}, want: []*Array{iotaArr(f32T, tensor.Shape{3, 1, 2})}},
		{name: "squeeze_negative_axis", op: &Squeeze{}, in: []*Array{x, i64s(-2)}, want: []*Array{iotaArr(f32T, tensor.Shape{1, 3, 2})}},
		{name: "squeeze_absent_axes", op: &Squeeze{}, in: []*Array{x, nil}, want: []*Array{iotaArr(f32T, tensor.Shape{3, 2})}},
		{name: "squeeze_not_one", op: &Squeeze{}, in: []*Array{x, i64s(1)}, err: "dimension 1 of [1 3 1 2] has size 3, not 1"},
		{name: "squeeze_not_constant", op: &Squeeze{}, in: []*Array{x, i64s(0)}, nonConst: []int{1}, err: `Squeeze's axes input "in1" is not known at load time`},
		{name: "unsqueeze_front", op: &Unsqueeze{}, in: []*Array{iotaArr(f32T, tensor.Shape{3, 4}), i64s(0)}, want: []*Array{iotaArr(f32T, tensor.Shape{1, 3, 4})}},
		{name: "unsqueeze_negative", op: &Unsqueeze{}, in: []*Array{iotaArr(f32T, tensor.Shape{3, 4}), i64s(-1)}, want: []*Array{iotaArr(f32T, tensor.Shape{3, 4, 1})}},
		{name: "unsqueeze_unsorted", op: &Unsqueeze{}, in: []*Array{iotaArr(f32T, tensor.Shape{3, 4}), i64s(3, 0)}, want: []*Array{iotaArr(f32T, tensor.Shape{1, 3, 4, 1})}},
		{name: "unsqueeze_scalar", op: &Unsqueeze{}, in: []*Array{arrOf(i64T, tensor.Shape{}, 7), i64s(0)}, want: []*Array{i64s(7)}},
		{name: "unsqueeze_repeated", op: &Unsqueeze{}, in: []*Array{iotaArr(f32T, tensor.Shape{3}), i64s(0, -3)}, err: "names axis 0 twice"},
		{name: "unsqueeze_out_of_range", op: &Unsqueeze{}, in: []*Array{iotaArr(f32T, tensor.Shape{3}), i64s(2)}, err: "Unsqueeze's axes 2 is out of range for rank 2"},
		{name: "unsqueeze_no_axes", op: &Unsqueeze{}, in: []*Array{iotaArr(f32T, tensor.Shape{3})}, err: "takes 2 inputs"},
	})
}

func TestConcat(t *testing.T) {
	a := arrOf(f32T, tensor.Shape{1, 2}, 1, 2)
	b := arrOf(f32T, tensor.Shape{2, 2}, 3, 4, 5, 6)
	runOpCases(t, []opCase{
		{name: "axis0", op: &Concat{}, in: []*Array{a, b}, want: []*Array{arrOf(f32T, tensor.Shape{3, 2}, 1, 2, 3, 4, 5, 6)}},
		{name: "axis_negative_1", op: &Concat{Axis: -1}, in: []*Array{b, b}, want: []*Array{arrOf(f32T, tensor.Shape{2, 4}, 3, 4, 3, 4, 5, 6, 5, 6)}},
		{name: "shape_vectors", op: &Concat{}, in: []*Array{i64s(2), i64s(-1, 3)}, want: []*Array{i64s(2, -1, 3)}},
		{name: "empty_part", op: &Concat{}, in: []*Array{i64s(), i64s(5)}, want: []*Array{i64s(5)}},
		{name: "dim_mismatch", op: &Concat{Axis: 1}, in: []*Array{a, b}, err: "input 1 [2 2] and input 0 [1 2] differ in dimension 0"},
		{name: "rank_mismatch", op: &Concat{}, in: []*Array{a, i64s(1)}, err: "differ in rank"},
		{name: "dtype_mismatch", op: &Concat{}, in: []*Array{a, arrOf(i64T, tensor.Shape{1, 2})}, err: "input 1 is int64[1,2], input 0 is float32[1,2]"},
		{name: "scalars", op: &Concat{}, in: []*Array{arrOf(f32T, tensor.Shape{})}, err: "Concat of scalars"},
	})
}

func TestSplit(t *testing.T) {
	x := iotaArr(f32T, tensor.Shape{6})
	m := iotaArr(f32T, tensor.Shape{2, 3})
	f := func(v ...float64) *Array { return arrOf(f32T, tensor.Shape{len(v)}, v...) }
	runOpCases(t, []opCase{
		{name: "sizes", op: &Split{}, in: []*Array{x, i64s(2, 4)}, want: []*Array{f(0, 1), f(2, 3, 4, 5)}},
		{name: "equal_parts", op: &Split{NumOutputs: 3}, in: []*Array{x}, want: []*Array{f(0, 1), f(2, 3), f(4, 5)}},
		{name: "uneven_last_smaller", op: &Split{NumOutputs: 4}, in: []*Array{iotaArr(f32T, tensor.Shape{7})}, want: []*Array{f(0, 1), f(2, 3), f(4, 5), f(6)}},
		{name: "zero_size", op: &Split{}, in: []*Array{x, i64s(6, 0)}, want: []*Array{x, f()}},
		{name: "empty_split_is_equal_parts", op: &Split{NumOutputs: 2}, in: []*Array{x, i64s()}, want: []*Array{f(0, 1, 2), f(3, 4, 5)}},
		{name: "axis1", op: &Split{Axis: -1}, in: []*Array{m, i64s(1, 2)},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 1}, 0, 3), arrOf(f32T, tensor.Shape{2, 2}, 1, 2, 4, 5)}},
		{name: "sum_mismatch", op: &Split{}, in: []*Array{x, i64s(2, 2)}, err: "add up to 4, dimension 0 of [6] is 6"},
		{name: "count_mismatch", op: &Split{NumOutputs: 3}, in: []*Array{x, i64s(2, 4)}, err: "make 2 outputs, the node has 3"},
		{name: "no_count", op: &Split{}, in: []*Array{x}, err: "neither split sizes nor a number of outputs"},
		{name: "too_many_parts", op: &Split{NumOutputs: 4}, in: []*Array{iotaArr(f32T, tensor.Shape{5})}, err: "leaves the last one negative"},
		{name: "not_constant", op: &Split{}, in: []*Array{x, i64s(3, 3)}, nonConst: []int{1}, err: "Split's split input \"in1\" is not known at load time"},
	})
	s := &Split{}
	s.SetOutputCount(2)
	s.SetOutputCount(5) // already set: kept
	if s.NumOutputs != 2 {
		t.Errorf("SetOutputCount: NumOutputs %d, want 2", s.NumOutputs)
	}
}

func TestSlice(t *testing.T) {
	x := iotaArr(f32T, tensor.Shape{3, 4})
	runOpCases(t, []opCase{
		{name: "basic", op: &Slice{}, in: []*Array{x, i64s(0, 1), i64s(2, 3)}, want: []*Array{arrOf(f32T, tensor.Shape{2, 2}, 1, 2, 5, 6)}},
		{name: "axes_and_steps", op: &Slice{}, in: []*Array{x, i64s(0), i64s(4), i64s(1), i64s(2)}, want: []*Array{arrOf(f32T, tensor.Shape{3, 2}, 0, 2, 4, 6, 8, 10)}},
		{name: "negative_axes", op: &Slice{}, in: []*Array{x, i64s(1), i64s(3), i64s(-1)}, want: []*Array{arrOf(f32T, tensor.Shape{3, 2}, 1, 2, 5, 6, 9, 10)}},
		{name: "negative_bounds", op: &Slice{}, in: []*Array{x, i64s(-2), i64s(-1)}, want: []*Array{arrOf(f32T, tensor.Shape{1, 4}, 4, 5, 6, 7)}},
		{name: "end_out_of_bounds", op: &Slice{}, in: []*Array{x, i64s(1), i64s(1000), i64s(1)}, want: []*Array{arrOf(f32T, tensor.Shape{3, 3}, 1, 2, 3, 5, 6, 7, 9, 10, 11)}},
		{name: "start_out_of_bounds", op: &Slice{}, in: []*Array{x, i64s(1000), i64s(1001), i64s(1)}, want: []*Array{arrOf(f32T, tensor.Shape{3, 0})}},
		{name: "reverse", op: &Slice{}, in: []*Array{x, i64s(-1), i64s(-1000), i64s(1), i64s(-1)}, want: []*Array{arrOf(f32T, tensor.Shape{3, 4}, 3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8)}},
		{name: "negative_steps_clamped", op: &Slice{}, in: []*Array{x, i64s(20, 10), i64s(0, 0), nil, i64s(-1, -3)}, want: []*Array{arrOf(f32T, tensor.Shape{2, 1}, 11, 7)}},
		{name: "negative_step_empty", op: &Slice{}, in: []*Array{x, i64s(0), i64s(2), i64s(1), i64s(-1)}, want: []*Array{arrOf(f32T, tensor.Shape{3, 0})}},
		{name: "zero_step", op: &Slice{}, in: []*Array{x, i64s(0), i64s(2), i64s(0), i64s(0)}, err: "steps [0] have a 0"},
		{name: "length_mismatch", op: &Slice{}, in: []*Array{x, i64s(0, 1), i64s(2)}, err: "starts [0 1] and ends [2] differ in length"},
		{name: "repeated_axis", op: &Slice{}, in: []*Array{x, i64s(0, 1), i64s(2, 3), i64s(1, -1)}, err: "names axis 1 twice"},
		{name: "axis_out_of_range", op: &Slice{}, in: []*Array{x, i64s(0), i64s(2), i64s(2)}, err: "Slice's axes 2 is out of range for rank 2"},
		{name: "not_constant", op: &Slice{}, in: []*Array{x, i64s(0), i64s(2)}, nonConst: []int{2}, err: `Slice's ends input "in2" is not known at load time`},
	})
}

// TestSliceInt64Max checks the INT64_MAX and INT64_MIN that exports use for
// open ends, which float64 cannot hold exactly.
func TestSliceInt64Max(t *testing.T) {
	vec := func(v ...int64) *Value {
		tt := tensor.New(tensor.Int64, len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint64(tt.Data[8*i:], uint64(x))
		}
		return &Value{Name: "c", Type: Type{DType: i64T, Shape: tensor.Shape{len(v)}}, Const: tt}
	}
	x := &Value{Name: "x", Type: Type{DType: f32T, Shape: tensor.Shape{5}}}
	for _, c := range []struct {
		starts, ends, steps int64
		want                int
	}{
		{1, math.MaxInt64, 1, 4},
		{math.MaxInt64, math.MinInt64, -1, 5},
		{math.MinInt64, math.MaxInt64, 2, 3},
	} {
		types, err := (&Slice{}).Infer([]*Value{x, vec(c.starts), vec(c.ends), vec(0), vec(c.steps)})
		if err != nil {
			t.Fatal(err)
		}
		if got := types[0].Shape; !got.Equal(tensor.Shape{c.want}) {
			t.Errorf("Slice %d:%d:%d of [5]: %v, want [%d]", c.starts, c.ends, c.steps, got, c.want)
		}
		// The evaluator sees the same values through float64.
		in := []*Array{iotaArr(f32T, tensor.Shape{5}), i64s(float64(c.starts)), i64s(float64(c.ends)), i64s(0), i64s(float64(c.steps))}
		out, err := (&Slice{}).Eval(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := out[0].Shape; !got.Equal(tensor.Shape{c.want}) {
			t.Errorf("Slice.Eval %d:%d:%d of [5]: %v, want [%d]", c.starts, c.ends, c.steps, got, c.want)
		}
	}
}

func TestExpand(t *testing.T) {
	x := arrOf(f32T, tensor.Shape{3, 1}, 1, 2, 3)
	runOpCases(t, []opCase{
		{name: "dim_changed", op: &Expand{}, in: []*Array{x, i64s(2, 1, 2)},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 3, 2}, 1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3)}},
		{name: "dim_unchanged", op: &Expand{}, in: []*Array{x, i64s(3, 2)}, want: []*Array{arrOf(f32T, tensor.Shape{3, 2}, 1, 1, 2, 2, 3, 3)}},
		{name: "shape_smaller_than_input", op: &Expand{}, in: []*Array{x, i64s(1)}, want: []*Array{x}},
		{name: "incompatible", op: &Expand{}, in: []*Array{x, i64s(2, 2)}, err: "do not broadcast"},
		{name: "negative", op: &Expand{}, in: []*Array{x, i64s(-1)}, err: "negative dimension"},
		{name: "not_constant", op: &Expand{}, in: []*Array{x, i64s(3)}, nonConst: []int{1}, err: `Expand's shape input "in1" is not known at load time`},
	})
}

func TestTile(t *testing.T) {
	x := arrOf(f32T, tensor.Shape{2, 2}, 1, 2, 3, 4)
	runOpCases(t, []opCase{
		{name: "precomputed", op: &Tile{}, in: []*Array{x, i64s(2, 2)},
			want: []*Array{arrOf(f32T, tensor.Shape{4, 4}, 1, 2, 1, 2, 3, 4, 3, 4, 1, 2, 1, 2, 3, 4, 3, 4)}},
		{name: "one_axis", op: &Tile{}, in: []*Array{x, i64s(1, 2)}, want: []*Array{arrOf(f32T, tensor.Shape{2, 4}, 1, 2, 1, 2, 3, 4, 3, 4)}},
		{name: "zero", op: &Tile{}, in: []*Array{x, i64s(0, 1)}, want: []*Array{arrOf(f32T, tensor.Shape{0, 2})}},
		{name: "wrong_length", op: &Tile{}, in: []*Array{x, i64s(2)}, err: "have 1 entries for an input [2 2] of rank 2"},
		{name: "negative", op: &Tile{}, in: []*Array{x, i64s(1, -1)}, err: "negative entry"},
	})
}

func TestPad(t *testing.T) {
	v := func(x ...float64) *Array { return arrOf(f32T, tensor.Shape{len(x)}, x...) }
	x := v(1, 2, 3)
	nine := arrOf(f32T, tensor.Shape{}, 9)
	m := arrOf(f32T, tensor.Shape{2, 2}, 1, 2, 3, 4)
	runOpCases(t, []opCase{
		{name: "constant", op: &Pad{}, in: []*Array{x, i64s(2, 1), nine}, want: []*Array{v(9, 9, 1, 2, 3, 9)}},
		{name: "constant_default_zero", op: &Pad{Mode: "constant"}, in: []*Array{x, i64s(1, 1)}, want: []*Array{v(0, 1, 2, 3, 0)}},
		{name: "reflect", op: &Pad{Mode: "reflect"}, in: []*Array{x, i64s(2, 2)}, want: []*Array{v(3, 2, 1, 2, 3, 2, 1)}},
		{name: "reflect_repeated", op: &Pad{Mode: "reflect"}, in: []*Array{v(1, 2), i64s(3, 0)}, want: []*Array{v(2, 1, 2, 1, 2)}},
		{name: "edge", op: &Pad{Mode: "edge"}, in: []*Array{x, i64s(2, 1)}, want: []*Array{v(1, 1, 1, 2, 3, 3)}},
		{name: "wrap", op: &Pad{Mode: "wrap"}, in: []*Array{x, i64s(2, 4)}, want: []*Array{v(2, 3, 1, 2, 3, 1, 2, 3, 1)}},
		{name: "negative_pads_crop", op: &Pad{}, in: []*Array{x, i64s(-1, 1)}, want: []*Array{v(2, 3, 0)}},
		{name: "axes", op: &Pad{}, in: []*Array{m, i64s(1, 0), nil, i64s(1)}, want: []*Array{arrOf(f32T, tensor.Shape{2, 3}, 0, 1, 2, 0, 3, 4)}},
		{name: "negative_axes", op: &Pad{Mode: "edge"}, in: []*Array{m, i64s(0, 1), nil, i64s(-2)}, want: []*Array{arrOf(f32T, tensor.Shape{3, 2}, 1, 2, 3, 4, 3, 4)}},
		{name: "2d_all_axes", op: &Pad{Mode: "reflect"}, in: []*Array{m, i64s(1, 0, 0, 1)},
			want: []*Array{arrOf(f32T, tensor.Shape{3, 3}, 3, 4, 3, 1, 2, 1, 3, 4, 3)}},
		{name: "float_value_for_int_data", op: &Pad{}, in: []*Array{i64s(1), i64s(1, 0), arrOf(f32T, tensor.Shape{}, 2.7)}, want: []*Array{i64s(2, 1)}},
		{name: "pads_length", op: &Pad{}, in: []*Array{m, i64s(1, 1)}, err: "have 2 entries, want 4"},
		{name: "bad_mode", op: &Pad{Mode: "mirror"}, in: []*Array{x, i64s(1, 1)}, err: `mode "mirror"`},
		{name: "over_crop", op: &Pad{}, in: []*Array{x, i64s(-2, -2)}, err: "crop dimension 0 of [3] below zero"},
		{name: "reflect_empty", op: &Pad{Mode: "reflect"}, in: []*Array{v(), i64s(1, 0)}, err: "cannot pad the empty dimension"},
		{name: "value_not_scalar", op: &Pad{}, in: []*Array{x, i64s(1, 1), v(1, 2)}, err: "want one element"},
		{name: "not_constant", op: &Pad{}, in: []*Array{x, i64s(1, 1)}, nonConst: []int{1}, err: `Pad's pads input "in1" is not known at load time`},
	})
}

// d2sInput is ONNX's DepthToSpace example input: [1,8,2,3], channel c
// holding 9c + 3h + w.
func d2sInput() *Array {
	a := NewArray(f32T, tensor.Shape{1, 8, 2, 3})
	eachCoord(a.Shape, func(k int, c []int) { a.Data[k] = float64(9*c[1] + 3*c[2] + c[3]) })
	return a
}

func TestDepthToSpace(t *testing.T) {
	runOpCases(t, []opCase{
		{name: "dcr", op: &DepthToSpace{BlockSize: 2}, in: []*Array{d2sInput()},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 2, 4, 6},
				0, 18, 1, 19, 2, 20, 36, 54, 37, 55, 38, 56, 3, 21, 4, 22, 5, 23, 39, 57, 40, 58, 41, 59,
				9, 27, 10, 28, 11, 29, 45, 63, 46, 64, 47, 65, 12, 30, 13, 31, 14, 32, 48, 66, 49, 67, 50, 68)}},
		{name: "crd", op: &DepthToSpace{BlockSize: 2, Mode: "CRD"}, in: []*Array{d2sInput()},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 2, 4, 6},
				0, 9, 1, 10, 2, 11, 18, 27, 19, 28, 20, 29, 3, 12, 4, 13, 5, 14, 21, 30, 22, 31, 23, 32,
				36, 45, 37, 46, 38, 47, 54, 63, 55, 64, 56, 65, 39, 48, 40, 49, 41, 50, 57, 66, 58, 67, 59, 68)}},
		{name: "channels", op: &DepthToSpace{BlockSize: 3}, in: []*Array{d2sInput()}, err: "8 channels, not a multiple of blocksize² 9"},
		{name: "mode", op: &DepthToSpace{BlockSize: 2, Mode: "RDC"}, in: []*Array{d2sInput()}, err: `mode "RDC"`},
		{name: "rank", op: &DepthToSpace{BlockSize: 2}, in: []*Array{arrOf(f32T, tensor.Shape{4, 1, 1})}, err: "not 4-D"},
		{name: "s2d_shape", op: &SpaceToDepth{BlockSize: 2}, in: []*Array{arrOf(f32T, tensor.Shape{1, 2, 3, 4})}, err: "not multiples of blocksize 2"},
		{name: "s2d_mode", op: &SpaceToDepth{BlockSize: 2, Mode: "RDC"}, in: []*Array{arrOf(f32T, tensor.Shape{1, 2, 4, 4})}, err: `SpaceToDepth's mode "RDC"`},
		{name: "s2d_blocksize", op: &SpaceToDepth{}, in: []*Array{arrOf(f32T, tensor.Shape{1, 2, 4, 4})}, err: "blocksize 0 is not positive"},
	})
	// SpaceToDepth undoes DepthToSpace in DCR order.
	x := d2sInput()
	y, err := (&DepthToSpace{BlockSize: 2}).Eval([]*Array{x})
	if err != nil {
		t.Fatal(err)
	}
	runOpCase(t, opCase{op: &SpaceToDepth{BlockSize: 2}, in: y, want: []*Array{x}})
	y, err = (&DepthToSpace{BlockSize: 2, Mode: "CRD"}).Eval([]*Array{x})
	if err != nil {
		t.Fatal(err)
	}
	runOpCase(t, opCase{op: &SpaceToDepth{BlockSize: 2, Mode: "CRD"}, in: y, want: []*Array{x}})
}

// TestBindFoldsShapeChain builds the chain exports use to keep the batch
// and flatten the rest, Shape -> Gather -> Unsqueeze -> Concat -> Reshape,
// on a dynamic-batch input, and checks that Bind folds everything but the
// Reshape at two batch sizes and that Signature sees the batch.
func TestBindFoldsShapeChain(t *testing.T) {
	i64 := func(name string, shape tensor.Shape, v ...float64) *Value {
		tt, err := arrOf(i64T, shape, v...).Tensor()
		if err != nil {
			t.Fatal(err)
		}
		return &Value{Name: name, Type: Type{DType: i64T, Shape: shape}, Const: tt}
	}
	g := &Graph{Name: "flatten"}
	x := &Value{Name: "x", Type: Type{DType: f32T, Shape: tensor.Shape{Dynamic, 3, 4}}}
	g.Inputs = []*Value{x}
	shape := node(g, "shape", &Shape{}, x)
	batch := node(g, "gather", &Gather{}, shape, i64("zero", tensor.Shape{}, 0))
	batch1 := node(g, "unsqueeze", &Unsqueeze{}, batch, i64("axes", tensor.Shape{1}, 0))
	spec := node(g, "concat", &Concat{}, batch1, i64("rest", tensor.Shape{1}, -1))
	y := node(g, "reshape", &Reshape{}, x, spec)
	g.Outputs = []*Value{y}

	for _, n := range []int{1, 5} {
		b, err := Bind(g, n)
		if err != nil {
			t.Fatalf("batch %d: %v", n, err)
		}
		if len(b.Nodes) != 1 || b.Nodes[0].Op.Kind() != "Reshape" {
			kinds := []string{}
			for _, nd := range b.Nodes {
				kinds = append(kinds, nd.Op.Kind())
			}
			t.Fatalf("batch %d: bound graph has nodes %v, want only the Reshape", n, kinds)
		}
		spec := b.Nodes[0].Inputs[1]
		if !spec.IsConst() {
			t.Fatalf("batch %d: the Reshape's shape is not a constant", n)
		}
		got, err := ArrayFromTensor(spec.Const)
		if err != nil {
			t.Fatal(err)
		}
		if !arraysClose(got, i64s(float64(n), -1)) {
			t.Errorf("batch %d: Reshape's shape %v, want [%d -1]", n, got.Data, n)
		}
		if want := (tensor.Shape{n, 12}); !b.Outputs[0].Type.Shape.Equal(want) {
			t.Errorf("batch %d: output %s, want %v", n, b.Outputs[0].Type, want)
		}
		in := iotaArr(f32T, tensor.Shape{n, 3, 4})
		out, err := Evaluate(context.Background(), b, map[string]*Array{"x": in})
		if err != nil {
			t.Fatal(err)
		}
		if !arraysClose(out[0], iotaArr(f32T, tensor.Shape{n, 12})) {
			t.Errorf("batch %d: output %v", n, out[0].Shape)
		}
	}
	_, outs, err := Signature(g)
	if err != nil {
		t.Fatal(err)
	}
	if got := outs[0].Type.String(); got != "float32[N,12]" {
		t.Errorf("signature output %s, want float32[N,12]", got)
	}
}

// TestBindNamesNode checks that a load-time input that is not constant
// surfaces through Bind with the node's name.
func TestBindNamesNode(t *testing.T) {
	g := &Graph{}
	x := &Value{Name: "x", Type: Type{DType: f32T, Shape: tensor.Shape{Dynamic, 4}}}
	s := &Value{Name: "s", Type: Type{DType: i64T, Shape: tensor.Shape{2}}}
	g.Inputs = []*Value{x, s}
	g.Outputs = []*Value{node(g, "reshape_by_input", &Reshape{}, x, s)}
	_, err := Bind(g, 2)
	if err == nil || !strings.Contains(err.Error(), `"reshape_by_input"`) || !strings.Contains(err.Error(), `shape input "s" is not known at load time`) {
		t.Fatalf("Bind = %v, want an error naming the node and the shape input", err)
	}
	if !errors.Is(err, ErrNotConstant) {
		t.Errorf("Bind = %v, want an error matching ErrNotConstant", err)
	}
}

func TestShapeOpKinds(t *testing.T) {
	for want, op := range map[string]Op{
		"Shape": &Shape{}, "Size": &Size{}, "Reshape": &Reshape{}, "Flatten": &Flatten{}, "Transpose": &Transpose{},
		"Squeeze": &Squeeze{}, "Unsqueeze": &Unsqueeze{}, "Concat": &Concat{}, "Split": &Split{}, "Slice": &Slice{},
		"Expand": &Expand{}, "Tile": &Tile{}, "Pad": &Pad{}, "DepthToSpace": &DepthToSpace{}, "SpaceToDepth": &SpaceToDepth{},
	} {
		if got := op.Kind(); got != want {
			t.Errorf("Kind() = %q, want %q", got, want)
		}
	}
}
