package ir

import (
	"math"

	"goinfer/internal/tensor"
)

// Decompose rewrites the composite ops an engine does not claim into the
// primitives they are made of: SiLU, HardSwish, HardSigmoid, Mish,
// LeakyRelu, Elu, Selu, Celu, Gelu
// (both forms), LayerNormalization (when its statistics outputs are
// unused), BatchNormalization with constant parameters (a per-channel
// Mul and Add), Softmax and LogSoftmax (the opset<13 2-D form through Flatten
// and Reshape), and a Conv's, Gemm's or MatMul's fused epilogue (back into
// the op, Adds and an activation node). keep reports the ops the engine
// runs as they are; nil keeps none. The pieces a rewrite produces are
// offered to keep in turn. g must be bound; it returns how many nodes
// were rewritten.
func Decompose(g *Graph, keep func(Op) bool) (int, error) {
	if keep == nil {
		keep = func(Op) bool { return false }
	}
	cons := g.Consumers()
	outs := graphOutputs(g)
	count := 0
	var result []*Node
	queue := append([]*Node(nil), g.Nodes...)
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		if keep(n.Op) {
			result = append(result, n)
			continue
		}
		parts, err := decomposeNode(n, cons, outs)
		if err != nil {
			return count, err
		}
		if parts == nil {
			result = append(result, n)
			continue
		}
		count++
		// The last piece computes n's output: it takes over n's value so
		// that readers and graph outputs need not change.
		last := parts[len(parts)-1]
		y := n.Outputs[0]
		y.Producer = last
		last.Outputs[0] = y
		queue = append(parts, queue...)
	}
	g.Nodes = result
	return count, nil
}

