package ir

import (
	"context"
	"fmt"

	"goinfer/internal/tensor"
)

// TypeEvaluator is implemented by ops whose outputs depend only on their
// inputs' types (Shape, Size), so that Bind can fold them once shapes are
// known even though the input's data is not.
type TypeEvaluator interface {
	EvalTypes(in []Type) ([]*Array, error)
}

// maxFoldElements bounds the size of a value that constant folding
// materialises; larger constant subgraphs stay as nodes.
const maxFoldElements = 1 << 26

// Bind returns a copy of g with every Dynamic input dimension set to batch,
// every value's type inferred and every subgraph whose inputs are all known
// folded into constants (the Shape -> Gather -> Concat -> Reshape chains of
// exports included). Errors name the node, its op and the input types.
// Constants are shared with g, not copied.
func Bind(g *Graph, batch int) (*Graph, error) {
	if batch < 1 {
		return nil, fmt.Errorf("ir: batch size %d must be at least 1", batch)
	}
	if err := g.Validate(); err != nil {
		return nil, err
	}
	m := map[*Value]*Value{}
	clone := func(v *Value) *Value {
		if v == nil {
			return nil
		}
		if c, ok := m[v]; ok {
			return c
		}
		c := &Value{Name: v.Name, Type: Type{DType: v.Type.DType, Shape: v.Type.Shape.Clone()}, Const: v.Const}
		m[v] = c
		return c
	}
	out := &Graph{Name: g.Name, Opset: g.Opset, Meta: g.Meta, Preprocess: g.Preprocess}
	for _, v := range g.Inputs {
		c := clone(v)
		for i, d := range c.Type.Shape {
			if d == Dynamic {
				c.Type.Shape[i] = batch
			}
		}
		out.Inputs = append(out.Inputs, c)
	}
	for _, n := range g.Nodes {
		cn := &Node{Name: n.Name, Op: n.Op, Inputs: make([]*Value, len(n.Inputs)), Outputs: make([]*Value, len(n.Outputs))}
		for i, v := range n.Inputs {
			cn.Inputs[i] = clone(v)
		}
		for i, v := range n.Outputs {
			if v != nil {
				c := clone(v)
				c.Producer = cn
				cn.Outputs[i] = c
			}
		}
		if err := inferNode(cn); err != nil {
			return nil, err
		}
		if err := fold(cn); err != nil {
			return nil, err
		}
		if !allConst(cn.Outputs) {
			out.Nodes = append(out.Nodes, cn)
		}
	}
	for _, v := range g.Outputs {
		out.Outputs = append(out.Outputs, clone(v))
	}
	RemoveDead(out)
	return out, nil
}

// inferNode sets the types of n's outputs, checking any declared dtype.
func inferNode(n *Node) error {
	types, err := n.Op.Infer(n.Inputs)
	if err != nil {
		return fmt.Errorf("%s with inputs %s: %w", n, typesOf(n.Inputs), err)
	}
	if len(types) < len(n.Outputs) {
		return fmt.Errorf("%s: inference gave %d outputs, the node has %d", n, len(types), len(n.Outputs))
	}
	for i, v := range n.Outputs {
		if v == nil {
			continue
		}
		t := types[i]
		if err := t.Shape.Validate(); err != nil {
			return fmt.Errorf("%s with inputs %s: output %q: %w", n, typesOf(n.Inputs), v.Name, err)
		}
		if v.Type.DType != tensor.Invalid && v.Type.DType != t.DType {
			return fmt.Errorf("%s: output %q is declared %s but computes %s", n, v.Name, v.Type.DType, t.DType)
		}
		v.Type = Type{DType: t.DType, Shape: t.Shape.Clone()}
	}
	return nil
}

