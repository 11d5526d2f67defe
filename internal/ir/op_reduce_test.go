package ir

import (
	"math"
	"testing"

	"goinfer/internal/tensor"
)

func TestReduce(t *testing.T) {
	// x = [[1, -2, 3], [4, 5, -6]]
	x := arrOf(f32T, tensor.Shape{2, 3}, 1, -2, 3, 4, 5, -6)
	col := func(v ...float64) *Array { return arrOf(f32T, tensor.Shape{2, 1}, v...) }
	row := func(v ...float64) *Array { return arrOf(f32T, tensor.Shape{len(v)}, v...) }
	red := func(fn ReduceKind, axes ...int) *Reduce { return &Reduce{Fn: fn, Axes: axes, KeepDims: true} }
	empty := arrOf(f32T, tensor.Shape{2, 0})
	lse := func(v ...float64) float64 {
		s := 0.0
		for _, x := range v {
			s += math.Exp(x)
		}
		return math.Log(s)
	}
	runOpCases(t, []opCase{
		{name: "mean", op: red(ReduceMean, 1), in: []*Array{x}, want: []*Array{col(2.0/3, 1)}},
		{name: "sum", op: red(ReduceSum, 1), in: []*Array{x}, want: []*Array{col(2, 3)}},
		{name: "max", op: red(ReduceMax, 1), in: []*Array{x}, want: []*Array{col(3, 5)}},
		{name: "min", op: red(ReduceMin, 1), in: []*Array{x}, want: []*Array{col(-2, -6)}},
		{name: "prod", op: red(ReduceProd, 1), in: []*Array{x}, want: []*Array{col(-6, -120)}},
		{name: "l1", op: red(ReduceL1, 1), in: []*Array{x}, want: []*Array{col(6, 15)}},
		{name: "l2", op: red(ReduceL2, 1), in: []*Array{x}, want: []*Array{col(math.Sqrt(14), math.Sqrt(77))}},
		{name: "sum_square", op: red(ReduceSumSquare, 1), in: []*Array{x}, want: []*Array{col(14, 77)}},
		{name: "log_sum", op: red(ReduceLogSum, 1), in: []*Array{arrOf(f32T, tensor.Shape{2, 2}, 1, 2, 3, 4)}, want: []*Array{col(math.Log(3), math.Log(7))}},
		{name: "log_sum_exp", op: red(ReduceLogSumExp, 1), in: []*Array{x}, want: []*Array{col(lse(1, -2, 3), lse(4, 5, -6))}},
		{name: "log_sum_exp_large", op: red(ReduceLogSumExp), in: []*Array{row(1000, 1000)}, want: []*Array{arrOf(f32T, tensor.Shape{1}, 1000+math.Ln2)}},
		{name: "axis0_no_keepdims", op: &Reduce{Fn: ReduceSum, Axes: []int{0}}, in: []*Array{x}, want: []*Array{row(5, 3, -3)}},
		{name: "negative_axis", op: red(ReduceMax, -2), in: []*Array{x}, want: []*Array{arrOf(f32T, tensor.Shape{1, 3}, 4, 5, 3)}},
		{name: "default_all_keepdims", op: red(ReduceSum), in: []*Array{x}, want: []*Array{arrOf(f32T, tensor.Shape{1, 1}, 5)}},
		{name: "default_all", op: &Reduce{Fn: ReduceMean}, in: []*Array{x}, want: []*Array{arrOf(f32T, tensor.Shape{}, 5.0/6)}},
		{name: "axes_input", op: red(ReduceSum), in: []*Array{x, i64s(1)}, want: []*Array{col(2, 3)}},
		{name: "axes_input_wins", op: red(ReduceSum, 0), in: []*Array{x, i64s(1)}, want: []*Array{col(2, 3)}},
		{name: "absent_axes_input", op: red(ReduceSum, 1), in: []*Array{x, nil}, want: []*Array{col(2, 3)}},
		{name: "empty_axes_input_reduces_all", op: red(ReduceSum), in: []*Array{x, i64s()}, want: []*Array{arrOf(f32T, tensor.Shape{1, 1}, 5)}},
		{name: "noop_with_empty_axes", op: &Reduce{Fn: ReduceSum, NoopWithEmptyAxes: true}, in: []*Array{x, i64s()}, want: []*Array{x}},
		{name: "noop_sum_square_squares", op: &Reduce{Fn: ReduceSumSquare, NoopWithEmptyAxes: true}, in: []*Array{row(-2, 3)}, want: []*Array{row(4, 9)}},
		{name: "noop_l1_abs", op: &Reduce{Fn: ReduceL1, NoopWithEmptyAxes: true}, in: []*Array{row(-2, 3)}, want: []*Array{row(2, 3)}},
		{name: "empty_set_sum", op: red(ReduceSum, 1), in: []*Array{empty}, want: []*Array{col(0, 0)}},
		{name: "empty_set_prod", op: red(ReduceProd, 1), in: []*Array{empty}, want: []*Array{col(1, 1)}},
		{name: "empty_set_max", op: red(ReduceMax, 1), in: []*Array{empty}, want: []*Array{col(math.Inf(-1), math.Inf(-1))}},
		{name: "empty_set_min", op: red(ReduceMin, 1), in: []*Array{empty}, want: []*Array{col(math.Inf(1), math.Inf(1))}},
		{name: "empty_set_log_sum_exp", op: red(ReduceLogSumExp, 1), in: []*Array{empty}, want: []*Array{col(math.Inf(-1), math.Inf(-1))}},
		{name: "empty_set_l2", op: red(ReduceL2, 1), in: []*Array{empty}, want: []*Array{col(0, 0)}},
		{name: "empty_set_non_reduced_axis_zero", op: red(ReduceSum, 1), in: []*Array{arrOf(f32T, tensor.Shape{0, 3})}, want: []*Array{arrOf(f32T, tensor.Shape{0, 1})}},
		{name: "empty_set_int_max", op: red(ReduceMax, 0), in: []*Array{i64s()}, want: []*Array{i64s(math.MinInt64)}},
		{name: "int_mean_truncates", op: red(ReduceMean), in: []*Array{i64s(1, 2)}, want: []*Array{i64s(1)}},
		{name: "bool_max", op: red(ReduceMax, 1), in: []*Array{arrOf(boolT, tensor.Shape{2, 2}, 0, 1, 0, 0)}, want: []*Array{arrOf(boolT, tensor.Shape{2, 1}, 1, 0)}},
		{name: "bool_min", op: red(ReduceMin, 1), in: []*Array{arrOf(boolT, tensor.Shape{2, 2}, 1, 1, 0, 1)}, want: []*Array{arrOf(boolT, tensor.Shape{2, 1}, 1, 0)}},
		{name: "max_nan", op: red(ReduceMax), in: []*Array{row(1, math.NaN(), 2)}, want: []*Array{arrOf(f32T, tensor.Shape{1}, math.NaN())}},
		{name: "bool_sum", op: red(ReduceSum), in: []*Array{arrOf(boolT, tensor.Shape{2})}, err: "ReduceSum of bool is not defined"},
		{name: "repeated_axes", op: red(ReduceSum, 1, -1), in: []*Array{x}, err: "names axis 1 twice"},
		{name: "axis_out_of_range", op: red(ReduceL2, 2), in: []*Array{x}, err: "ReduceL2's axes 2 is out of range for rank 2"},
		{name: "axes_not_constant", op: red(ReduceMean), in: []*Array{x, i64s(1)}, nonConst: []int{1}, err: `ReduceMean's axes input "in1" is not known at load time`},
		{name: "unknown", op: red("ReduceMedian"), in: []*Array{x}, err: `unknown reduction "ReduceMedian"`},
	})
}

