package ir

import (
	"strings"
	"testing"
)

func TestBatchIndependent(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(b *graphBuilder) *Graph
		want  string // "" when independent, else part of the error
	}{
		{name: "classifier", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 3, 8, 8)
			y := b.op(&Unary{Fn: OpRelu}, b.bn(b.op(&Conv{Pads: []int{1, 1, 1, 1}}, x, b.w(4, 3, 3, 3)), 4))
			y = b.op(&Reduce{Fn: ReduceMean, Axes: []int{2, 3}, KeepDims: true}, y)
			y = b.op(&Flatten{Axis: 1}, y)
			return b.out(b.op(&Softmax{Axis: -1}, b.op(&Gemm{Alpha: 1, Beta: 1, TransB: true}, y, b.w(5, 4), b.w(5))))
		}},
		{name: "tokens_merged_with_batch", build: func(b *graphBuilder) *Graph {
			// [B, T, C] -> [B*T, C] rows, each still one image's.
			x := b.input("x", 4, 6)
			y := b.op(&Flatten{Axis: 2}, x)
			return b.out(b.op(&LayerNorm{Axis: -1, Epsilon: 1e-5}, y, b.konst(0.5, 2, 1), b.w(1)))
		}},
		{name: "softmax_over_batch", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 5)
			return b.out(b.op(&Softmax{Axis: 0}, x))
		}, want: "works along the batch dimension"},
		{name: "concat_on_batch", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 5)
			return b.out(b.op(&Concat{Axis: 0}, x, x))
		}, want: "works along the batch dimension"},
		{name: "mean_over_batch", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 5)
			return b.out(b.op(&Reduce{Fn: ReduceMean, Axes: []int{0}, KeepDims: true}, x))
		}, want: "not its leading dimension"},
		{name: "batch_moved", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 3, 4)
			return b.out(b.op(&Transpose{Perm: []int{1, 0, 2}}, x))
		}, want: "not its leading dimension"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := BatchIndependent(c.build(newGraphBuilder(1)))
			switch {
			case c.want == "" && err != nil:
				t.Errorf("independent graph refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}
