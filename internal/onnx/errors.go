package onnx

import (
	"errors"
	"fmt"
	"strings"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// ErrUnsupportedModel is matched (errors.Is) by load errors about valid
// ONNX that goinfer does not handle: non-tensor values (sequences, maps,
// optionals), sparse tensors, subgraph attributes, opsets outside
// MinOpset..MaxOpset, operator domains other than ONNX's default one.
// Errors not matching it (nor UnsupportedOpsError, nor
// ErrUnsupportedDType) mean the file is broken.
var ErrUnsupportedModel = errors.New("unsupported ONNX model")

// unsupported wraps ErrUnsupportedModel with a message.
func unsupported(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrUnsupportedModel)
}

// UnsupportedOp is one op type a model uses that goinfer lacks, with the
// first node using it.
type UnsupportedOp struct {
	Domain string
	OpType string
	// Node is the first node's name, Index its position in the graph.
	Node  string
	Index int
	// Count is how many nodes use the op type.
	Count int
}

// UnsupportedOpsError lists every op type of a model that goinfer cannot
// import, each with its first node, so that one load shows all that is
// missing.
type UnsupportedOpsError struct {
	Ops []UnsupportedOp
}

func (e *UnsupportedOpsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "onnx: the model uses %d op type(s) goinfer does not support:", len(e.Ops))
	for i, op := range e.Ops {
		if i > 0 {
			b.WriteString(";")
		}
		t := op.OpType
		if op.Domain != "" {
			t = op.Domain + "." + t
		}
		fmt.Fprintf(&b, " %s (first at node %d %q, %d node(s))", t, op.Index, op.Node, op.Count)
	}
	return b.String()
}

// Is makes an UnsupportedOpsError match ErrUnsupportedModel.
func (e *UnsupportedOpsError) Is(target error) bool { return target == ErrUnsupportedModel }

// SymbolicShapeError reports a graph input with symbolic dimensions beyond
// the leading (batch) one, which the IR cannot hold: load again with
// WithInputShapes giving them sizes. Shape has ir.Dynamic at every
// symbolic dimension (the leading one included) and Params their names.
type SymbolicShapeError struct {
	Input  string
	Shape  tensor.Shape
	Params []string
}

func (e *SymbolicShapeError) Error() string {
	for i, d := range e.Shape {
		if i > 0 && d == ir.Dynamic {
			return fmt.Sprintf("graph input %q: dimension %d is symbolic (%q); only the leading (batch) dimension may be, give the others with WithInputShapes", e.Input, i, e.Params[i])
		}
	}
	return fmt.Sprintf("graph input %q has symbolic dimensions %v", e.Input, e.Params)
}