// fold evaluates n at load time when all its inputs are known, or when its
// op needs only their types.
func fold(n *Node) error {
	var res []*Array
	var err error
	if te, ok := n.Op.(TypeEvaluator); ok {
		types := make([]Type, len(n.Inputs))
		for i, v := range n.Inputs {
			if v != nil {
				types[i] = v.Type
			}
		}
		res, err = te.EvalTypes(types)
	} else {
		if !allConst(n.Inputs) || len(n.Inputs) == 0 && !isSource(n.Op) {
			return nil
		}
		for _, v := range n.Outputs {
			if v != nil && v.Type.Shape.NumElements() > maxFoldElements {
				return nil
			}
		}
		in := make([]*Array, len(n.Inputs))
		for i, v := range n.Inputs {
			if v == nil {
				continue
			}
			if in[i], err = ArrayFromTensor(v.Const); err != nil {
				return fmt.Errorf("%s: constant %q: %w", n, v.Name, err)
			}
		}
		res, err = n.Op.Eval(in)
	}
	if err != nil {
		return fmt.Errorf("%s: folding: %w", n, err)
	}
	for i, v := range n.Outputs {
		if v == nil {
			continue
		}
		a := res[i]
		a.DType = v.Type.DType
		t, err := a.Tensor()
		if err != nil {
			return fmt.Errorf("%s: folding output %q: %w", n, v.Name, err)
		}
		v.Const = t
		v.Producer = nil
	}
	return nil
}

// Source is implemented by ops without inputs whose outputs are constants
// (Constant, and ConstantOfShape-like ops with attribute-only inputs).
type Source interface{ IsSource() }

func isSource(op Op) bool {
	_, ok := op.(Source)
	return ok
}

func allConst(vs []*Value) bool {
	for _, v := range vs {
		if v != nil && v.Const == nil {
			return false
		}
	}
	return true
}

func typesOf(vs []*Value) string {
	s := "("
	for i, v := range vs {
		if i > 0 {
			s += ", "
		}
		if v == nil {
			s += "absent"
		} else {
			s += v.Type.String()
		}
	}
	return s + ")"
}

// RemoveDead drops nodes none of whose outputs reach a graph output.
func RemoveDead(g *Graph) {
	live := map[*Value]bool{}
	for _, v := range g.Outputs {
		live[v] = true
	}
	keep := make([]*Node, 0, len(g.Nodes))
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		n := g.Nodes[i]
		used := false
		for _, v := range n.Outputs {
			if v != nil && live[v] {
				used = true
			}
		}
		if !used {
			continue
		}
		for _, v := range n.Inputs {
			if v != nil {
				live[v] = true
			}
		}
		keep = append(keep, n)
	}
	for i, j := 0, len(keep)-1; i < j; i, j = i+1, j-1 {
		keep[i], keep[j] = keep[j], keep[i]
	}
	g.Nodes = keep
}

// Signature describes a graph's inputs and outputs with Dynamic where a
// dimension follows the batch: g is bound at two batch sizes and the
// dimensions that differ are the dynamic ones.
func Signature(g *Graph) (inputs, outputs []NamedType, err error) {
	b1, err := Bind(g, 1)
	if err != nil {
		return nil, nil, err
	}
	b2, err := Bind(g, 2)
	if err != nil {
		return nil, nil, err
	}
	sig := func(a, b []*Value) []NamedType {
		out := make([]NamedType, len(a))
		for i := range a {
			t := Type{DType: a[i].Type.DType, Shape: a[i].Type.Shape.Clone()}
			for d := range t.Shape {
				if d < len(b[i].Type.Shape) && b[i].Type.Shape[d] != t.Shape[d] {
					t.Shape[d] = Dynamic
				}
			}
			out[i] = NamedType{Name: a[i].Name, Type: t}
		}
		return out
	}
	return sig(b1.Inputs, b2.Inputs), sig(b1.Outputs, b2.Outputs), nil
}

// NamedType is a graph input's or output's name and type.
type NamedType struct {
	Name string
	Type Type
}

// EvaluateBound binds g to the batch of its first input's dimension 0 and
// evaluates it; a convenience for tests and tools.
func EvaluateBound(ctx context.Context, g *Graph, inputs map[string]*Array) ([]*Array, error) {
	batch := 1
	if len(g.Inputs) > 0 {
		if a := inputs[g.Inputs[0].Name]; a != nil && len(a.Shape) > 0 {
			batch = a.Shape[0]
		}
	}
	b, err := Bind(g, max(batch, 1))
	if err != nil {
		return nil, err
	}
	return Evaluate(ctx, b, inputs)
}
