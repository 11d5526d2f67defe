package ir

import (
	"math"
	"math/rand"
	"testing"

	"goinfer/internal/tensor"
)

func TestNorms(t *testing.T) {
	x := iotaArr(f32T, tensor.Shape{1, 2, 2}) // channel 0: 0,1; channel 1: 2,3
	v := func(vs ...float64) *Array { return arrOf(f32T, tensor.Shape{len(vs)}, vs...) }
	s5 := 1 / math.Sqrt(0.25+1e-5)
	runOpCases(t, []opCase{
		{name: "batchnorm", op: &BatchNorm{Epsilon: 0}, in: []*Array{x, v(1, 2), v(0, 1), v(1, 2), v(4, 1)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 2, 2}, -0.5, 0, 1, 3)}},
		{name: "batchnorm_per_activation", op: &BatchNorm{}, in: []*Array{x, constArr(tensor.Shape{2, 2}, 1), constArr(tensor.Shape{2, 2}, 0), iotaArr(f32T, tensor.Shape{2, 2}), constArr(tensor.Shape{2, 2}, 1)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 2, 2}, 0, 0, 0, 0)}},
		{name: "batchnorm_bad_param", op: &BatchNorm{}, in: []*Array{x, v(1), v(0, 1), v(1, 2), v(4, 1)}, err: "scale"},
		{name: "layernorm_last", op: &LayerNorm{Axis: -1, Epsilon: 1e-5}, in: []*Array{x, v(1, 2), v(0, 10)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 2, 2}, -0.5*s5, 10+s5, -0.5*s5, 10+s5),
				arrOf(f32T, tensor.Shape{1, 2, 1}, 0.5, 2.5), arrOf(f32T, tensor.Shape{1, 2, 1}, s5, s5)}},
		{name: "layernorm_bad_scale", op: &LayerNorm{Axis: -1}, in: []*Array{x, v(1, 2, 3)}, err: "normalised shape"},
		{name: "instancenorm", op: &InstanceNorm{Epsilon: 1e-5}, in: []*Array{iotaArr(f32T, tensor.Shape{1, 2, 2}), v(1, 2), v(0, 1)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 2, 2}, -0.5*s5, 0.5*s5, 1-s5, 1+s5)}},
		{name: "lrn", op: &LRN{Alpha: 3, Beta: 1, Bias: 1, Size: 3}, in: []*Array{arrOf(f32T, tensor.Shape{1, 3, 1}, 1, 2, 3)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 3, 1}, 1.0/6, 2.0/15, 3.0/14)}},
		{name: "lrn_size2", op: &LRN{Alpha: 2, Beta: 1, Bias: 0, Size: 2}, in: []*Array{arrOf(f32T, tensor.Shape{1, 3, 1}, 1, 2, 3)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 3, 1}, 1.0/5, 2.0/13, 3.0/9)}},
	})
}

// LayerNorm over a tensor's last axes equals it over the flattened row.
func TestLayerNormAxisIsFlattenedRow(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	x := randArr(r, tensor.Shape{2, 3, 4})
	scale := randArr(r, tensor.Shape{3, 4})
	got := evalOne(t, &LayerNorm{Axis: 1, Epsilon: 1e-5}, x, scale)
	flat := x.Clone()
	flat.Shape = tensor.Shape{2, 12}
	fs := scale.Clone()
	fs.Shape = tensor.Shape{12}
	want := evalOne(t, &LayerNorm{Axis: -1, Epsilon: 1e-5}, flat, fs)
	want.Shape = got.Shape
	closeRel(t, "layernorm", got, want, 1e-12)
}
