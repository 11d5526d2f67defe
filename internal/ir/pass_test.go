package ir

import (
	"context"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"goinfer/internal/tensor"
)

// graphBuilder builds small float64 graphs with random constants.
type graphBuilder struct {
	g *Graph
	r *rand.Rand
	n int
}

func newGraphBuilder(seed int64) *graphBuilder {
	return &graphBuilder{g: &Graph{Name: "t"}, r: rand.New(rand.NewSource(seed))}
}

const f64T = tensor.Float64

// input adds a graph input whose first dimension is the batch.
func (b *graphBuilder) input(name string, shape ...int) *Value {
	s := append(tensor.Shape{Dynamic}, shape...)
	v := &Value{Name: name, Type: Type{DType: f64T, Shape: s}}
	b.g.Inputs = append(b.g.Inputs, v)
	return v
}

// konst is a constant of uniform values in [lo, hi).
func (b *graphBuilder) konst(lo, hi float64, shape ...int) *Value {
	b.n++
	a := NewArray(f64T, tensor.Shape(shape))
	for i := range a.Data {
		a.Data[i] = lo + (hi-lo)*b.r.Float64()
	}
	v, err := constValue("c"+string(rune('a'+b.n%26))+strings.Repeat("'", b.n/26), a)
	if err != nil {
		panic(err)
	}
	return v
}

func (b *graphBuilder) w(shape ...int) *Value { return b.konst(-1, 1, shape...) }

func (b *graphBuilder) scalar(v float64) *Value { return scalarConst("s", f64T, v) }

func (b *graphBuilder) op(op Op, in ...*Value) *Value {
	b.n++
	return node(b.g, op.Kind()+string(rune('a'+b.n%26))+strings.Repeat("'", b.n/26), op, in...)
}

// bn adds an inference BatchNorm over c channels with random statistics.
func (b *graphBuilder) bn(x *Value, c int) *Value {
	return b.op(&BatchNorm{Epsilon: 1e-5}, x, b.konst(0.5, 2, c), b.w(c), b.w(c), b.konst(0.1, 2, c))
}

func (b *graphBuilder) out(vs ...*Value) *Graph {
	b.g.Outputs = vs
	return b.g
}

// randomInputs gives every graph input random values at batch 2.
func randomInputs(g *Graph, r *rand.Rand) map[string]*Array {
	m := map[string]*Array{}
	for _, v := range g.Inputs {
		s := v.Type.Shape.Clone()
		for i, d := range s {
			if d == Dynamic {
				s[i] = 2
			}
		}
		a := NewArray(v.Type.DType, s)
		for i := range a.Data {
			a.Data[i] = r.Float64()*4 - 2
		}
		m[v.Name] = a
	}
	return m
}

func evalGraph(t *testing.T, g *Graph, in map[string]*Array) []*Array {
	t.Helper()
	out, err := Evaluate(context.Background(), g, in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameOutputs(t *testing.T, what string, got, want []*Array) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d outputs, want %d", what, len(got), len(want))
	}
	for i := range want {
		closeRel(t, what, got[i], want[i], 1e-9)
	}
}

func kinds(g *Graph) []string {
	var k []string
	for _, n := range g.Nodes {
		s := n.Op.Kind()
		if ep, ok := epilogueOf(n.Op); ok && !ep.IsZero() {
			s += "+" + ep.String()
		}
		k = append(k, s)
	}
	return k
}

