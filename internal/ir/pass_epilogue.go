package ir

import (
	"math"

	"goinfer/internal/tensor"
)

// FuseEpilogues merges what follows a Conv, Gemm or MatMul into its
// Epilogue, in the epilogue's order: a constant per-channel Mul into the
// weights and bias (layer scales), a constant per-channel Add into the
// bias, then one Add of another tensor as the residual, then one
// activation (Relu, Clip with constant bounds, Sigmoid, SiLU, HardSwish,
// HardSigmoid, Gelu, LeakyRelu, Tanh; FuseComposites first turns the
// spelled-out SiLU, HardSwish and GELU into single nodes). A merge happens only where the op's output feeds the next node alone.
// g must be bound; it returns how many nodes were merged away.
func FuseEpilogues(g *Graph) (int, error) {
	fused := 0
	for {
		n, err := fuseEpilogueStep(g)
		if err != nil {
			return fused, err
		}
		if n == 0 {
			return fused, nil
		}
		fused += n
	}
}

// epilogueOf returns a fusable node's epilogue.
func epilogueOf(op Op) (Epilogue, bool) {
	switch o := op.(type) {
	case *Conv:
		return o.Epilogue, true
	case *Gemm:
		return o.Epilogue, true
	case *MatMul:
		return o.Epilogue, true
	}
	return Epilogue{}, false
}

// withEpilogue returns a copy of op with epilogue e.
func withEpilogue(op Op, e Epilogue) Op {
	switch o := op.(type) {
	case *Conv:
		c := *o
		c.Epilogue = e
		return &c
	case *Gemm:
		c := *o
		c.Epilogue = e
		return &c
	case *MatMul:
		c := *o
		c.Epilogue = e
		return &c
	}
	return op
}

// activationOf maps an activation node to an epilogue activation.
func activationOf(n *Node) (Epilogue, bool) {
	if len(n.Inputs) == 0 {
		return Epilogue{}, false
	}
	switch op := n.Op.(type) {
	case *Unary:
		if len(n.Inputs) != 1 {
			return Epilogue{}, false
		}
		switch op.Fn {
		case OpRelu:
			return Epilogue{Act: ActRelu}, true
		case OpSigmoid:
			return Epilogue{Act: ActSigmoid}, true
		case OpTanh:
			return Epilogue{Act: ActTanh}, true
		case OpSiLU:
			return Epilogue{Act: ActSiLU}, true
		case OpHardSwish:
			return Epilogue{Act: ActHardSwish}, true
		}
	case *Clip:
		lo, hi, ok := ClipBounds(n)
		if !ok {
			return Epilogue{}, false
		}
		if lo == 0 && hi == 6 {
			return Epilogue{Act: ActRelu6}, true
		}
		if lo == 0 && math.IsInf(hi, 1) {
			return Epilogue{Act: ActRelu}, true
		}
		return Epilogue{Act: ActClip, Lo: lo, Hi: hi}, true
	case *LeakyRelu:
		return Epilogue{Act: ActLeakyRelu, Alpha: op.Alpha}, true
	case *HardSigmoid:
		return Epilogue{Act: ActHardSigmoid, Alpha: op.Alpha, Beta: op.Beta}, true
	case *Gelu:
		if op.Tanh {
			return Epilogue{Act: ActGELUTanh}, true
		}
		return Epilogue{Act: ActGELU}, true
	}
	return Epilogue{}, false
}

