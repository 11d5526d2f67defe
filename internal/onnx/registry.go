package onnx

import (
	"fmt"
	"sort"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// Attrs are a node's attributes, decoded from protobuf into plain Go
// values so that op importers do not depend on the wire types.
type Attrs map[string]Attr

// Attr is one attribute: exactly the field of its Type is meaningful.
type Attr struct {
	Type    AttrType
	Int     int64
	Float   float32
	String  string
	Ints    []int64
	Floats  []float32
	Strings []string
	Tensor  *tensor.Tensor
}

// AttrType is ONNX's AttributeProto.AttributeType for the kinds goinfer
// reads.
type AttrType int

// The attribute types (ONNX's numbering).
const (
	AttrFloat   AttrType = 1
	AttrInt     AttrType = 2
	AttrString  AttrType = 3
	AttrTensor  AttrType = 4
	AttrFloats  AttrType = 6
	AttrInts    AttrType = 7
	AttrStrings AttrType = 8
)

// Int returns attribute name as an int, def when absent.
func (a Attrs) Int(name string, def int64) (int64, error) {
	v, ok := a[name]
	if !ok {
		return def, nil
	}
	if v.Type != AttrInt {
		return 0, fmt.Errorf("attribute %q: want an int, got type %d", name, v.Type)
	}
	return v.Int, nil
}

// Float returns attribute name as a float, def when absent.
func (a Attrs) Float(name string, def float32) (float32, error) {
	v, ok := a[name]
	if !ok {
		return def, nil
	}
	if v.Type != AttrFloat {
		return 0, fmt.Errorf("attribute %q: want a float, got type %d", name, v.Type)
	}
	return v.Float, nil
}

// String returns attribute name as a string, def when absent.
func (a Attrs) String(name, def string) (string, error) {
	v, ok := a[name]
	if !ok {
		return def, nil
	}
	if v.Type != AttrString {
		return "", fmt.Errorf("attribute %q: want a string, got type %d", name, v.Type)
	}
	return v.String, nil
}

// Ints returns attribute name as ints, def when absent.
func (a Attrs) Ints(name string, def []int64) ([]int64, error) {
	v, ok := a[name]
	if !ok {
		return def, nil
	}
	if v.Type != AttrInts {
		return nil, fmt.Errorf("attribute %q: want ints, got type %d", name, v.Type)
	}
	return v.Ints, nil
}

// Floats returns attribute name as floats, def when absent.
func (a Attrs) Floats(name string, def []float32) ([]float32, error) {
	v, ok := a[name]
	if !ok {
		return def, nil
	}
	if v.Type != AttrFloats {
		return nil, fmt.Errorf("attribute %q: want floats, got type %d", name, v.Type)
	}
	return v.Floats, nil
}

// Has reports whether the attribute is present.
func (a Attrs) Has(name string) bool {
	_, ok := a[name]
	return ok
}

// Importer builds the IR op of one ONNX node from its attributes and the
// opset of its domain. Inputs the op takes as tensors (Reshape's shape,
// Clip's min and max) stay inputs; an importer whose older opset held them
// as attributes returns them in extra, to be added as constant inputs at
// the positions given.
type Importer func(a Attrs, opset int) (op ir.Op, extra []ExtraInput, err error)

// ExtraInput is a constant input an importer adds to its node (an older
// opset's attribute that later opsets take as an input).
type ExtraInput struct {
	Index int
	Value *tensor.Tensor
}

// importers maps an op type of the default ONNX domain to its importer.
var importers = map[string]Importer{}

// register adds an importer; op files call it from init.
func register(opType string, f Importer) {
	if _, dup := importers[opType]; dup {
		panic("onnx: importer for " + opType + " registered twice")
	}
	importers[opType] = f
}

// SupportedOps lists the ONNX op types goinfer imports, sorted.
func SupportedOps() []string {
	out := make([]string, 0, len(importers))
	for k := range importers {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
