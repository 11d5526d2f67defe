package ir

import (
	"fmt"
	"slices"
)

// BatchIndependent returns nil when g computes every image of a batch from
// that image alone, so that a batch may run as separate chunks with the
// same result, and otherwise an error naming the first node that mixes
// images. It binds g at batch 1 and at batch 2: every value computed from
// the inputs' data must keep the batch as its leading dimension (that
// dimension, and only it, doubles), and no op may work along that
// dimension (a softmax, concatenation, split, gather, arg-reduction, top-k
// or layer norm over it). Reductions, transposes, slices and reshapes that
// move or consume the batch change how the shapes scale and are caught by
// the first rule.
func BatchIndependent(g *Graph) error {
	g1, err := Bind(g, 1)
	if err != nil {
		return err
	}
	g2, err := Bind(g, 2)
	if err != nil {
		return err
	}
	if len(g1.Nodes) != len(g2.Nodes) {
		return fmt.Errorf("ir: graph %q binds to %d nodes at batch 1 and %d at batch 2", g.Name, len(g1.Nodes), len(g2.Nodes))
	}
	// carries holds the values of g1 computed from its inputs' data.
	carries := map[*Value]bool{}
	for _, v := range g1.Inputs {
		carries[v] = true
	}
	for i, n := range g1.Nodes {
		fromData := false
		for _, v := range n.Inputs {
			fromData = fromData || carries[v]
		}
		// A tensor's shape or size is not its data.
		if !fromData || n.Op.Kind() == "Shape" || n.Op.Kind() == "Size" {
			continue
		}
		if err := batchAxisOp(n); err != nil {
			return err
		}
		m := g2.Nodes[i]
		for j, v := range n.Outputs {
			if v == nil || v.IsConst() {
				continue
			}
			carries[v] = true
			s1, s2 := v.Type.Shape, m.Outputs[j].Type.Shape
			if len(s1) == 0 || len(s1) != len(s2) || s2[0] != 2*s1[0] || !slices.Equal(s1[1:], s2[1:]) {
				return fmt.Errorf("ir: %s: output %q has shape %v at batch 1 and %v at batch 2, so its images are not its leading dimension", n, v.Name, s1, s2)
			}
		}
	}
	return nil
}

// batchAxisOp returns an error when n works along its data input's leading
// dimension, the batch.
func batchAxisOp(n *Node) error {
	in := n.Input(0)
	if in == nil {
		return nil
	}
	rank := len(in.Type.Shape)
	var axis int
	switch op := n.Op.(type) {
	case *Softmax:
		axis = op.Axis
	case *Concat:
		axis = op.Axis
	case *Split:
		axis = op.Axis
	case *Gather:
		axis = op.Axis
	case *GatherElements:
		axis = op.Axis
	case *ArgReduce:
		axis = op.Axis
	case *TopK:
		axis = op.Axis
	case *LayerNorm:
		axis = op.Axis
	default:
		return nil
	}
	a, err := axisOf(axis, rank, n.Op.Kind()+"'s axis")
	if err != nil {
		return fmt.Errorf("ir: %s: %w", n, err)
	}
	if a == 0 {
		return fmt.Errorf("ir: %s works along the batch dimension (axis %d)", n, axis)
	}
	return nil
}
