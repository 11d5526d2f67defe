package ir

import (
	"fmt"

	"goinfer/internal/tensor"
)

// Helpers the rewriting passes share. Passes work on a bound graph (types
// known, see Bind) and change it in place; ops are shared with the graph
// Bind copied from, so a pass replaces an op it changes, never mutates it.

// constValue makes a constant value of a.
func constValue(name string, a *Array) (*Value, error) {
	t, err := a.Tensor()
	if err != nil {
		return nil, fmt.Errorf("constant %q: %w", name, err)
	}
	return &Value{Name: name, Type: Type{DType: a.DType, Shape: a.Shape.Clone()}, Const: t}, nil
}

// constArray returns v's constant data, nil when v is not a constant.
func constArray(v *Value) *Array {
	if v == nil || v.Const == nil {
		return nil
	}
	a, err := ArrayFromTensor(v.Const)
	if err != nil {
		return nil
	}
	return a
}

// graphOutputs is the set of g's outputs.
func graphOutputs(g *Graph) map[*Value]bool {
	m := make(map[*Value]bool, len(g.Outputs))
	for _, v := range g.Outputs {
		m[v] = true
	}
	return m
}

// soleUse reports whether v is read by exactly one node and is not a graph
// output, so that its producer may be merged into that node.
func soleUse(v *Value, cons map[*Value][]*Node, outs map[*Value]bool) bool {
	return v != nil && !outs[v] && len(cons[v]) == 1
}

// dropNodes removes the marked nodes, keeping the order of the rest.
func dropNodes(g *Graph, drop map[*Node]bool) {
	if len(drop) == 0 {
		return
	}
	keep := g.Nodes[:0]
	for _, n := range g.Nodes {
		if !drop[n] {
			keep = append(keep, n)
		}
	}
	for i := len(keep); i < len(g.Nodes); i++ {
		g.Nodes[i] = nil
	}
	g.Nodes = keep
}

// replaceUses makes every reader of old (nodes and graph outputs) read nw.
func replaceUses(g *Graph, old, nw *Value) {
	for _, n := range g.Nodes {
		for i, v := range n.Inputs {
			if v == old {
				n.Inputs[i] = nw
			}
		}
	}
	for i, v := range g.Outputs {
		if v == old {
			g.Outputs[i] = nw
		}
	}
}

// scalarConst is a rank-0 constant of dtype dt.
func scalarConst(name string, dt tensor.DType, v float64) *Value {
	c, err := constValue(name, Scalar(dt, v))
	if err != nil {
		// Every float dtype converts; callers pass x's float dtype.
		panic(err)
	}
	return c
}

// builder appends nodes that compute a replacement for one node, naming
// values after it.
type builder struct {
	base  string
	nodes []*Node
	n     int
}

// add appends a node of op over in and returns its output, typed by the
// op's inference.
func (b *builder) add(op Op, in ...*Value) (*Value, error) {
	b.n++
	n := &Node{Name: fmt.Sprintf("%s/%s%d", b.base, op.Kind(), b.n), Op: op, Inputs: in}
	out := &Value{Name: n.Name + ":0", Producer: n}
	n.Outputs = []*Value{out}
	if err := inferNode(n); err != nil {
		return nil, err
	}
	b.nodes = append(b.nodes, n)
	return out, nil
}
