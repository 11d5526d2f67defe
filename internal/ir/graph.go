// Package ir is goinfer's general model graph: tensors of any rank and
// dtype, nodes holding one typed op each, named graph inputs and outputs,
// and weights as initializers. Frontends (ONNX, the torchvision builders)
// produce it, engine-neutral passes rewrite it, and engines compile it.
//
// Op semantics follow ONNX's latest opset (frontends normalise older opsets
// on import), so an importer is mostly a table of attribute readers, and
// ONNX's own conformance suite tests the reference evaluator op by op.
//
// Shapes are concrete except for dimensions marked Dynamic on graph inputs
// (the batch, typically). Ops never see a Dynamic dimension: Bind
// substitutes a size and infers every shape, folding the constant
// subgraphs that exports build from Shape; Signature binds twice to tell
// which output dimensions follow the batch.
package ir

import (
	"fmt"
	"strings"

	"goinfer/internal/preprocess"
	"goinfer/internal/tensor"
)

// Dynamic marks a dimension of a graph input whose size is chosen per run
// (the batch).
const Dynamic = -1

// Type is a value's dtype and shape.
type Type struct {
	DType tensor.DType
	Shape tensor.Shape
}

func (t Type) String() string {
	parts := make([]string, len(t.Shape))
	for i, d := range t.Shape {
		if d == Dynamic {
			parts[i] = "N"
		} else {
			parts[i] = fmt.Sprint(d)
		}
	}
	return t.DType.String() + "[" + strings.Join(parts, ",") + "]"
}

// Value is a tensor flowing through the graph: a graph input, an
// initializer (Const set) or a node's output.
type Value struct {
	Name string
	Type Type
	// Const holds the value when it is known before any input arrives: an
	// initializer, a Constant node's output, or a folded subgraph.
	Const *tensor.Tensor
	// Producer is the node computing this value; nil for graph inputs and
	// initializers.
	Producer *Node
}

// IsConst reports whether v's data is known at load time.
func (v *Value) IsConst() bool { return v != nil && v.Const != nil }

// Node applies one op to its inputs. An input may be nil where the op's
// optional input is omitted (ONNX's empty name).
type Node struct {
	Name    string
	Op      Op
	Inputs  []*Value
	Outputs []*Value
}

// Input returns input i, or nil when it is absent.
func (n *Node) Input(i int) *Value {
	if i < len(n.Inputs) {
		return n.Inputs[i]
	}
	return nil
}

func (n *Node) String() string {
	if n.Name != "" {
		return fmt.Sprintf("node %q (%s)", n.Name, n.Op.Kind())
	}
	return fmt.Sprintf("a %s node", n.Op.Kind())
}

// Op is the typed operation of a node: its attributes, its shape and dtype
// inference and its float64 reference semantics.
type Op interface {
	// Kind is the op's name, as in ONNX ("Conv", "Relu", ...).
	Kind() string
	// Infer returns the output types. Inputs have concrete shapes (no
	// Dynamic); an absent optional input is nil. An op whose output shape
	// depends on an input's data (Reshape's shape, Slice's starts) reads it
	// from that input's Const and fails when it is not known.
	Infer(in []*Value) ([]Type, error)
	// Eval computes the outputs in float64 (the oracle engines are tested
	// against). Absent optional inputs are nil.
	Eval(in []*Array) ([]*Array, error)
}

// Graph is a model: named inputs and outputs over a topologically ordered
// list of nodes.
type Graph struct {
	Name    string
	Inputs  []*Value
	Outputs []*Value
	// Nodes are in topological order: every input of a node is a graph
	// input, a constant or the output of an earlier node.
	Nodes []*Node
	// Opset is the ONNX default-domain opset the graph came from (0 when
	// built by hand), for reports.
	Opset int
	// Meta holds free-form facts a frontend knows (producer, arch, ...).
	Meta map[string]string
	// Preprocess is how images become the input, when the model says
	// (torchvision weights do); nil means the caller's default, ImageNet's.
	Preprocess *preprocess.Spec
}

// Values returns every value the graph references, each once, in a stable
// order: inputs, then node inputs and outputs as they appear.
func (g *Graph) Values() []*Value {
	seen := map[*Value]bool{}
	var out []*Value
	add := func(v *Value) {
		if v != nil && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	for _, v := range g.Inputs {
		add(v)
	}
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			add(v)
		}
		for _, v := range n.Outputs {
			add(v)
		}
	}
	for _, v := range g.Outputs {
		add(v)
	}
	return out
}

// Consumers maps each value to the nodes reading it.
func (g *Graph) Consumers() map[*Value][]*Node {
	m := map[*Value][]*Node{}
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			if v != nil {
				m[v] = append(m[v], n)
			}
		}
	}
	return m
}

// OpCounts returns how many nodes of each kind the graph has.
func (g *Graph) OpCounts() map[string]int {
	m := map[string]int{}
	for _, n := range g.Nodes {
		m[n.Op.Kind()]++
	}
	return m
}

// ParamCount is the number of elements held by float initializers
// (constants that are not graph inputs), the model's parameters.
func (g *Graph) ParamCount() int64 {
	var n int64
	for _, v := range g.Values() {
		if v.Const != nil && v.Producer == nil {
			switch v.Const.DType {
			case tensor.Float32, tensor.Float16, tensor.BFloat16, tensor.Float64:
				n += int64(v.Const.NumElements())
			}
		}
	}
	return n
}

// Validate checks the graph's structure: every node input is defined
// before it is used (which also rules out cycles), every output is
// produced once, and the graph's outputs exist. The error names the node
// and the value.
func (g *Graph) Validate() error {
	defined := map[*Value]bool{}
	for _, v := range g.Inputs {
		if v == nil {
			return fmt.Errorf("graph %q has a nil input", g.Name)
		}
		if v.Const != nil {
			return fmt.Errorf("graph input %q is also a constant", v.Name)
		}
		defined[v] = true
	}
	for i, n := range g.Nodes {
		if n.Op == nil {
			return fmt.Errorf("node %d %q has no op", i, n.Name)
		}
		for j, v := range n.Inputs {
			if v == nil || v.Const != nil && v.Producer == nil {
				continue
			}
			if !defined[v] {
				if v.Producer != nil {
					return fmt.Errorf("%s: input %d %q is produced by %s, which does not come earlier (the graph has a cycle or is out of order)", n, j, v.Name, v.Producer)
				}
				return fmt.Errorf("%s: input %d %q is not a graph input, an initializer or an earlier node's output", n, j, v.Name)
			}
		}
		for _, v := range n.Outputs {
			if v == nil {
				continue
			}
			if defined[v] {
				return fmt.Errorf("%s: output %q is already defined", n, v.Name)
			}
			if v.Producer != n {
				return fmt.Errorf("%s: output %q names another producer", n, v.Name)
			}
			defined[v] = true
		}
	}
	for _, v := range g.Outputs {
		if v == nil || !defined[v] && v.Const == nil {
			name := "<nil>"
			if v != nil {
				name = v.Name
			}
			return fmt.Errorf("graph output %q is never produced", name)
		}
	}
	return nil
}
