package onnx

import (
	"encoding/binary"
	"fmt"
	"math"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// The importers of the shape, data and reduction ops. Older opsets held
// some of today's inputs as attributes (Reshape's shape before 5, Slice's
// starts/ends/axes before 10, Pad's pads before 11, Squeeze's, Unsqueeze's
// and Split's before 13, TopK's k before 10); those become constant
// ExtraInputs so that the IR has one form per op.

// tensorAttrs reads attributes and keeps the first error, so that an
// importer reads them all and checks once.
type tensorAttrs struct {
	a   Attrs
	err error
}

func (t *tensorAttrs) keep(err error) {
	if t.err == nil && err != nil {
		t.err = err
	}
}

func (t *tensorAttrs) int(name string, def int64) int {
	v, err := t.a.Int(name, def)
	t.keep(err)
	return int(v)
}

func (t *tensorAttrs) bool(name string, def bool) bool {
	d := int64(0)
	if def {
		d = 1
	}
	return t.int(name, d) != 0
}

func (t *tensorAttrs) string(name, def string) string {
	v, err := t.a.String(name, def)
	t.keep(err)
	return v
}

// ints returns an ints attribute, nil when absent.
func (t *tensorAttrs) ints(name string) []int {
	v, err := t.a.Ints(name, nil)
	t.keep(err)
	if v == nil {
		return nil
	}
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

// required records an error when name is absent.
func (t *tensorAttrs) required(op, name string) {
	if !t.a.Has(name) {
		t.keep(fmt.Errorf("%s needs its %s attribute", op, name))
	}
}

// extraInts adds attribute name, when present, as a 1-D int64 constant
// input at index.
func (t *tensorAttrs) extraInts(extra []ExtraInput, index int, name string) []ExtraInput {
	if !t.a.Has(name) {
		return extra
	}
	v, err := t.a.Ints(name, nil)
	t.keep(err)
	return append(extra, ExtraInput{Index: index, Value: tensorOfInt64s(tensor.Shape{len(v)}, v)})
}

// tensorOfInt64s builds an int64 tensor of shape holding v.
func tensorOfInt64s(shape tensor.Shape, v []int64) *tensor.Tensor {
	t := tensor.New(tensor.Int64, shape...)
	for i, x := range v {
		binary.LittleEndian.PutUint64(t.Data[8*i:], uint64(x))
	}
	return t
}

// registerNoAttrs registers an op without attributes.
func registerNoAttrs(opType string, op func() ir.Op) {
	register(opType, func(Attrs, int) (ir.Op, []ExtraInput, error) { return op(), nil, nil })
}

func init() {
	registerNoAttrs("Size", func() ir.Op { return &ir.Size{} })
	registerNoAttrs("Expand", func() ir.Op { return &ir.Expand{} })
	registerNoAttrs("CastLike", func() ir.Op { return &ir.CastLike{} })
	registerNoAttrs("Range", func() ir.Op { return &ir.Range{} })
	registerNoAttrs("Where", func() ir.Op { return &ir.Where{} })
	// Dropout's ratio attribute (before 12) and is_test (before 7) change
	// nothing at inference.
	registerNoAttrs("Dropout", func() ir.Op { return &ir.Dropout{} })
	for _, k := range []ir.VariadicKind{ir.OpSum, ir.OpMax, ir.OpMin, ir.OpMean} {
		registerNoAttrs(string(k), func() ir.Op { return &ir.Variadic{Fn: k} })
	}
	register("Shape", importShape)
	register("Reshape", importReshape)
	register("Flatten", importFlatten)
	register("Transpose", importTranspose)
	register("Squeeze", importSqueeze)
	register("Unsqueeze", importUnsqueeze)
	register("Concat", importConcat)
	register("Split", importSplit)
	register("Slice", importSlice)
	register("Gather", importGather)
	register("GatherElements", importGatherElements)
	register("Tile", importTile)
	register("Pad", importPad)
	register("Cast", importCast)
	register("Constant", importConstant)
	register("ConstantOfShape", importConstantOfShape)
	register("ArgMax", importArg(true))
	register("ArgMin", importArg(false))
	register("TopK", importTopK)
	register("DepthToSpace", importDepthToSpace)
	register("SpaceToDepth", importSpaceToDepth)
	register("IsInf", importIsInf)
	for _, k := range []ir.ReduceKind{
		ir.ReduceMean, ir.ReduceSum, ir.ReduceMax, ir.ReduceMin, ir.ReduceProd, ir.ReduceL1,
		ir.ReduceL2, ir.ReduceSumSquare, ir.ReduceLogSum, ir.ReduceLogSumExp,
	} {
		register(string(k), importReduce(k))
	}
}

func importShape(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	op := &ir.Shape{Start: t.int("start", 0)}
	if a.Has("end") {
		end := t.int("end", 0)
		op.End = &end
	}
	return op, nil, t.err
}

func importReshape(a Attrs, opset int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	op := &ir.Reshape{AllowZero: t.bool("allowzero", false)}
	var extra []ExtraInput
	if opset < 5 {
		t.required("Reshape", "shape")
		extra = t.extraInts(extra, 1, "shape")
	}
	return op, extra, t.err
}

func importFlatten(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	return &ir.Flatten{Axis: t.int("axis", 1)}, nil, t.err
}

func importTranspose(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	return &ir.Transpose{Perm: t.ints("perm")}, nil, t.err
}

func importSqueeze(a Attrs, opset int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	var extra []ExtraInput
	if opset < 13 {
		extra = t.extraInts(extra, 1, "axes")
	}
	return &ir.Squeeze{}, extra, t.err
}

func importUnsqueeze(a Attrs, opset int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	var extra []ExtraInput
	if opset < 13 {
		t.required("Unsqueeze", "axes")
		extra = t.extraInts(extra, 1, "axes")
	}
	return &ir.Unsqueeze{}, extra, t.err
}

func importConcat(a Attrs, opset int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	if opset >= 4 {
		t.required("Concat", "axis")
	}
	// Concat-1 defaulted to axis 1.
	return &ir.Concat{Axis: t.int("axis", 1)}, nil, t.err
}

func importSplit(a Attrs, opset int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	op := &ir.Split{Axis: t.int("axis", 0)}
	var extra []ExtraInput
	if opset < 13 {
		extra = t.extraInts(extra, 1, "split")
	}
	if a.Has("num_outputs") {
		op.NumOutputs = t.int("num_outputs", 0)
		if op.NumOutputs < 1 {
			t.keep(fmt.Errorf("Split's num_outputs %d is not positive", op.NumOutputs))
		}
	}
	return op, extra, t.err
}

func importSlice(a Attrs, opset int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	var extra []ExtraInput
	if opset < 10 {
		t.required("Slice", "starts")
		t.required("Slice", "ends")
		extra = t.extraInts(extra, 1, "starts")
		extra = t.extraInts(extra, 2, "ends")
		extra = t.extraInts(extra, 3, "axes")
	}
	return &ir.Slice{}, extra, t.err
}

func importGather(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	return &ir.Gather{Axis: t.int("axis", 0)}, nil, t.err
}

func importGatherElements(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	return &ir.GatherElements{Axis: t.int("axis", 0)}, nil, t.err
}

func importTile(_ Attrs, opset int) (ir.Op, []ExtraInput, error) {
	if opset < 6 {
		return nil, nil, fmt.Errorf("Tile before opset 6 (tiles and axis inputs) is not supported; opset %d", opset)
	}
	return &ir.Tile{}, nil, nil
}

func importPad(a Attrs, opset int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	op := &ir.Pad{Mode: t.string("mode", "constant")}
	var extra []ExtraInput
	if opset < 11 {
		name := "pads"
		if opset < 2 {
			name = "paddings"
		}
		t.required("Pad", name)
		extra = t.extraInts(extra, 1, name)
		v, err := a.Float("value", 0)
		t.keep(err)
		// Pad converts constant_value to the data's dtype, so the float
		// attribute can stay float32 whatever the data is.
		if v != 0 {
			extra = append(extra, ExtraInput{Index: 2, Value: tensorOfFloat32(v)})
		}
	}
	return op, extra, t.err
}

func tensorOfFloat32(v float32) *tensor.Tensor {
	t := tensor.New(tensor.Float32)
	binary.LittleEndian.PutUint32(t.Data, math.Float32bits(v))
	return t
}

func importCast(a Attrs, opset int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	t.required("Cast", "to")
	if t.err != nil {
		return nil, nil, t.err
	}
	var to int32
	if a["to"].Type == AttrString {
		// Cast-1 named the type ("FLOAT").
		name := a["to"].String
		for i := int32(1); i < 32; i++ {
			if tensorProtoTypeName(i) == name {
				to = i
				break
			}
		}
		if to == 0 {
			return nil, nil, fmt.Errorf("Cast's to %q is not an ONNX data type", name)
		}
	} else {
		to = int32(t.int("to", 0))
		if t.err != nil {
			return nil, nil, t.err
		}
	}
	// saturate (opset 19) only concerns float8 targets, which goinfer lacks.
	dt, err := DType(to)
	if err != nil {
		return nil, nil, fmt.Errorf("Cast's to: %w", err)
	}
	return &ir.Cast{To: dt}, nil, nil
}

func importConstant(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
	var kinds []string
	for _, k := range []string{"value", "value_float", "value_floats", "value_int", "value_ints", "value_string", "value_strings", "sparse_value"} {
		if a.Has(k) {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) != 1 {
		return nil, nil, fmt.Errorf("Constant needs exactly one value attribute, has %v", kinds)
	}
	var v *tensor.Tensor
	switch k := kinds[0]; k {
	case "value":
		at := a[k]
		if at.Type != AttrTensor || at.Tensor == nil {
			return nil, nil, fmt.Errorf("Constant's value attribute: want a tensor, got type %d", at.Type)
		}
		v = at.Tensor
	case "value_float":
		f, err := a.Float(k, 0)
		if err != nil {
			return nil, nil, err
		}
		v = tensorOfFloat32(f)
	case "value_floats":
		fs, err := a.Floats(k, nil)
		if err != nil {
			return nil, nil, err
		}
		if v, err = tensor.FromFloat32(tensor.Shape{len(fs)}, append([]float32(nil), fs...)); err != nil {
			return nil, nil, err
		}
	case "value_int":
		i, err := a.Int(k, 0)
		if err != nil {
			return nil, nil, err
		}
		v = tensorOfInt64s(tensor.Shape{}, []int64{i})
	case "value_ints":
		is, err := a.Ints(k, nil)
		if err != nil {
			return nil, nil, err
		}
		v = tensorOfInt64s(tensor.Shape{len(is)}, is)
	default:
		return nil, nil, fmt.Errorf("Constant's %s attribute is not supported (goinfer has no string or sparse tensors)", k)
	}
	return &ir.Constant{Value: v}, nil, nil
}

func importConstantOfShape(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
	op := &ir.ConstantOfShape{DType: tensor.Float32}
	at, ok := a["value"]
	if !ok {
		return op, nil, nil
	}
	if at.Type != AttrTensor || at.Tensor == nil {
		return nil, nil, fmt.Errorf("ConstantOfShape's value attribute: want a tensor, got type %d", at.Type)
	}
	v, err := ir.ArrayFromTensor(at.Tensor)
	if err != nil {
		return nil, nil, fmt.Errorf("ConstantOfShape's value attribute: %w", err)
	}
	if len(v.Data) != 1 {
		return nil, nil, fmt.Errorf("ConstantOfShape's value attribute is %s%v, want one element", v.DType, v.Shape)
	}
	op.DType, op.Value = v.DType, v.Data[0]
	return op, nil, nil
}

// reduceAxesInputOpset is the opset from which a reduction takes its axes
// as an input rather than an attribute.
func reduceAxesInputOpset(k ir.ReduceKind) int {
	if k == ir.ReduceSum {
		return 13
	}
	return 18
}

func importReduce(k ir.ReduceKind) Importer {
	return func(a Attrs, opset int) (ir.Op, []ExtraInput, error) {
		t := &tensorAttrs{a: a}
		op := &ir.Reduce{
			Fn:                k,
			KeepDims:          t.bool("keepdims", true),
			NoopWithEmptyAxes: t.bool("noop_with_empty_axes", false),
		}
		if opset < reduceAxesInputOpset(k) {
			// The attribute goes to Axes, not an extra input: the op takes
			// the input when present, else the field.
			op.Axes = t.ints("axes")
		} else if a.Has("axes") {
			t.keep(fmt.Errorf("%s takes axes as an input from opset %d, this node (opset %d) has an axes attribute", k, reduceAxesInputOpset(k), opset))
		}
		return op, nil, t.err
	}
}

func importArg(isMax bool) Importer {
	return func(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
		t := &tensorAttrs{a: a}
		return &ir.ArgReduce{
			Max:             isMax,
			Axis:            t.int("axis", 0),
			KeepDims:        t.bool("keepdims", true),
			SelectLastIndex: t.bool("select_last_index", false),
		}, nil, t.err
	}
}

func importTopK(a Attrs, opset int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	op := &ir.TopK{Axis: t.int("axis", -1), Largest: t.bool("largest", true), Sorted: t.bool("sorted", true)}
	var extra []ExtraInput
	if opset < 10 {
		t.required("TopK", "k")
		k := t.int("k", 0)
		extra = append(extra, ExtraInput{Index: 1, Value: tensorOfInt64s(tensor.Shape{1}, []int64{int64(k)})})
	}
	return op, extra, t.err
}

func importDepthToSpace(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	t.required("DepthToSpace", "blocksize")
	return &ir.DepthToSpace{BlockSize: t.int("blocksize", 0), Mode: t.string("mode", "DCR")}, nil, t.err
}

func importSpaceToDepth(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	t.required("SpaceToDepth", "blocksize")
	return &ir.SpaceToDepth{BlockSize: t.int("blocksize", 0), Mode: t.string("mode", "DCR")}, nil, t.err
}

func importIsInf(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	neg, pos := t.bool("detect_negative", true), t.bool("detect_positive", true)
	if t.err != nil {
		return nil, nil, t.err
	}
	if neg && pos {
		// The common case stays the elementwise op engines already have.
		return &ir.Unary{Fn: ir.OpIsInf}, nil, nil
	}
	return &ir.IsInf{DetectNegative: neg, DetectPositive: pos}, nil, nil
}
