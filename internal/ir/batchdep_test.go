package ir

import (
	"context"
	"math"
	"math/rand"
	"strings"
	"testing"

	"goinfer/internal/tensor"
)

// ints is an int64 constant, for shapes, axes and slice bounds.
func (b *graphBuilder) ints(v ...float64) *Value {
	b.n++
	c, err := constValue("i"+strings.Repeat("'", b.n), arrOf(tensor.Int64, tensor.Shape{len(v)}, v...))
	if err != nil {
		panic(err)
	}
	return c
}

// attention is one head-split self-attention block as PyTorch's
// sequence-first export writes it: x is [B, T, C]; the batch moves to
// dimension 1, merges with the heads ([T, B*H, C/H]), runs the score and
// value products per (image, head), and comes back through [T*B, C] rows.
func (b *graphBuilder) attention(x *Value, t, c, h int) *Value {
	s := b.op(&Transpose{Perm: []int{1, 0, 2}}, x) // [T, B, C]
	q := b.op(&MatMul{}, s, b.w(c, c))
	k := b.op(&MatMul{}, s, b.w(c, c))
	v := b.op(&MatMul{}, s, b.w(c, c))
	heads := func(y *Value) *Value { // [T, B*H, C/H] -> [B*H, T, C/H]
		return b.op(&Transpose{Perm: []int{1, 0, 2}}, b.op(&Reshape{}, y, b.ints(float64(t), -1, float64(c/h))))
	}
	kt := b.op(&Transpose{Perm: []int{1, 2, 0}}, b.op(&Reshape{}, k, b.ints(float64(t), -1, float64(c/h))))
	p := b.op(&Softmax{Axis: -1}, b.op(&MatMul{}, heads(q), kt))
	o := b.op(&Transpose{Perm: []int{1, 0, 2}}, b.op(&MatMul{}, p, heads(v))) // [T, B*H, C/H]
	o = b.op(&Gemm{Alpha: 1, Beta: 1, TransB: true}, b.op(&Reshape{}, o, b.ints(-1, float64(c))), b.w(c, c), b.w(c))
	o = b.op(&Reshape{}, o, b.ints(float64(t), -1, float64(c)))
	return b.op(&Transpose{Perm: []int{1, 0, 2}}, o)
}

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
			y = b.op(&LayerNorm{Axis: -1, Epsilon: 1e-5}, y, b.konst(0.5, 2, 1), b.w(1))
			return b.out(b.op(&Reshape{}, y, b.ints(-1, 4, 6)))
		}},
		{name: "sequence_first_attention", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 5, 8)
			y := b.op(&Binary{Fn: OpAdd}, x, b.attention(x, 5, 8, 2))
			y = b.op(&Slice{}, y, b.ints(0), b.ints(1), b.ints(1)) // the class token
			return b.out(b.op(&Flatten{Axis: 1}, y))
		}},
		{name: "class_token_expanded", build: func(b *graphBuilder) *Graph {
			// Shape -> Concat -> Expand folds into a batch-sized constant
			// that is the same for every image.
			x := b.input("x", 3, 4)
			shape := b.op(&Concat{Axis: 0}, b.op(&Slice{}, b.op(&Shape{}, x), b.ints(0), b.ints(1)), b.ints(1, 4))
			tok := b.op(&Expand{}, b.w(1, 1, 4), shape)
			return b.out(b.op(&Concat{Axis: 1}, tok, x))
		}},
		{name: "softmax_over_batch", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 5)
			return b.out(b.op(&Softmax{Axis: 0}, x))
		}, want: "works along dimension 0"},
		{name: "concat_on_batch", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 5)
			return b.out(b.op(&Concat{Axis: 0}, x, x))
		}, want: "works along dimension 0"},
		{name: "mean_over_batch", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 5)
			return b.out(b.op(&Reduce{Fn: ReduceMean, Axes: []int{0}, KeepDims: true}, x))
		}, want: "works along dimension 0"},
		{name: "batchnorm_training_form", build: func(b *graphBuilder) *Graph {
			// The batch's own statistics, as an export in training mode
			// writes them.
			x := b.input("x", 3, 4, 4)
			m := b.op(&Reduce{Fn: ReduceMean, Axes: []int{0, 2, 3}, KeepDims: true}, x)
			return b.out(b.op(&Binary{Fn: OpSub}, x, m))
		}, want: "works along dimension 0"},
		{name: "matmul_contracts_batch", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 4)
			g := b.op(&MatMul{}, b.op(&Transpose{Perm: []int{1, 0}}, x), x) // a Gram matrix over the batch
			return b.out(b.op(&MatMul{}, x, g))
		}, want: "contracts operand 0's dimension 1"},
		{name: "gemm_contracts_batch", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 4)
			return b.out(b.op(&Gemm{Alpha: 1, Beta: 1, TransA: true}, x, x))
		}, want: "contracts A's dimension 0"},
		{name: "attention_over_batch", build: func(b *graphBuilder) *Graph {
			// Sequence-first attention fed [B, T, C] without its transpose:
			// the batch is the sequence.
			x := b.input("x", 5, 8)
			y := b.op(&Transpose{Perm: []int{1, 0, 2}}, b.attention(b.op(&Transpose{Perm: []int{1, 0, 2}}, x), 5, 8, 2))
			return b.out(y)
		}, want: "splits the images' index"},
		{name: "output_tokens_merged_with_batch", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 4, 6)
			return b.out(b.op(&Flatten{Axis: 2}, x))
		}, want: "does not hold one image per index"},
		{name: "reshape_splits_batch", build: func(b *graphBuilder) *Graph {
			// [T, B, C] read back as [B, T*C] interleaves the images.
			x := b.input("x", 3, 4)
			y := b.op(&Transpose{Perm: []int{1, 0, 2}}, x)
			return b.out(b.op(&Reshape{}, y, b.ints(-1, 12)))
		}, want: "splits the images' index"},
		{name: "slice_on_batch", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 4)
			return b.out(b.op(&Slice{}, x, b.ints(-1), b.ints(math.MinInt64), b.ints(0), b.ints(-1)))
		}, want: "slices dimension 0"},
		{name: "gather_on_batch", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 4)
			return b.out(b.op(&Gather{Axis: 0}, x, b.ints(0)))
		}, want: "works along dimension 0"},
		{name: "batch_moved", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 3, 4)
			return b.out(b.op(&Transpose{Perm: []int{1, 0, 2}}, x))
		}, want: "does not hold one image per index"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := c.build(newGraphBuilder(1))
			err := BatchIndependent(g)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("independent graph refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("error %v, want one containing %q", err, c.want)
			case c.want == "":
				checkImagesApart(t, g)
			}
		})
	}
}