func TestArgReduce(t *testing.T) {
	// x = [[2, 1], [3, 10], [3, 10]] with ties down the columns.
	x := arrOf(f32T, tensor.Shape{3, 2}, 2, 1, 3, 10, 3, 10)
	runOpCases(t, []opCase{
		{name: "argmax_default_axis", op: &ArgReduce{Max: true, KeepDims: true}, in: []*Array{x}, want: []*Array{arrOf(i64T, tensor.Shape{1, 2}, 1, 1)}},
		{name: "argmax_select_last", op: &ArgReduce{Max: true, KeepDims: true, SelectLastIndex: true}, in: []*Array{x}, want: []*Array{arrOf(i64T, tensor.Shape{1, 2}, 2, 2)}},
		{name: "argmax_no_keepdims", op: &ArgReduce{Max: true, Axis: 1}, in: []*Array{x}, want: []*Array{i64s(0, 1, 1)}},
		{name: "argmin_negative_axis", op: &ArgReduce{Axis: -1, KeepDims: true}, in: []*Array{x}, want: []*Array{arrOf(i64T, tensor.Shape{3, 1}, 1, 0, 0)}},
		{name: "argmin_ties", op: &ArgReduce{}, in: []*Array{arrOf(f32T, tensor.Shape{3}, 5, 4, 4)}, want: []*Array{arrOf(i64T, tensor.Shape{}, 1)}},
		{name: "argmin_ties_last", op: &ArgReduce{SelectLastIndex: true}, in: []*Array{arrOf(f32T, tensor.Shape{3}, 5, 4, 4)}, want: []*Array{arrOf(i64T, tensor.Shape{}, 2)}},
		{name: "argmax_nan_first", op: &ArgReduce{Max: true}, in: []*Array{arrOf(f32T, tensor.Shape{3}, 1, math.NaN(), 9)}, want: []*Array{arrOf(i64T, tensor.Shape{}, 1)}},
		{name: "scalar", op: &ArgReduce{Max: true}, in: []*Array{arrOf(f32T, tensor.Shape{}, 1)}, err: "ArgMax of a scalar"},
		{name: "empty_axis", op: &ArgReduce{Axis: 1}, in: []*Array{arrOf(f32T, tensor.Shape{2, 0})}, err: "ArgMin along the empty dimension"},
		{name: "bad_axis", op: &ArgReduce{Axis: 2}, in: []*Array{x}, err: "ArgMin's axis 2 is out of range for rank 2"},
	})
}

