package onnx

import (
	"fmt"

	"goinfer/internal/ir"
	"goinfer/internal/onnxpb"
	"goinfer/internal/tensor"
)

// Before opset 7, elementwise binary ops broadcast their second operand B
// only when asked (broadcast=1), aligning B's dimensions with A's from
// axis on rather than from the right as NumPy does, and PRelu applied a
// one-dimensional slope along the channel axis. legacyBroadcast rewrites
// such a node into the IR's NumPy form by giving B trailing size-1
// dimensions: a constant B is reshaped, another gets an Unsqueeze node.

// legacyBinary are the op types whose opset-6 forms take broadcast/axis.
var legacyBinary = map[string]bool{
	"Add": true, "Sub": true, "Mul": true, "Div": true, "Pow": true,
	"And": true, "Or": true, "Xor": true, "Equal": true, "Greater": true, "Less": true,
}

func (b *builder) legacyBroadcast(g *ir.Graph, i int, n *onnxpb.NodeProto, node *ir.Node) error {
	if len(node.Inputs) != 2 || node.Inputs[0] == nil || node.Inputs[1] == nil {
		return nil
	}
	axis := -1 // NumPy's alignment from the right
	switch {
	case legacyBinary[n.GetOpType()]:
		attrs, err := b.decodeAttrs(n)
		if err != nil {
			return fmt.Errorf("onnx: %s: %w", nodeDesc(i, n), err)
		}
		bc, err := attrs.Int("broadcast", 0)
		if err != nil {
			return fmt.Errorf("onnx: %s: %w", nodeDesc(i, n), err)
		}
		if bc == 0 || !attrs.Has("axis") {
			return nil
		}
		ax, err := attrs.Int("axis", 0)
		if err != nil {
			return fmt.Errorf("onnx: %s: %w", nodeDesc(i, n), err)
		}
		axis = int(ax)
	case n.GetOpType() == "PRelu":
		axis = 1 // the channel axis, for a 1-D slope of more than one element
	default:
		return nil
	}
	ra, sb, err := b.ranks(g, node.Inputs[0], node.Inputs[1])
	if err != nil {
		return fmt.Errorf("onnx: %s: legacy broadcast: %w", nodeDesc(i, n), err)
	}
	if n.GetOpType() == "PRelu" && (len(sb) != 1 || sb.NumElements() == 1 || ra < 3) {
		return nil
	}
	if axis < 0 {
		axis += ra
	}
	k := ra - axis - len(sb)
	if axis < 0 || k < 0 {
		return fmt.Errorf("onnx: %s: operand B %v does not fit A's %d dimensions at axis %d", nodeDesc(i, n), sb, ra, axis)
	}
	if k == 0 {
		return nil
	}
	in := node.Inputs[1]
	if in.Const != nil {
		shape := append(in.Const.Shape.Clone(), make(tensor.Shape, k)...)
		for j := len(in.Const.Shape); j < len(shape); j++ {
			shape[j] = 1
		}
		t, err := tensor.FromBytes(in.Const.DType, shape, in.Const.Data)
		if err != nil {
			return fmt.Errorf("onnx: %s: %w", nodeDesc(i, n), err)
		}
		node.Inputs[1] = constValue(in.Name+"/broadcast", t)
		return nil
	}
	axes := make([]int64, k)
	for j := range axes {
		axes[j] = int64(len(sb) + j)
	}
	u := &ir.Node{Name: node.Name + "/broadcast", Op: &ir.Unsqueeze{}}
	u.Inputs = []*ir.Value{in, constValue(u.Name+".axes", tensorOfInt64s(tensor.Shape{k}, axes))}
	out := &ir.Value{Name: u.Name + ":0", Producer: u}
	u.Outputs = []*ir.Value{out}
	g.Nodes = append(g.Nodes, u)
	node.Inputs[1] = out
	return nil
}

// ranks returns the rank of a and the shape of c (the leading dimension at
// batch 1 where it follows the batch), binding the graph built so far when
// they are not constants.
func (b *builder) ranks(g *ir.Graph, a, c *ir.Value) (int, tensor.Shape, error) {
	known := func(v *ir.Value) bool { return v.Const != nil || v.Producer == nil }
	if known(a) && known(c) {
		return len(a.Type.Shape), c.Type.Shape, nil
	}
	part := &ir.Graph{Name: g.Name, Inputs: g.Inputs, Nodes: g.Nodes, Outputs: []*ir.Value{a, c}}
	bound, err := ir.Bind(part, 1)
	if err != nil {
		return 0, nil, err
	}
	return len(bound.Outputs[0].Type.Shape), bound.Outputs[1].Type.Shape, nil
}
