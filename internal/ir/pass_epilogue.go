package ir

import (
	"math"

	"goinfer/internal/tensor"
)

// FuseEpilogues merges what follows a Conv, Gemm or MatMul into its
// Epilogue, in the epilogue's order: a constant per-channel Add into the
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
				if ep.Act != ActNone || ep.Residual {
					continue
				}
				newIn = residualInputs(n, other)
				newEp.Residual = true
			}
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
		shape := ca.Shape
		if old != nil {
			var err error
			if shape, err = BroadcastShape(old.Shape, ca.Shape); err != nil {
				return nil, nil
			}
		}
		nb = NewArray(n.Outputs[0].Type.DType, shape)
		ci := BroadcastIndex(ca.Shape, shape)
		var oi []int
		if old != nil {
			oi = BroadcastIndex(old.Shape, shape)
		}
		for k := range nb.Data {
			nb.Data[k] = ca.Data[ci[k]]
			if old != nil {
				nb.Data[k] += op.Beta * old.Data[oi[k]]
			}
		}
		if op.Beta != 1 {
			g := *op
			g.Beta = 1
			n.Op = &g
		}
	case *MatMul:
		shape := ca.Shape
		if old != nil {
			var err error
			if shape, err = BroadcastShape(old.Shape, ca.Shape); err != nil {
				return nil, nil
			}
		}
		nb = NewArray(n.Outputs[0].Type.DType, shape)
		ci := BroadcastIndex(ca.Shape, shape)
		var oi []int
		if old != nil {
			oi = BroadcastIndex(old.Shape, shape)
		}
		for k := range nb.Data {
			nb.Data[k] = ca.Data[ci[k]]
			if old != nil {
				nb.Data[k] += old.Data[oi[k]]
			}
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
