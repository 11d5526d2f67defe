package ir

import (
	"math/rand"
	"testing"

	"goinfer/internal/tensor"
)

func TestGemm(t *testing.T) {
	a := iotaArr(f32T, tensor.Shape{2, 3})                  // [[0,1,2],[3,4,5]]
	b := arrOf(f32T, tensor.Shape{3, 2}, 1, 0, 0, 1, 1, 1)  // -> [[2,3],[8,9]]
	bt := arrOf(f32T, tensor.Shape{2, 3}, 1, 0, 1, 0, 1, 1) // b transposed
	at := arrOf(f32T, tensor.Shape{3, 2}, 0, 3, 1, 4, 2, 5) // a transposed
	runOpCases(t, []opCase{
		{name: "plain", op: &Gemm{Alpha: 1, Beta: 1}, in: []*Array{a, b},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 2}, 2, 3, 8, 9)}},
		{name: "transposes_alpha_beta_row_bias", op: &Gemm{Alpha: 2, Beta: 0.5, TransA: true, TransB: true}, in: []*Array{at, bt, arrOf(f32T, tensor.Shape{2}, 10, 20)},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 2}, 9, 16, 21, 28)}},
		{name: "scalar_c", op: &Gemm{Alpha: 1, Beta: 1}, in: []*Array{a, b, arrOf(f32T, tensor.Shape{}, -1)},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 2}, 1, 2, 7, 8)}},
		{name: "column_c", op: &Gemm{Alpha: 1, Beta: 1}, in: []*Array{a, b, arrOf(f32T, tensor.Shape{2, 1}, 1, 2)},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 2}, 3, 4, 10, 11)}},
		{name: "epilogue_gelu_residual", op: &Gemm{Alpha: 1, Beta: 1, Epilogue: Epilogue{Act: ActLeakyRelu, Alpha: 0.5, Residual: true}},
			in:   []*Array{a, b, nil, arrOf(f32T, tensor.Shape{2, 2}, -4, 0, -16, 0)},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 2}, -1, 3, -4, 9)}},
		{name: "k_mismatch", op: &Gemm{Alpha: 1}, in: []*Array{a, a}, err: "disagree on K"},
		{name: "rank3", op: &Gemm{Alpha: 1}, in: []*Array{iotaArr(f32T, tensor.Shape{1, 2, 3}), b}, err: "2-D"},
		{name: "bad_c", op: &Gemm{Alpha: 1, Beta: 1}, in: []*Array{a, b, iotaArr(f32T, tensor.Shape{3})}, err: "does not broadcast"},
	})
}

func TestMatMul(t *testing.T) {
	runOpCases(t, []opCase{
		{name: "2d", op: &MatMul{}, in: []*Array{iotaArr(f32T, tensor.Shape{2, 3}), arrOf(f32T, tensor.Shape{3, 1}, 1, 1, 1)},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 1}, 3, 12)}},
		{name: "vector_vector", op: &MatMul{}, in: []*Array{i64s(1, 2, 3), i64s(4, 5, 6)},
			want: []*Array{arrOf(i64T, tensor.Shape{}, 32)}},
		{name: "vector_matrix", op: &MatMul{}, in: []*Array{arrOf(f32T, tensor.Shape{2}, 1, 1), iotaArr(f32T, tensor.Shape{2, 3})},
			want: []*Array{arrOf(f32T, tensor.Shape{3}, 3, 5, 7)}},
		{name: "matrix_vector", op: &MatMul{}, in: []*Array{iotaArr(f32T, tensor.Shape{2, 3}), arrOf(f32T, tensor.Shape{3}, 1, 0, 0)},
			want: []*Array{arrOf(f32T, tensor.Shape{2}, 0, 3)}},
		{name: "broadcast_batch", op: &MatMul{}, in: []*Array{iotaArr(f32T, tensor.Shape{2, 1, 1, 2}), arrOf(f32T, tensor.Shape{3, 2, 1}, 1, 0, 0, 1, 1, 1)},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 3, 1, 1}, 0, 1, 1, 2, 3, 5)}},
		{name: "bias_epilogue", op: &MatMul{Epilogue: Epilogue{Act: ActRelu}}, in: []*Array{iotaArr(f32T, tensor.Shape{2, 2}), arrOf(f32T, tensor.Shape{2, 2}, 1, 0, 0, 1), arrOf(f32T, tensor.Shape{2}, -1, -2)},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 2}, 0, 0, 1, 1)}},
		{name: "inner_mismatch", op: &MatMul{}, in: []*Array{iotaArr(f32T, tensor.Shape{2, 3}), iotaArr(f32T, tensor.Shape{2, 3})}, err: "inner dimension"},
		{name: "batch_mismatch", op: &MatMul{}, in: []*Array{iotaArr(f32T, tensor.Shape{2, 2, 3}), iotaArr(f32T, tensor.Shape{3, 3, 1})}, err: "batch dimensions"},
		{name: "scalar", op: &MatMul{}, in: []*Array{arrOf(f32T, tensor.Shape{}, 1), iotaArr(f32T, tensor.Shape{1})}, err: "rank 1"},
	})
}

// A batched MatMul is the stack of its 2-D products.
func TestMatMulBatchIsStackOf2D(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	a := randArr(r, tensor.Shape{3, 4, 5})
	b := randArr(r, tensor.Shape{5, 2})
	got := evalOne(t, &MatMul{}, a, b)
	for i := 0; i < 3; i++ {
		ai := sliceAxis(a, 0, i, i+1)
		ai.Shape = tensor.Shape{4, 5}
		want := evalOne(t, &Gemm{Alpha: 1, Beta: 1}, ai, b)
		part := sliceAxis(got, 0, i, i+1)
		part.Shape = tensor.Shape{4, 2}
		closeRel(t, "batch", part, want, 1e-12)
	}
}