func TestTopK(t *testing.T) {
	x := iotaArr(f32T, tensor.Shape{3, 4})
	k := func(n float64) *Array { return i64s(n) }
	runOpCases(t, []opCase{
		{name: "largest", op: &TopK{Axis: -1, Largest: true, Sorted: true}, in: []*Array{x, k(3)},
			want: []*Array{arrOf(f32T, tensor.Shape{3, 3}, 3, 2, 1, 7, 6, 5, 11, 10, 9), arrOf(i64T, tensor.Shape{3, 3}, 3, 2, 1, 3, 2, 1, 3, 2, 1)}},
		{name: "smallest_axis0", op: &TopK{Sorted: true}, in: []*Array{x, k(2)},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 4}, 0, 1, 2, 3, 4, 5, 6, 7), arrOf(i64T, tensor.Shape{2, 4}, 0, 0, 0, 0, 1, 1, 1, 1)}},
		{name: "same_values_in_index_order", op: &TopK{Axis: -1, Largest: true}, in: []*Array{arrOf(f32T, tensor.Shape{5}, 1, 2, 2, 1, 2), k(4)},
			want: []*Array{arrOf(f32T, tensor.Shape{4}, 2, 2, 2, 1), i64s(1, 2, 4, 0)}},
		{name: "smallest_nan_last", op: &TopK{}, in: []*Array{arrOf(f32T, tensor.Shape{3}, math.NaN(), 2, 1), k(3)},
			want: []*Array{arrOf(f32T, tensor.Shape{3}, 1, 2, math.NaN()), i64s(2, 1, 0)}},
		{name: "k_zero", op: &TopK{Largest: true}, in: []*Array{x, k(0)},
			want: []*Array{arrOf(f32T, tensor.Shape{0, 4}), arrOf(i64T, tensor.Shape{0, 4})}},
		{name: "k_too_large", op: &TopK{Axis: -1}, in: []*Array{x, k(5)}, err: "TopK's k 5 is out of range for dimension 1 of [3 4]"},
		{name: "k_not_constant", op: &TopK{}, in: []*Array{x, k(1)}, nonConst: []int{1}, err: `TopK's k input "in1" is not known at load time`},
		{name: "bool", op: &TopK{}, in: []*Array{arrOf(boolT, tensor.Shape{2}), k(1)}, err: "TopK of bool is not defined"},
		{name: "k_two_values", op: &TopK{}, in: []*Array{x, i64s(1, 2)}, err: "has 2 elements, want 1"},
	})
}

func TestReduceOpKinds(t *testing.T) {
	for want, op := range map[string]Op{
		"ReduceLogSumExp": &Reduce{Fn: ReduceLogSumExp}, "ArgMax": &ArgReduce{Max: true}, "ArgMin": &ArgReduce{}, "TopK": &TopK{},
	} {
		if got := op.Kind(); got != want {
			t.Errorf("Kind() = %q, want %q", got, want)
		}
	}
}
