package ir

import (
	"context"
	"fmt"

	"goinfer/internal/tensor"
)

// Evaluate runs g in float64 with the reference semantics of each op and
// returns the graph's outputs in order. inputs are keyed by input name;
// their shapes may fill the graph's Dynamic dimensions. Outputs are rounded
// to their declared dtype's precision only where an op does so (Cast).
func Evaluate(ctx context.Context, g *Graph, inputs map[string]*Array) ([]*Array, error) {
	vals := make(map[*Value]*Array, len(g.Nodes)*2)
	for _, v := range g.Inputs {
		a, ok := inputs[v.Name]
		if !ok {
			return nil, fmt.Errorf("input %q not given", v.Name)
		}
		if err := checkInputShape(v, a.Shape); err != nil {
			return nil, err
		}
		vals[v] = a
	}
	get := func(v *Value) (*Array, error) {
		if v == nil {
			return nil, nil
		}
		if a, ok := vals[v]; ok {
			return a, nil
		}
		if v.Const != nil {
			a, err := ArrayFromTensor(v.Const)
			if err != nil {
				return nil, fmt.Errorf("constant %q: %w", v.Name, err)
			}
			vals[v] = a
			return a, nil
		}
		return nil, fmt.Errorf("value %q has no data (not an input, constant or earlier output)", v.Name)
	}
	for _, n := range g.Nodes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		in := make([]*Array, len(n.Inputs))
		for i, v := range n.Inputs {
			a, err := get(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", n, err)
			}
			in[i] = a
		}
		out, err := n.Op.Eval(in)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		if len(out) < len(n.Outputs) {
			return nil, fmt.Errorf("%s: evaluation gave %d outputs, the node has %d", n, len(out), len(n.Outputs))
		}
		for i, v := range n.Outputs {
			if v != nil {
				vals[v] = out[i]
			}
		}
	}
	res := make([]*Array, len(g.Outputs))
	for i, v := range g.Outputs {
		a, err := get(v)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", v.Name, err)
		}
		res[i] = a
	}
	return res, nil
}

// checkInputShape accepts shape for input v when it matches v's static
// dimensions.
func checkInputShape(v *Value, shape tensor.Shape) error {
	want := v.Type.Shape
	if len(want) != len(shape) {
		return fmt.Errorf("input %q: got shape %v, want rank %d (%s)", v.Name, shape, len(want), v.Type)
	}
	for i, d := range want {
		if d != Dynamic && d != shape[i] {
			return fmt.Errorf("input %q: got shape %v, want %s", v.Name, shape, v.Type)
		}
	}
	return nil
}