// The optimized graph computes what the original does, in the expected
// fused form; decomposing it again changes nothing either.
func TestOptimize(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(b *graphBuilder) *Graph
		want  []string
		stats OptimizeStats
	}{
		{name: "conv_bn_relu", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 3, 8, 8)
			y := b.op(&Conv{Pads: []int{1, 1, 1, 1}}, x, b.w(4, 3, 3, 3), b.w(4))
			return b.out(b.op(&Unary{Fn: OpRelu}, b.bn(y, 4)))
		}, want: []string{"Conv+relu"}, stats: OptimizeStats{BatchNorms: 1, Fused: 1}},
		{name: "residual_block", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 4, 6, 6)
			y := b.op(&Unary{Fn: OpRelu}, b.bn(b.op(&Conv{Pads: []int{1, 1, 1, 1}}, x, b.w(4, 4, 3, 3)), 4))
			y = b.bn(b.op(&Conv{Pads: []int{1, 1, 1, 1}}, y, b.w(4, 4, 3, 3)), 4)
			return b.out(b.op(&Unary{Fn: OpRelu}, b.op(&Binary{Fn: OpAdd}, y, x)))
		}, want: []string{"Conv+relu", "Conv+residual+relu"}, stats: OptimizeStats{BatchNorms: 2, Fused: 3}},
		{name: "projection_shortcut", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 3, 6, 6)
			short := b.bn(b.op(&Conv{Strides: []int{2, 2}}, x, b.w(8, 3, 1, 1)), 8)
			y := b.bn(b.op(&Conv{Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}, Group: 1}, x, b.w(8, 3, 3, 3)), 8)
			return b.out(b.op(&Unary{Fn: OpRelu}, b.op(&Binary{Fn: OpAdd}, short, y)))
		}, want: []string{"Conv", "Conv+residual+relu"}, stats: OptimizeStats{BatchNorms: 2, Fused: 2}},
		{name: "depthwise_bn_relu6", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 6, 5, 5)
			y := b.bn(b.op(&Conv{Group: 6, Pads: []int{1, 1, 1, 1}, Strides: []int{2, 2}}, x, b.w(6, 1, 3, 3)), 6)
			return b.out(b.op(&Clip{}, y, b.scalar(0), b.scalar(6)))
		}, want: []string{"Conv+relu6"}, stats: OptimizeStats{BatchNorms: 1, Fused: 1}},
		{name: "conv_transpose_bn", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 4, 3, 3)
			y := b.op(&ConvTranspose{Strides: []int{2, 2}, Group: 2, OutputPadding: []int{1, 1}}, x, b.w(4, 3, 3, 3), b.w(6))
			return b.out(b.bn(y, 6))
		}, want: []string{"ConvTranspose"}, stats: OptimizeStats{BatchNorms: 1}},
		{name: "gemm_bn1d_gelu", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 8)
			y := b.op(&Gemm{Alpha: 0.5, Beta: 2, TransB: true}, x, b.w(5, 8), b.w(5))
			return b.out(b.op(&Gelu{}, b.bn(y, 5)))
		}, want: []string{"Gemm+gelu"}, stats: OptimizeStats{BatchNorms: 1, Fused: 1}},
		{name: "matmul_bias_gelu_tanh", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 3, 8)
			y := b.op(&Binary{Fn: OpAdd}, b.w(16), b.op(&MatMul{}, x, b.w(8, 16)))
			return b.out(b.op(&Gelu{Tanh: true}, y))
		}, want: []string{"MatMul+gelu_tanh"}, stats: OptimizeStats{Fused: 2}},
		{name: "matmul_attention_bias_kept", build: func(b *graphBuilder) *Graph {
			// Swin's relative position bias: [heads, N, N] over [B, heads, N, N].
			x := b.input("x", 2, 4, 4)
			return b.out(b.op(&Binary{Fn: OpAdd}, b.op(&MatMul{}, x, b.w(4, 4)), b.w(2, 4, 4)))
		}, want: []string{"MatMul", "Add"}},
		{name: "conv_const_add_silu", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 2, 4, 4)
			y := b.op(&Binary{Fn: OpAdd}, b.op(&Conv{}, x, b.w(3, 2, 1, 1), b.w(3)), b.w(3, 1, 1))
			return b.out(b.op(&Binary{Fn: OpMul}, b.op(&Unary{Fn: OpSigmoid}, y), y))
		}, want: []string{"Conv+silu"}, stats: OptimizeStats{Composites: 1, Fused: 2}},
		{name: "conv_layer_scale_residual", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 3, 4, 4)
			y := b.op(&Binary{Fn: OpMul}, b.w(3, 1, 1), b.op(&Conv{Pads: []int{1, 1, 1, 1}, Group: 3}, x, b.w(3, 1, 3, 3), b.w(3)))
			return b.out(b.op(&Binary{Fn: OpAdd}, x, y))
		}, want: []string{"Conv+residual+none"}, stats: OptimizeStats{Fused: 2}},
		{name: "convnext_mlp_layer_scale", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 5, 8)
			h := b.op(&Gelu{}, b.op(&Binary{Fn: OpAdd}, b.op(&MatMul{}, x, b.w(8, 16)), b.w(16)))
			h = b.op(&Binary{Fn: OpMul}, b.op(&Binary{Fn: OpAdd}, b.op(&MatMul{}, h, b.w(16, 8)), b.w(8)), b.w(8))
			return b.out(b.op(&Binary{Fn: OpAdd}, h, x))
		}, want: []string{"MatMul+gelu", "MatMul+residual+none"}, stats: OptimizeStats{Fused: 5}},
		{name: "gemm_scale_column_c", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 4)
			y := b.op(&Gemm{Alpha: 2, Beta: 0.5, TransB: true}, x, b.w(3, 4), b.w(1, 3))
			return b.out(b.op(&Unary{Fn: OpRelu}, b.op(&Binary{Fn: OpMul}, y, b.w(3))))
		}, want: []string{"Gemm+relu"}, stats: OptimizeStats{Fused: 2}},
		{name: "scale_on_wrong_axis_kept", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 2, 3, 3)
			y := b.op(&Conv{}, x, b.w(2, 2, 1, 1))
			return b.out(b.op(&Binary{Fn: OpMul}, y, b.w(3, 1)))
		}, want: []string{"Conv", "Mul"}},
		{name: "broadcast_add_not_residual", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 2, 3, 3)
			pos := b.w(1, 2, 3, 3) // varies over space: no bias; broadcast over the batch: no residual
			return b.out(b.op(&Binary{Fn: OpAdd}, b.op(&Conv{Pads: []int{1, 1, 1, 1}}, x, b.w(2, 2, 3, 3)), pos))
		}, want: []string{"Conv", "Add"}},
		{name: "se_block", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 8, 4, 4)
			s := b.op(&GlobalPool{}, x)
			s = b.op(&Unary{Fn: OpRelu}, b.op(&Conv{}, s, b.w(2, 8, 1, 1), b.w(2)))
			s = b.op(&Conv{}, s, b.w(8, 2, 1, 1), b.w(8))
			s = b.op(&HardSigmoid{Alpha: 1.0 / 6, Beta: 0.5}, s)
			return b.out(b.op(&Binary{Fn: OpMul}, x, s))
		}, want: []string{"GlobalAveragePool", "Conv+relu", "Conv+hardsigmoid", "Mul"}, stats: OptimizeStats{Fused: 2}},
		{name: "hardswish_gate", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 3, 4, 4)
			y := b.op(&Conv{}, x, b.w(3, 3, 1, 1))
			return b.out(b.op(&Binary{Fn: OpMul}, y, b.op(&HardSigmoid{Alpha: 1.0 / 6, Beta: 0.5}, y)))
		}, want: []string{"Conv+hardswish"}, stats: OptimizeStats{Composites: 1, Fused: 1}},
		// torch.onnx.export's spellings below opset 17 (LayerNorm) and 20
		// (Gelu), as TorchScript emits them.
		{name: "torch_layernorm_gelu_erf_block", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 4, 8)
			mean := b.op(&Reduce{Fn: ReduceMean, Axes: []int{-1}, KeepDims: true}, x)
			d := b.op(&Binary{Fn: OpSub}, x, mean)
			v := b.op(&Reduce{Fn: ReduceMean, Axes: []int{-1}, KeepDims: true}, b.op(&Binary{Fn: OpPow}, d, b.scalar(2)))
			sd := b.op(&Unary{Fn: OpSqrt}, b.op(&Binary{Fn: OpAdd}, v, b.scalar(1e-5)))
			ln := b.op(&Binary{Fn: OpAdd}, b.op(&Binary{Fn: OpMul}, b.op(&Binary{Fn: OpDiv}, d, sd), b.konst(0.5, 1.5, 8)), b.w(8))
			h := b.op(&Binary{Fn: OpAdd}, b.op(&MatMul{}, ln, b.w(8, 8)), b.w(8))
			e := b.op(&Unary{Fn: OpErf}, b.op(&Binary{Fn: OpDiv}, h, b.scalar(math.Sqrt2)))
			gl := b.op(&Binary{Fn: OpMul}, b.op(&Binary{Fn: OpMul}, h, b.op(&Binary{Fn: OpAdd}, e, b.scalar(1))), b.scalar(0.5))
			return b.out(b.op(&Binary{Fn: OpAdd}, x, b.op(&Binary{Fn: OpAdd}, b.op(&MatMul{}, gl, b.w(8, 8)), b.w(8))))
		}, want: []string{"LayerNormalization", "MatMul+gelu", "MatMul+residual+none"}, stats: OptimizeStats{Composites: 2, Fused: 4}},
		{name: "torch_gelu_tanh", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 6)
			x3 := b.op(&Binary{Fn: OpMul}, x, b.op(&Binary{Fn: OpMul}, x, x))
			in := b.op(&Binary{Fn: OpMul}, b.scalar(math.Sqrt(2/math.Pi)), b.op(&Binary{Fn: OpAdd}, x, b.op(&Binary{Fn: OpMul}, b.scalar(0.044715), x3)))
			t := b.op(&Binary{Fn: OpAdd}, b.scalar(1), b.op(&Unary{Fn: OpTanh}, in))
			return b.out(b.op(&Binary{Fn: OpMul}, b.scalar(0.5), b.op(&Binary{Fn: OpMul}, x, t)))
		}, want: []string{"Gelu"}, stats: OptimizeStats{Composites: 1}},
		{name: "gelu_half_first_layernorm_no_affine", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 3, 5)
			mean := b.op(&Reduce{Fn: ReduceMean, Axes: []int{1, 2}, KeepDims: true}, x)
			d := b.op(&Binary{Fn: OpSub}, x, mean)
			v := b.op(&Reduce{Fn: ReduceMean, Axes: []int{-2, -1}, KeepDims: true}, b.op(&Binary{Fn: OpMul}, d, d))
			ln := b.op(&Binary{Fn: OpDiv}, d, b.op(&Unary{Fn: OpSqrt}, b.op(&Binary{Fn: OpAdd}, b.scalar(1e-6), v)))
			e := b.op(&Unary{Fn: OpErf}, b.op(&Binary{Fn: OpMul}, ln, b.scalar(1/math.Sqrt2)))
			return b.out(b.op(&Binary{Fn: OpMul}, b.op(&Binary{Fn: OpMul}, ln, b.scalar(0.5)), b.op(&Binary{Fn: OpAdd}, b.scalar(1), e)))
		}, want: []string{"LayerNormalization", "Gelu"}, stats: OptimizeStats{Composites: 2}},
		{name: "gelu_pattern_with_shared_inner_kept", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 4)
			e := b.op(&Unary{Fn: OpErf}, b.op(&Binary{Fn: OpDiv}, x, b.scalar(math.Sqrt2)))
			a := b.op(&Binary{Fn: OpAdd}, e, b.scalar(1))
			return b.out(b.op(&Binary{Fn: OpMul}, b.op(&Binary{Fn: OpMul}, x, a), b.scalar(0.5)), a)
		}, want: []string{"Div", "Erf", "Add", "Mul", "Mul"}},
		{name: "transformer_mlp", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 5, 8)
			h := b.op(&LayerNorm{Axis: -1, Epsilon: 1e-6}, x, b.konst(0.5, 1.5, 8), b.w(8))
			h = b.op(&Gelu{}, b.op(&Binary{Fn: OpAdd}, b.op(&MatMul{}, h, b.w(8, 16)), b.w(16)))
			h = b.op(&Binary{Fn: OpAdd}, b.op(&Binary{Fn: OpAdd}, b.op(&MatMul{}, h, b.w(16, 8)), b.w(8)), x)
			return b.out(b.op(&Softmax{Axis: -1}, h))
		}, want: []string{"LayerNormalization", "MatMul+gelu", "MatMul+residual+none", "Softmax"}, stats: OptimizeStats{Fused: 4}},
		{name: "identities_and_folds", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 4)
			k := b.op(&Binary{Fn: OpMul}, b.w(4), b.scalar(3)) // constant: folds
			y := b.op(&Dropout{}, b.op(&Unary{Fn: OpIdentity}, b.op(&Binary{Fn: OpAdd}, x, k)))
			return b.out(b.op(&Unary{Fn: OpIdentity}, y))
		}, want: []string{"Add"}, stats: OptimizeStats{Folded: 1, Identities: 3}},
		{name: "shared_output_not_fused", build: func(b *graphBuilder) *Graph {
			x := b.input("x", 2, 3, 3)
			y := b.op(&Conv{}, x, b.w(2, 2, 1, 1))
			return b.out(y, b.op(&Unary{Fn: OpRelu}, b.bn(y, 2)))
		}, want: []string{"Conv", "BatchNormalization", "Relu"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := c.build(newGraphBuilder(int64(len(c.name))))
			in := randomInputs(g, rand.New(rand.NewSource(9)))
			want, err := EvaluateBound(context.Background(), g, in)
			if err != nil {
				t.Fatal(err)
			}
			opt, st, err := Optimize(g, 2)
			if err != nil {
				t.Fatal(err)
			}
			if got := kinds(opt); !slices.Equal(got, c.want) {
				t.Errorf("optimized to %v, want %v", got, c.want)
			}
			st.NodesBefore, st.NodesAfter = 0, 0
			if st != c.stats {
				t.Errorf("stats %+v, want %+v", st, c.stats)
			}
			sameOutputs(t, "optimized", evalGraph(t, opt, in), want)
			// Optimizing again changes nothing: fused ops bind as they are.
			again, st2, err := Optimize(opt, 2)
			if err != nil {
				t.Fatalf("optimizing the optimized graph: %v", err)
			}
			if got := kinds(again); !slices.Equal(got, c.want) || st2.NodesAfter != st2.NodesBefore {
				t.Errorf("optimizing again gave %v (%s)", got, st2)
			}
			sameOutputs(t, "optimized twice", evalGraph(t, again, in), want)
			if n, err := Decompose(opt, nil); err != nil {
				t.Fatal(err)
			} else if err := opt.Validate(); err != nil {
				t.Fatalf("after decomposing %d nodes: %v", n, err)
			}
			for _, n := range opt.Nodes {
				switch n.Op.(type) {
				case *Gelu, *LayerNorm, *HardSigmoid, *BatchNorm:
					t.Errorf("%s left after Decompose", n)
				case *Softmax:
					if !n.Op.(*Softmax).Hard {
						t.Errorf("%s left after Decompose", n)
					}
				}
				if ep, ok := epilogueOf(n.Op); ok && !ep.IsZero() {
					t.Errorf("%s keeps epilogue %s after Decompose", n, ep)
				}
			}
			sameOutputs(t, "decomposed", evalGraph(t, opt, in), want)
		})
	}
}

