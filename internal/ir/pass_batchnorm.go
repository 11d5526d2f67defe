package ir

import (
	"fmt"
	"math"

	"goinfer/internal/tensor"
)

// FoldBatchNorm folds every inference BatchNormalization that follows a
// Conv, ConvTranspose or Gemm into that op's weight and bias: the BN's
// per-channel scale s = scale/sqrt(var+eps) multiplies the weights of each
// output channel and the bias becomes (bias-mean)*s + B. It applies only
// where the producer's output feeds the BN alone, the producer has no
// epilogue yet, and the weights, bias and BN parameters are constants. g
// must be bound; it returns how many BNs it folded.
func FoldBatchNorm(g *Graph) (int, error) {
	cons := g.Consumers()
	outs := graphOutputs(g)
	drop := map[*Node]bool{}
	for _, bn := range g.Nodes {
		op, ok := bn.Op.(*BatchNorm)
		if !ok || len(bn.Inputs) != 5 {
			continue
		}
		x := bn.Inputs[0]
		p := x.Producer
		if p == nil || drop[p] || !soleUse(x, cons, outs) || p.Outputs[0] != x {
			continue
		}
		s, shift, ok := bnAffine(op, bn.Inputs)
		if !ok {
			continue
		}
		var err error
		switch pop := p.Op.(type) {
		case *Conv:
			if !pop.Epilogue.IsZero() {
				continue
			}
			ok, err = foldIntoConv(p, s, shift, false)
		case *ConvTranspose:
			ok, err = foldIntoConv(p, s, shift, true)
		case *Gemm:
			if !pop.Epilogue.IsZero() {
				continue
			}
			ok, err = foldIntoGemm(p, pop, s, shift)
		default:
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("%s: folding %s: %w", p, bn, err)
		}
		if !ok {
			continue
		}
		y := bn.Outputs[0]
		y.Producer = p
		p.Outputs[0] = y
		drop[bn] = true
	}
	dropNodes(g, drop)
	return len(drop), nil
}

// bnAffine returns the BN as y = x*s + shift per channel, when its
// parameters are per-channel constants.
func bnAffine(op *BatchNorm, in []*Value) (s, shift []float64, ok bool) {
	var p [4]*Array
	for i := range p {
		if p[i] = constArray(in[i+1]); p[i] == nil || len(p[i].Shape) != 1 {
			return nil, nil, false
		}
	}
	c := len(p[0].Data)
	s, shift = make([]float64, c), make([]float64, c)
	for i := 0; i < c; i++ {
		s[i] = p[0].Data[i] / math.Sqrt(p[3].Data[i]+op.Epsilon)
		shift[i] = p[1].Data[i] - p[2].Data[i]*s[i]
	}
	return s, shift, true
}

// foldIntoConv scales a (transposed) convolution's weights per output
// channel and rewrites its bias.
func foldIntoConv(n *Node, s, shift []float64, transposed bool) (bool, error) {
	w := constArray(n.Input(1))
	if w == nil || len(w.Shape) < 3 {
		return false, nil
	}
	var b *Array
	if bv := n.Input(2); bv != nil {
		if b = constArray(bv); b == nil {
			return false, nil
		}
	}
	per := w.Shape[2:].NumElements()
	nw := w.Clone()
	if transposed {
		group := n.Op.(*ConvTranspose).group()
		cg, mg := w.Shape[0]/group, w.Shape[1]
		if mg*group != len(s) {
			return false, nil
		}
		for c := 0; c < w.Shape[0]; c++ {
			for mj := 0; mj < mg; mj++ {
				f := s[(c/cg)*mg+mj]
				row := nw.Data[(c*mg+mj)*per : (c*mg+mj+1)*per]
				for i := range row {
					row[i] *= f
				}
			}
		}
	} else {
		if w.Shape[0] != len(s) {
			return false, nil
		}
		per = w.Shape[1:].NumElements()
		for m := range s {
			row := nw.Data[m*per : (m+1)*per]
			for i := range row {
				row[i] *= s[m]
			}
		}
	}
	nb := NewArray(w.DType, tensor.Shape{len(s)})
	for m := range s {
		v := 0.0
		if b != nil {
			v = b.Data[m]
		}
		nb.Data[m] = v*s[m] + shift[m]
	}
	wv, err := constValue(n.Input(1).Name+"/bnfolded", nw)
	if err != nil {
		return false, err
	}
	bv, err := constValue(n.Name+"/bnfolded_bias", nb)
	if err != nil {
		return false, err
	}
	n.Inputs = []*Value{n.Inputs[0], wv, bv}
	switch op := n.Op.(type) {
	case *Conv:
		c := *op
		n.Op = &c
	case *ConvTranspose:
		c := *op
		n.Op = &c
	}
	return true, nil
}

// foldIntoGemm scales B's output columns and rewrites C as
// beta*C*s + shift with beta 1.
func foldIntoGemm(n *Node, op *Gemm, s, shift []float64) (bool, error) {
	b := constArray(n.Input(1))
	if b == nil || len(b.Shape) != 2 {
		return false, nil
	}
	cols := b.Shape[1]
	if op.TransB {
		cols = b.Shape[0]
	}
	if cols != len(s) {
		return false, nil
	}
	nb := b.Clone()
	for i := range nb.Data {
		j := i % b.Shape[1]
		if op.TransB {
			j = i / b.Shape[1]
		}
		nb.Data[i] *= s[j]
	}
	cShape := tensor.Shape{len(s)}
	var c *Array
	if cv := n.Input(2); cv != nil {
		if c = constArray(cv); c == nil {
			return false, nil
		}
		var err error
		if cShape, err = BroadcastShape(c.Shape, cShape); err != nil {
			return false, nil
		}
	}
	nc := NewArray(b.DType, cShape)
	var ci []int
	if c != nil {
		ci = BroadcastIndex(c.Shape, cShape)
	}
	for k := range nc.Data {
		j := k % len(s)
		v := 0.0
		if c != nil {
			v = op.Beta * c.Data[ci[k]]
		}
		nc.Data[k] = v*s[j] + shift[j]
	}
	bv, err := constValue(n.Input(1).Name+"/bnfolded", nb)
	if err != nil {
		return false, err
	}
	cv, err := constValue(n.Name+"/bnfolded_bias", nc)
	if err != nil {
		return false, err
	}
	n.Inputs = []*Value{n.Inputs[0], bv, cv}
	ng := *op
	ng.Beta = 1
	n.Op = &ng
	return true, nil
}
