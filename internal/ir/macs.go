package ir

import (
	"fmt"

	"goinfer/internal/tensor"
)

// MACs counts the multiply-accumulates of a bound graph's convolutions
// and matrix products (Conv, ConvTranspose, Gemm, MatMul), the figure
// model summaries quote; elementwise ops, pools and norms are not counted.
// Shapes must be concrete: bind the graph first.
func MACs(g *Graph) (int64, error) {
	var total int64
	for _, v := range g.Inputs {
		for _, d := range v.Type.Shape {
			if d == Dynamic {
				return 0, fmt.Errorf("ir: MACs: input %q has a dynamic shape %s (bind the graph first)", v.Name, v.Type)
			}
		}
	}
	for _, n := range g.Nodes {
		for _, v := range n.Outputs {
			if v != nil && v.Type.DType == tensor.Invalid {
				return 0, fmt.Errorf("ir: MACs: %s's output %q has no inferred type (bind the graph first)", n, v.Name)
			}
		}
		m, err := nodeMACs(n)
		if err != nil {
			return 0, fmt.Errorf("ir: MACs of %s: %w", n, err)
		}
		total += m
	}
	return total, nil
}

func nodeMACs(n *Node) (int64, error) {
	shape := func(i int) (tensor.Shape, error) {
		v := n.Input(i)
		if v == nil {
			return nil, fmt.Errorf("input %d is absent", i)
		}
		for _, d := range v.Type.Shape {
			if d == Dynamic {
				return nil, fmt.Errorf("input %q has a dynamic shape %s (bind the graph first)", v.Name, v.Type)
			}
		}
		return v.Type.Shape, nil
	}
	prod := func(s tensor.Shape) int64 {
		p := int64(1)
		for _, d := range s {
			p *= int64(d)
		}
		return p
	}
	switch op := n.Op.(type) {
	case *Conv:
		// Each output element takes C/group * kernel taps: the product of
		// W's dimensions after the first.
		w, err := shape(1)
		if err != nil || len(n.Outputs) == 0 || n.Outputs[0] == nil || len(w) < 1 {
			return 0, err
		}
		return prod(n.Outputs[0].Type.Shape) * prod(w[1:]), nil
	case *ConvTranspose:
		// Each input element is scattered to M/group * kernel taps.
		x, err := shape(0)
		if err != nil {
			return 0, err
		}
		w, err := shape(1)
		if err != nil || len(w) < 1 {
			return 0, err
		}
		return prod(x) * prod(w[1:]), nil
	case *Gemm:
		a, err := shape(0)
		if err != nil {
			return 0, err
		}
		b, err := shape(1)
		if err != nil {
			return 0, err
		}
		m, k, nn, err := op.dims(a, b)
		if err != nil {
			return 0, err
		}
		return int64(m) * int64(k) * int64(nn), nil
	case *MatMul:
		a, err := shape(0)
		if err != nil {
			return 0, err
		}
		b, err := shape(1)
		if err != nil {
			return 0, err
		}
		p, err := planMatMul(a, b)
		if err != nil {
			return 0, err
		}
		return prod(p.batch) * int64(p.m) * int64(p.k) * int64(p.n), nil
	}
	return 0, nil
}