// Decompose turns each composite op into primitives that compute the
// same, and leaves the ops keep claims alone.
func TestDecompose(t *testing.T) {
	for _, c := range []struct {
		name  string
		op    Op
		shape []int
		extra func(b *graphBuilder) []*Value
		keep  func(Op) bool
		kinds []string
	}{
		{name: "silu", op: &Unary{Fn: OpSiLU}, shape: []int{5}, kinds: []string{"Sigmoid", "Mul"}},
		{name: "hardswish", op: &Unary{Fn: OpHardSwish}, shape: []int{5}, kinds: []string{"Mul", "Add", "Clip", "Mul"}},
		{name: "hardswish_keep_hardsigmoid", op: &Unary{Fn: OpHardSwish}, shape: []int{5},
			keep: func(op Op) bool { _, ok := op.(*HardSigmoid); return ok }, kinds: []string{"HardSigmoid", "Mul"}},
		{name: "leakyrelu", op: &LeakyRelu{Alpha: 0.1}, shape: []int{5}, kinds: []string{"Relu", "Clip", "Mul", "Add"}},
		{name: "elu", op: &Elu{Alpha: 0.7}, shape: []int{5}, kinds: []string{"Relu", "Clip", "Exp", "Sub", "Mul", "Add"}},
		{name: "selu", op: &Selu{Alpha: 1.67, Gamma: 1.05}, shape: []int{5}, kinds: []string{"Relu", "Clip", "Exp", "Sub", "Mul", "Add", "Mul"}},
		{name: "celu", op: &Celu{Alpha: 2}, shape: []int{5}, kinds: []string{"Relu", "Clip", "Mul", "Exp", "Sub", "Mul", "Add"}},
		{name: "mish", op: &Unary{Fn: OpMish}, shape: []int{5}, kinds: []string{"Softplus", "Tanh", "Mul"}},
		{name: "gelu", op: &Gelu{}, shape: []int{5}, kinds: []string{"Mul", "Erf", "Add", "Mul", "Mul"}},
		{name: "gelu_tanh", op: &Gelu{Tanh: true}, shape: []int{5}, kinds: []string{"Mul", "Mul", "Mul", "Add", "Mul", "Tanh", "Add", "Mul", "Mul"}},
		{name: "layernorm", op: &LayerNorm{Axis: 1, Epsilon: 1e-5}, shape: []int{3, 4},
			extra: func(b *graphBuilder) []*Value { return []*Value{b.w(3, 4), b.w(4)} },
			kinds: []string{"ReduceMean", "Sub", "Mul", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Add"}},
		{name: "softmax", op: &Softmax{Axis: 1}, shape: []int{3, 4}, kinds: []string{"ReduceMax", "Sub", "Exp", "ReduceSum", "Div"}},
		{name: "logsoftmax", op: &Softmax{Axis: -1, Log: true}, shape: []int{3}, kinds: []string{"ReduceMax", "Sub", "Exp", "ReduceSum", "Log", "Sub"}},
		{name: "softmax_2d", op: &Softmax{Axis: 1, Coerce2D: true}, shape: []int{3, 4},
			kinds: []string{"Flatten", "ReduceMax", "Sub", "Exp", "ReduceSum", "Div", "Reshape"}},
		{name: "batchnorm", op: &BatchNorm{Epsilon: 1e-3}, shape: []int{3, 2, 2},
			extra: func(b *graphBuilder) []*Value {
				return []*Value{b.konst(0.5, 2, 3), b.w(3), b.w(3), b.konst(0.1, 2, 3)}
			},
			kinds: []string{"Mul", "Add"}},
		{name: "softmax_kept", op: &Softmax{Axis: 1}, shape: []int{3}, keep: func(Op) bool { return true }, kinds: []string{"Softmax"}},
		{name: "conv_epilogue", op: &Conv{Epilogue: Epilogue{Act: ActClip, Lo: -0.5, Hi: 0.5, Residual: true}}, shape: []int{2, 3, 3},
			extra: func(b *graphBuilder) []*Value { return []*Value{b.w(2, 2, 1, 1), b.w(2), b.w(1, 2, 3, 3)} },
			kinds: []string{"Conv", "Add", "Clip"}},
		{name: "matmul_bias_silu", op: &MatMul{Epilogue: Epilogue{Act: ActSiLU}}, shape: []int{4},
			extra: func(b *graphBuilder) []*Value { return []*Value{b.w(4, 3), b.w(3)} },
			kinds: []string{"MatMul", "Add", "Sigmoid", "Mul"}},
		{name: "gemm_leaky", op: &Gemm{Alpha: 1, Beta: 1, Epilogue: Epilogue{Act: ActLeakyRelu, Alpha: 0.2}}, shape: []int{4},
			extra: func(b *graphBuilder) []*Value { return []*Value{b.w(4, 3)} },
			kinds: []string{"Gemm", "Relu", "Clip", "Mul", "Add"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newGraphBuilder(7)
			x := b.input("x", c.shape...)
			in := []*Value{x}
			if c.extra != nil {
				in = append(in, c.extra(b)...)
			}
			g := b.out(b.op(c.op, in...))
			inputs := randomInputs(g, rand.New(rand.NewSource(3)))
			want, err := EvaluateBound(context.Background(), g, inputs)
			if err != nil {
				t.Fatal(err)
			}
			bound, err := Bind(g, 2)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Decompose(bound, c.keep); err != nil {
				t.Fatal(err)
			}
			if err := bound.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := kinds(bound); !slices.Equal(got, c.kinds) {
				t.Errorf("decomposed to %v, want %v", got, c.kinds)
			}
			sameOutputs(t, "decomposed", evalGraph(t, bound, inputs), want)
		})
	}
}

// Passes must not change the graph Bind copied from: ops are shared.
func TestOptimizeLeavesInputGraphAlone(t *testing.T) {
	b := newGraphBuilder(1)
	x := b.input("x", 2, 3, 3)
	conv := &Conv{}
	g := b.out(b.op(&Unary{Fn: OpRelu}, b.bn(b.op(conv, x, b.w(2, 2, 1, 1)), 2)))
	opt, _, err := Optimize(g, 1)
	if err != nil {
		t.Fatal(err)
	}
	if conv.Epilogue.Act != ActNone || len(g.Nodes) != 3 || len(g.Nodes[0].Inputs) != 2 {
		t.Fatalf("the input graph changed: conv epilogue %s, %d nodes", conv.Epilogue, len(g.Nodes))
	}
	if _, err := Decompose(opt, nil); err != nil {
		t.Fatal(err)
	}
	if conv.Epilogue.Act != ActNone {
		t.Fatal("Decompose changed the original op")
	}
}