// decomposeNode returns the primitive nodes computing n, or nil when n is
// not a composite op (or its form cannot be decomposed).
func decomposeNode(n *Node, cons map[*Value][]*Node, outs map[*Value]bool) ([]*Node, error) {
	if len(n.Inputs) == 0 || n.Inputs[0] == nil || len(n.Outputs) == 0 || n.Outputs[0] == nil {
		return nil, nil
	}
	b := &builder{base: n.Name}
	if b.base == "" {
		b.base = n.Op.Kind()
	}
	x := n.Inputs[0]
	dt := x.Type.DType
	k := func(name string, v float64) *Value { return scalarConst(b.base+"/"+name, dt, v) }
	var err error
	switch op := n.Op.(type) {
	case *Unary:
		switch op.Fn {
		case OpSiLU:
			err = b.gate(x, &Unary{Fn: OpSigmoid})
		case OpHardSwish:
			err = b.gate(x, &HardSigmoid{Alpha: 1.0 / 6, Beta: 0.5})
		case OpMish:
			var sp, t *Value
			if sp, err = b.add(&Unary{Fn: OpSoftplus}, x); err == nil {
				if t, err = b.add(&Unary{Fn: OpTanh}, sp); err == nil {
					_, err = b.add(&Binary{Fn: OpMul}, x, t)
				}
			}
		default:
			return nil, nil
		}
	case *LeakyRelu:
		// relu(x) + alpha*min(x, 0)
		err = b.negativePart(x, k, func(neg *Value) (*Value, error) {
			return b.add(&Binary{Fn: OpMul}, neg, k("alpha", op.Alpha))
		}, 1)
	case *Elu:
		// relu(x) + alpha*(exp(min(x, 0)) - 1)
		err = b.negativePart(x, k, func(neg *Value) (*Value, error) { return b.expm1Scaled(neg, op.Alpha, 1, k) }, 1)
	case *Selu:
		// gamma*(relu(x) + alpha*(exp(min(x, 0)) - 1))
		err = b.negativePart(x, k, func(neg *Value) (*Value, error) { return b.expm1Scaled(neg, op.Alpha, 1, k) }, op.Gamma)
	case *Celu:
		// relu(x) + alpha*(exp(min(x, 0)/alpha) - 1)
		err = b.negativePart(x, k, func(neg *Value) (*Value, error) { return b.expm1Scaled(neg, op.Alpha, 1/op.Alpha, k) }, 1)
	case *HardSigmoid:
		err = b.chain(x, func(v *Value) (*Value, error) { return b.add(&Binary{Fn: OpMul}, v, k("alpha", op.Alpha)) },
			func(v *Value) (*Value, error) { return b.add(&Binary{Fn: OpAdd}, v, k("beta", op.Beta)) },
			func(v *Value) (*Value, error) { return b.add(&Clip{}, v, k("zero", 0), k("one", 1)) })
	case *Gelu:
		err = b.gelu(x, op.Tanh, k)
	case *LayerNorm:
		for _, o := range n.Outputs[1:] {
			if o != nil && (len(cons[o]) > 0 || outs[o]) {
				return nil, nil
			}
		}
		err = b.layerNorm(n, op, k)
	case *Softmax:
		if op.Hard {
			return nil, nil
		}
		err = b.softmax(x, op)
	case *BatchNorm:
		s, shift, ok := bnAffine(op, n.Inputs)
		if !ok || len(n.Inputs) != 5 {
			return nil, nil
		}
		err = b.channelAffine(x, s, shift)
	case *Conv, *Gemm, *MatMul:
		ep, _ := epilogueOf(op)
		if ep.IsZero() && !(isMatMul(op) && n.Input(2) != nil) {
			return nil, nil
		}
		err = b.unfuse(n, ep, k)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	n.Outputs = n.Outputs[:1]
	return b.nodes, nil
}

func isMatMul(op Op) bool { _, ok := op.(*MatMul); return ok }

// chain applies steps in turn, starting from x.
func (b *builder) chain(x *Value, steps ...func(*Value) (*Value, error)) error {
	v := x
	for _, s := range steps {
		var err error
		if v, err = s(v); err != nil {
			return err
		}
	}
	return nil
}

// negativePart builds gamma*(relu(x) + f(min(x, 0))), the form of the
// exponential and leaky linear units.
func (b *builder) negativePart(x *Value, k func(string, float64) *Value, f func(neg *Value) (*Value, error), gamma float64) error {
	pos, err := b.add(&Unary{Fn: OpRelu}, x)
	if err != nil {
		return err
	}
	neg, err := b.add(&Clip{}, x, nil, k("zero", 0))
	if err != nil {
		return err
	}
	if neg, err = f(neg); err != nil {
		return err
	}
	sum, err := b.add(&Binary{Fn: OpAdd}, pos, neg)
	if err != nil || gamma == 1 {
		return err
	}
	_, err = b.add(&Binary{Fn: OpMul}, sum, k("gamma", gamma))
	return err
}

// expm1Scaled builds alpha*(exp(v*inner) - 1).
func (b *builder) expm1Scaled(v *Value, alpha, inner float64, k func(string, float64) *Value) (*Value, error) {
	var err error
	if inner != 1 {
		if v, err = b.add(&Binary{Fn: OpMul}, v, k("inner", inner)); err != nil {
			return nil, err
		}
	}
	if v, err = b.add(&Unary{Fn: OpExp}, v); err != nil {
		return nil, err
	}
	if v, err = b.add(&Binary{Fn: OpSub}, v, k("one", 1)); err != nil {
		return nil, err
	}
	return b.add(&Binary{Fn: OpMul}, v, k("alpha", alpha))
}

// gate builds x * f(x).
func (b *builder) gate(x *Value, f Op) error {
	g, err := b.add(f, x)
	if err != nil {
		return err
	}
	_, err = b.add(&Binary{Fn: OpMul}, x, g)
	return err
}

// gelu builds x/2 * (1 + erf(x/sqrt 2)) or, for the tanh form,
// x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))).
func (b *builder) gelu(x *Value, tanh bool, k func(string, float64) *Value) error {
	var inner *Value
	var err error
	if tanh {
		var x2, x3, t, s *Value
		if x2, err = b.add(&Binary{Fn: OpMul}, x, x); err != nil {
			return err
		}
		if x3, err = b.add(&Binary{Fn: OpMul}, x2, x); err != nil {
			return err
		}
		if t, err = b.add(&Binary{Fn: OpMul}, x3, k("c3", 0.044715)); err != nil {
			return err
		}
		if s, err = b.add(&Binary{Fn: OpAdd}, x, t); err != nil {
			return err
		}
		if t, err = b.add(&Binary{Fn: OpMul}, s, k("c", math.Sqrt(2/math.Pi))); err != nil {
			return err
		}
		inner, err = b.add(&Unary{Fn: OpTanh}, t)
	} else {
		var t *Value
		if t, err = b.add(&Binary{Fn: OpMul}, x, k("rsqrt2", 1/math.Sqrt2)); err != nil {
			return err
		}
		inner, err = b.add(&Unary{Fn: OpErf}, t)
	}
	if err != nil {
		return err
	}
	one, err := b.add(&Binary{Fn: OpAdd}, inner, k("one", 1))
	if err != nil {
		return err
	}
	h, err := b.add(&Binary{Fn: OpMul}, x, one)
	if err != nil {
		return err
	}
	_, err = b.add(&Binary{Fn: OpMul}, h, k("half", 0.5))
	return err
}

// layerNorm builds (x - mean) / sqrt(var + eps) * scale + bias over the
// trailing axes.
func (b *builder) layerNorm(n *Node, op *LayerNorm, k func(string, float64) *Value) error {
	x := n.Inputs[0]
	rank := len(x.Type.Shape)
	axis, err := axisOf(op.Axis, rank, "axis")
	if err != nil {
		return err
	}
	var axes []int
	for a := axis; a < rank; a++ {
		axes = append(axes, a)
	}
	mean, err := b.add(&Reduce{Fn: ReduceMean, Axes: axes, KeepDims: true}, x)
	if err != nil {
		return err
	}
	d, err := b.add(&Binary{Fn: OpSub}, x, mean)
	if err != nil {
		return err
	}
	sq, err := b.add(&Binary{Fn: OpMul}, d, d)
	if err != nil {
		return err
	}
	v, err := b.add(&Reduce{Fn: ReduceMean, Axes: axes, KeepDims: true}, sq)
	if err != nil {
		return err
	}
	ve, err := b.add(&Binary{Fn: OpAdd}, v, k("eps", op.Epsilon))
	if err != nil {
		return err
	}
	sd, err := b.add(&Unary{Fn: OpSqrt}, ve)
	if err != nil {
		return err
	}
	y, err := b.add(&Binary{Fn: OpDiv}, d, sd)
	if err != nil {
		return err
	}
	if y, err = b.add(&Binary{Fn: OpMul}, y, n.Inputs[1]); err != nil {
		return err
	}
	if bias := n.Input(2); bias != nil {
		_, err = b.add(&Binary{Fn: OpAdd}, y, bias)
	}
	return err
}

// softmax builds exp(x - max) / sum, or (x - max) - log(sum) for
// LogSoftmax, along the axis; the 2-D form flattens first and reshapes
// back.
func (b *builder) softmax(x *Value, op *Softmax) error {
	if op.Coerce2D {
		axis, err := axisOf(op.Axis, len(x.Type.Shape), "axis")
		if err != nil {
			return err
		}
		flat, err := b.add(&Flatten{Axis: axis}, x)
		if err != nil {
			return err
		}
		s, err := b.add(&Softmax{Axis: 1, Log: op.Log}, flat)
		if err != nil {
			return err
		}
		shape := make([]float64, len(x.Type.Shape))
		for i, d := range x.Type.Shape {
			shape[i] = float64(d)
		}
		sv, err := constValue(b.base+"/shape", &Array{DType: tensor.Int64, Shape: tensor.Shape{len(shape)}, Data: shape})
		if err != nil {
			return err
		}
		_, err = b.add(&Reshape{}, s, sv)
		return err
	}
	m, err := b.add(&Reduce{Fn: ReduceMax, Axes: []int{op.Axis}, KeepDims: true}, x)
	if err != nil {
		return err
	}
	d, err := b.add(&Binary{Fn: OpSub}, x, m)
	if err != nil {
		return err
	}
	e, err := b.add(&Unary{Fn: OpExp}, d)
	if err != nil {
		return err
	}
	s, err := b.add(&Reduce{Fn: ReduceSum, Axes: []int{op.Axis}, KeepDims: true}, e)
	if err != nil {
		return err
	}
	if op.Log {
		l, err := b.add(&Unary{Fn: OpLog}, s)
		if err != nil {
			return err
		}
		_, err = b.add(&Binary{Fn: OpSub}, d, l)
		return err
	}
	_, err = b.add(&Binary{Fn: OpDiv}, e, s)
	return err
}

// channelAffine builds x*s + shift with s and shift per channel (axis 1).
func (b *builder) channelAffine(x *Value, s, shift []float64) error {
	shape := make(tensor.Shape, len(x.Type.Shape)-1)
	for i := range shape {
		shape[i] = 1
	}
	shape[0] = len(s)
	sa := &Array{DType: x.Type.DType, Shape: shape, Data: s}
	ta := &Array{DType: x.Type.DType, Shape: shape.Clone(), Data: shift}
	sv, err := constValue(b.base+"/scale", sa)
	if err != nil {
		return err
	}
	tv, err := constValue(b.base+"/shift", ta)
	if err != nil {
		return err
	}
	y, err := b.add(&Binary{Fn: OpMul}, x, sv)
	if err != nil {
		return err
	}
	_, err = b.add(&Binary{Fn: OpAdd}, y, tv)
	return err
}

// unfuse splits a fused op into the plain op, an Add of a MatMul's bias,
// an Add of the residual and the activation.
func (b *builder) unfuse(n *Node, ep Epilogue, k func(string, float64) *Value) error {
	var base Op
	in := n.Inputs
	switch op := n.Op.(type) {
	case *Conv:
		c := *op
		c.Epilogue = Epilogue{}
		base = &c
		in = in[:min(len(in), 3)]
	case *Gemm:
		c := *op
		c.Epilogue = Epilogue{}
		base = &c
		in = in[:min(len(in), 3)]
	case *MatMul:
		base = &MatMul{}
		in = in[:2]
	}
	for len(in) > 0 && in[len(in)-1] == nil {
		in = in[:len(in)-1]
	}
	y, err := b.add(base, in...)
	if err != nil {
		return err
	}
	if _, ok := n.Op.(*MatMul); ok && n.Input(2) != nil {
		if y, err = b.add(&Binary{Fn: OpAdd}, y, n.Input(2)); err != nil {
			return err
		}
	}
	if ep.Residual {
		if y, err = b.add(&Binary{Fn: OpAdd}, y, n.Input(3)); err != nil {
			return err
		}
	}
	var act Op
	var extra []*Value
	switch ep.Act {
	case ActNone:
		return nil
	case ActRelu:
		act = &Unary{Fn: OpRelu}
	case ActRelu6:
		act, extra = &Clip{}, []*Value{k("lo", 0), k("hi", 6)}
	case ActClip:
		act, extra = &Clip{}, []*Value{k("lo", ep.Lo), k("hi", ep.Hi)}
	case ActSigmoid:
		act = &Unary{Fn: OpSigmoid}
	case ActSiLU:
		act = &Unary{Fn: OpSiLU}
	case ActHardSwish:
		act = &Unary{Fn: OpHardSwish}
	case ActHardSigmoid:
		act = &HardSigmoid{Alpha: ep.Alpha, Beta: ep.Beta}
	case ActGELU:
		act = &Gelu{}
	case ActGELUTanh:
		act = &Gelu{Tanh: true}
	case ActLeakyRelu:
		act = &LeakyRelu{Alpha: ep.Alpha}
	case ActTanh:
		act = &Unary{Fn: OpTanh}
	default:
		_, err := ep.Func()
		return err
	}
	_, err = b.add(act, append([]*Value{y}, extra...)...)
	return err
}