// fuseEpilogueStep performs the merges available now and reports how many.
func fuseEpilogueStep(g *Graph) (int, error) {
	cons := g.Consumers()
	outs := graphOutputs(g)
	drop := map[*Node]bool{}
	for _, n := range g.Nodes {
		ep, ok := epilogueOf(n.Op)
		if !ok || drop[n] || len(n.Outputs) != 1 {
			continue
		}
		y := n.Outputs[0]
		if !soleUse(y, cons, outs) {
			continue
		}
		c := cons[y][0]
		if drop[c] || len(c.Outputs) != 1 {
			continue
		}
		var newIn []*Value
		newEp := ep
		if b, isBin := c.Op.(*Binary); isBin && b.Fn == OpAdd && len(c.Inputs) == 2 {
			other := c.Inputs[0]
			if other == y {
				other = c.Inputs[1]
			}
			if other == y || other.Type.DType != y.Type.DType {
				continue
			}
			if s, err := BroadcastShape(y.Type.Shape, other.Type.Shape); err != nil || !s.Equal(y.Type.Shape) {
				continue
			}
			if ep.IsZero() && other.IsConst() {
				in, err := mergeBias(n, other)
				if err != nil {
					return 0, err
				}
				if in != nil {
					newIn = in
				}
			}
			if newIn == nil {
				// A residual of the output's own shape only: engines need
				// not broadcast inside their epilogues.
				if ep.Act != ActNone || ep.Residual || !other.Type.Shape.Equal(y.Type.Shape) {
					continue
				}
				newIn = residualInputs(n, other)
				newEp.Residual = true
			}
		} else if b, isBin := c.Op.(*Binary); isBin && b.Fn == OpMul && len(c.Inputs) == 2 {
			other := c.Inputs[0]
			if other == y {
				other = c.Inputs[1]
			}
			if other == y || !other.IsConst() || !ep.IsZero() {
				continue
			}
			in, err := mergeScale(n, other)
			if err != nil {
				return 0, err
			}
			if in == nil {
				continue
			}
			newIn = in
		} else if act, isAct := activationOf(c); isAct && c.Inputs[0] == y && ep.Act == ActNone {
			newEp.Act, newEp.Alpha, newEp.Beta, newEp.Lo, newEp.Hi = act.Act, act.Alpha, act.Beta, act.Lo, act.Hi
			newIn = n.Inputs
		} else {
			continue
		}
		// The merged node takes the consumer's place, after every input
		// the consumer reads (the residual may come after n).
		c.Op = withEpilogue(n.Op, newEp)
		c.Inputs = newIn
		c.Name = n.Name
		drop[n] = true
	}
	dropNodes(g, drop)
	return len(drop), nil
}

// residualInputs returns n's inputs padded to the bias slot plus r.
func residualInputs(n *Node, r *Value) []*Value {
	in := append([]*Value(nil), n.Inputs...)
	for len(in) < 3 {
		in = append(in, nil)
	}
	return append(in[:3], r)
}

// mergeBias returns n's inputs with the constant c added into its bias,
// or nil when c does not act as one (a Conv's must vary by channel only).
func mergeBias(n *Node, c *Value) ([]*Value, error) {
	ca := constArray(c)
	if ca == nil {
		return nil, nil
	}
	y := n.Outputs[0].Type.Shape
	var old *Array
	if bv := n.Input(2); bv != nil {
		if old = constArray(bv); old == nil {
			return nil, nil
		}
	}
	var nb *Array
	switch op := n.Op.(type) {
	case *Conv:
		// c, aligned to y's rank, must be 1 except along the channels.
		off := len(y) - len(ca.Shape)
		for i, d := range ca.Shape {
			if d != 1 && off+i != 1 {
				return nil, nil
			}
		}
		m := y[1]
		nb = NewArray(n.Outputs[0].Type.DType, tensor.Shape{m})
		for k := 0; k < m; k++ {
			if len(ca.Data) == 1 {
				nb.Data[k] = ca.Data[0]
			} else {
				nb.Data[k] = ca.Data[k]
			}
			if old != nil {
				nb.Data[k] += old.Data[k]
			}
		}
	case *Gemm:
		if nb = matBias(ca, old, op.Beta, n.Outputs[0].Type); nb == nil {
			return nil, nil
		}
		if op.Beta != 1 {
			g := *op
			g.Beta = 1
			n.Op = &g
		}
	case *MatMul:
		if nb = matBias(ca, old, 1, n.Outputs[0].Type); nb == nil {
			return nil, nil
		}
	default:
		return nil, nil
	}
	bv, err := constValue(n.Name+"/bias", nb)
	if err != nil {
		return nil, err
	}
	in := append([]*Value(nil), n.Inputs...)
	for len(in) < 3 {
		in = append(in, nil)
	}
	in[2] = bv
	return in[:3], nil
}