// checkImagesApart evaluates g on a batch of 3 and on each image alone and
// wants the same answers: the graphs the test accepts must really keep
// their images apart.
func checkImagesApart(t *testing.T, g *Graph) {
	t.Helper()
	const batch = 3
	r := rand.New(rand.NewSource(2))
	whole := map[string]*Array{}
	for _, v := range g.Inputs {
		s := v.Type.Shape.Clone()
		s[0] = batch
		a := NewArray(v.Type.DType, s)
		for i := range a.Data {
			a.Data[i] = r.Float64()*4 - 2
		}
		whole[v.Name] = a
	}
	all, err := Evaluate(context.Background(), g, whole)
	if err != nil {
		t.Fatal(err)
	}
	for i := range batch {
		one := map[string]*Array{}
		for name, a := range whole {
			s := a.Shape.Clone()
			s[0] = 1
			n := s.NumElements()
			one[name] = &Array{DType: a.DType, Shape: s, Data: a.Data[i*n : (i+1)*n]}
		}
		got, err := Evaluate(context.Background(), g, one)
		if err != nil {
			t.Fatal(err)
		}
		for j, o := range got {
			n := len(o.Data)
			for k, x := range o.Data {
				if w := all[j].Data[i*n+k]; math.Abs(x-w) > 1e-12 {
					t.Fatalf("output %d, image %d, element %d: %v alone, %v in the batch", j, i, k, x, w)
				}
			}
		}
	}
}