// matBias returns the bias of a Gemm or MatMul with output type out after
// constant c is added to its bias old (nil when it has none) scaled by
// beta, or nil when the sum is not a bias the engines take.
func matBias(c, old *Array, beta float64, out Type) *Array {
	shape := c.Shape
	if old != nil {
		var err error
		if shape, err = BroadcastShape(old.Shape, c.Shape); err != nil {
			return nil
		}
	}
	// Engines take a MatMul bias along the last dimension or of the
	// output's whole shape; a bias broadcast some other way (Swin's
	// attention bias, [1, heads, N, N] over [B, heads, N, N]) stays an
	// Add of its own.
	y := out.Shape
	if !(len(shape) == 1 && len(y) > 0 && shape[0] == y[len(y)-1]) && !shape.Equal(y) {
		return nil
	}
	nb := NewArray(out.DType, shape)
	ci := BroadcastIndex(c.Shape, shape)
	var oi []int
	if old != nil {
		oi = BroadcastIndex(old.Shape, shape)
	}
	for k := range nb.Data {
		nb.Data[k] = c.Data[ci[k]]
		if old != nil {
			nb.Data[k] += beta * old.Data[oi[k]]
		}
	}
	return nb
}

// channelVector returns the per-output-channel values of constant c, read
// along axis of an output of shape y, when c varies along that axis only.
func channelVector(c *Array, y tensor.Shape, axis int) ([]float64, bool) {
	off := len(y) - len(c.Shape)
	if off < 0 {
		return nil, false
	}
	for i, d := range c.Shape {
		if d != 1 && off+i != axis {
			return nil, false
		}
	}
	v := make([]float64, y[axis])
	for k := range v {
		if len(c.Data) == 1 {
			v[k] = c.Data[0]
		} else if len(c.Data) == len(v) {
			v[k] = c.Data[k]
		} else {
			return nil, false
		}
	}
	return v, true
}

// mergeScale returns n's inputs with its weights and bias multiplied by
// the constant per-channel c, or nil when c is no such constant or the
// weights are not constants.
func mergeScale(n *Node, c *Value) ([]*Value, error) {
	ca := constArray(c)
	y := n.Outputs[0].Type.Shape
	if ca == nil || ca.DType != n.Outputs[0].Type.DType || len(y) == 0 {
		return nil, nil
	}
	axis := len(y) - 1
	if _, ok := n.Op.(*Conv); ok {
		axis = 1
	}
	s, ok := channelVector(ca, y, axis)
	if !ok {
		return nil, nil
	}
	w := constArray(n.Input(1))
	if w == nil {
		return nil, nil
	}
	nw := w.Clone()
	switch op := n.Op.(type) {
	case *Conv:
		per := w.Shape[1:].NumElements()
		for i := range nw.Data {
			nw.Data[i] *= s[i/per]
		}
	case *Gemm:
		for i := range nw.Data {
			j := i % w.Shape[1]
			if op.TransB {
				j = i / w.Shape[1]
			}
			nw.Data[i] *= s[j]
		}
	case *MatMul:
		if len(w.Shape) != 2 {
			return nil, nil
		}
		for i := range nw.Data {
			nw.Data[i] *= s[i%w.Shape[1]]
		}
	default:
		return nil, nil
	}
	wv, err := constValue(n.Input(1).Name+"/scaled", nw)
	if err != nil {
		return nil, err
	}
	in := []*Value{n.Inputs[0], wv}
	if bv := n.Input(2); bv != nil {
		b := constArray(bv)
		if b == nil {
			return nil, nil
		}
		// A Conv's bias is [M]; a Gemm's C or a MatMul's bias broadcasts to
		// the output, whose last axis the scale runs along.
		shape, err := BroadcastShape(b.Shape, tensor.Shape{len(s)})
		if err != nil {
			return nil, nil
		}
		nb := NewArray(b.DType, shape)
		bi := BroadcastIndex(b.Shape, shape)
		for k := range nb.Data {
			nb.Data[k] = b.Data[bi[k]] * s[k%len(s)]
		}
		nbv, err := constValue(n.Name+"/scaled_bias", nb)
		if err != nil {
			return nil, err
		}
		in = append(in, nbv)
	}
	return in, nil
}
