package onnx

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"goinfer/internal/ir"
	"goinfer/internal/onnxpb"
	"goinfer/internal/tensor"
)

// The default-domain opsets goinfer imports. Opset 6 is the one older
// exporters (PyTorch's early ONNX export among them) wrote; its legacy
// broadcasting is rewritten into the IR's NumPy form (legacy.go). Older
// opsets changed op semantics in ways the importers do not translate;
// newer ones may have changed them in ways goinfer does not know yet.
const (
	MinOpset = 6
	MaxOpset = 23
)

// Option configures Load and Decode.
type Option func(*config)

type config struct {
	inputShapes map[string]tensor.Shape
	constInputs map[string]*tensor.Tensor
	extDir      string
}

// WithInputShapes gives the shapes of graph inputs by name, replacing the
// shapes the model declares; ir.Dynamic marks a dimension that follows the
// batch. It fixes symbolic dimensions other than the leading one, which
// goinfer otherwise refuses.
func WithInputShapes(shapes map[string][]int) Option {
	return func(c *config) {
		c.inputShapes = make(map[string]tensor.Shape, len(shapes))
		for k, v := range shapes {
			c.inputShapes[k] = tensor.Shape(v).Clone()
		}
	}
}

// WithConstantInputs makes the named graph inputs constants holding the
// given tensors, so that shapes depending on their data (a Reshape whose
// shape is an input) can be inferred at load time.
func WithConstantInputs(values map[string]*tensor.Tensor) Option {
	return func(c *config) { c.constInputs = values }
}

// WithExternalDataDir is the directory external tensor data is read from
// (Load uses the model's own directory). Locations may not leave it.
func WithExternalDataDir(dir string) Option {
	return func(c *config) { c.extDir = dir }
}

// Load reads an ONNX model file and converts it to goinfer's IR. External
// tensor data is read from files in the model's directory.
func Load(path string, opts ...Option) (*ir.Graph, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	opts = append([]Option{WithExternalDataDir(filepath.Dir(path))}, opts...)
	g, err := Decode(data, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return g, nil
}

// Decode converts a serialized ModelProto to goinfer's IR: initializers
// become constants, nodes become IR ops through the importers of their
// opset, the leading symbolic dimension of each input becomes ir.Dynamic.
// The graph is bound once (batch 1) so that a model whose shapes cannot be
// inferred fails here, naming the node. A model using op types goinfer
// lacks fails with an *UnsupportedOpsError listing all of them.
func Decode(data []byte, opts ...Option) (*ir.Graph, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	var m onnxpb.ModelProto
	if err := proto.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("onnx: not a valid ONNX model (truncated or corrupt): %w", err)
	}
	if m.GetGraph() == nil {
		return nil, errors.New("onnx: the file holds no graph (truncated, or not an ONNX model)")
	}
	b := &builder{cfg: &cfg, model: &m, values: map[string]*ir.Value{}}
	if cfg.extDir != "" {
		root, err := os.OpenRoot(cfg.extDir)
		if err != nil {
			return nil, fmt.Errorf("onnx: external data directory: %w", err)
		}
		b.ext = &externalData{root: root}
		defer b.ext.close()
	}
	g, err := b.build()
	if err != nil {
		return nil, err
	}
	if _, err := ir.Bind(g, 1); err != nil {
		return nil, fmt.Errorf("onnx: inferring shapes: %w", err)
	}
	return g, nil
}

// builder converts one ModelProto.
type builder struct {
	cfg    *config
	model  *onnxpb.ModelProto
	ext    *externalData
	opsets map[string]int // by domain, "" for ONNX's default
	values map[string]*ir.Value
	used   map[string]bool // names some node or the graph's outputs read
}

// normDomain maps ONNX's default domain's two spellings to "".
func normDomain(d string) string {
	if d == "ai.onnx" {
		return ""
	}
	return d
}

func nodeDesc(i int, n *onnxpb.NodeProto) string {
	return fmt.Sprintf("node %d %q (%s)", i, n.GetName(), n.GetOpType())
}

func (b *builder) build() (*ir.Graph, error) {
	if err := b.readOpsets(); err != nil {
		return nil, err
	}
	gp := b.model.GetGraph()
	g := &ir.Graph{Name: gp.GetName(), Opset: b.opsets[""], Meta: b.meta()}
	if len(gp.GetSparseInitializer()) > 0 {
		return nil, fmt.Errorf("onnx: sparse initializer %q: %w", gp.GetSparseInitializer()[0].GetValues().GetName(), unsupported("sparse tensors"))
	}
	for _, tp := range gp.GetInitializer() {
		name := tp.GetName()
		if name == "" {
			return nil, errors.New("onnx: an initializer has no name")
		}
		if _, dup := b.values[name]; dup {
			return nil, fmt.Errorf("onnx: initializer %q is defined twice", name)
		}
		t, err := tensorFromProto(tp, b.ext)
		if err != nil {
			return nil, fmt.Errorf("onnx: initializer: %w", err)
		}
		b.values[name] = constValue(name, t)
	}
	if err := b.readInputs(g); err != nil {
		return nil, err
	}
	order, err := b.checkNodes()
	if err != nil {
		return nil, err
	}
	b.used = map[string]bool{}
	for _, n := range gp.GetNode() {
		for _, in := range n.GetInput() {
			b.used[in] = true
		}
	}
	for _, vi := range gp.GetOutput() {
		b.used[vi.GetName()] = true
	}
	for _, i := range order {
		n, err := b.convertNode(i, gp.GetNode()[i])
		if err != nil {
			return nil, err
		}
		if b.opsets[""] < 7 {
			if err := b.legacyBroadcast(g, i, gp.GetNode()[i], n); err != nil {
				return nil, err
			}
		}
		g.Nodes = append(g.Nodes, n)
	}
	for _, vi := range gp.GetOutput() {
		v, ok := b.values[vi.GetName()]
		if !ok {
			return nil, fmt.Errorf("onnx: graph output %q is not produced by any node, input or initializer", vi.GetName())
		}
		if vi.GetType() != nil && vi.GetType().GetTensorType() == nil {
			return nil, fmt.Errorf("onnx: graph output %q is a %s: %w", vi.GetName(), typeKind(vi.GetType()), ErrUnsupportedModel)
		}
		g.Outputs = append(g.Outputs, v)
	}
	if len(g.Outputs) == 0 {
		return nil, errors.New("onnx: the graph has no outputs")
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	return g, nil
}

func constValue(name string, t *tensor.Tensor) *ir.Value {
	return &ir.Value{Name: name, Type: ir.Type{DType: t.DType, Shape: t.Shape.Clone()}, Const: t}
}

// readOpsets records the opset of each imported domain and checks the
// default one.
func (b *builder) readOpsets() error {
	b.opsets = map[string]int{}
	for _, op := range b.model.GetOpsetImport() {
		d := normDomain(op.GetDomain())
		v := op.GetVersion()
		if v < 1 || v > 1<<20 {
			return fmt.Errorf("onnx: opset_import of domain %q has version %d", op.GetDomain(), v)
		}
		if old, dup := b.opsets[d]; dup && old != int(v) {
			return fmt.Errorf("onnx: domain %q is imported twice, at opsets %d and %d", op.GetDomain(), old, v)
		}
		b.opsets[d] = int(v)
	}
	v, ok := b.opsets[""]
	if !ok {
		if len(b.model.GetOpsetImport()) == 0 {
			return errors.New("onnx: the model has no opset_import (IR version < 3 models are not supported)")
		}
		// A model of custom-domain ops only: its nodes are reported as
		// unsupported below.
		return nil
	}
	if v < MinOpset || v > MaxOpset {
		return fmt.Errorf("onnx: the model uses opset %d of ONNX's default domain, goinfer supports opsets %d to %d: %w", v, MinOpset, MaxOpset, ErrUnsupportedModel)
	}
	return nil
}

func (b *builder) meta() map[string]string {
	m := b.model
	meta := map[string]string{
		"format":     "onnx",
		"ir_version": strconv.FormatInt(m.GetIrVersion(), 10),
	}
	if s := m.GetProducerName(); s != "" {
		meta["producer"] = s
	}
	if s := m.GetProducerVersion(); s != "" {
		meta["producer_version"] = s
	}
	var ops []string
	for d, v := range b.opsets {
		if d == "" {
			d = "ai.onnx"
		}
		ops = append(ops, fmt.Sprintf("%s %d", d, v))
	}
	sort.Strings(ops)
	meta["opsets"] = strings.Join(ops, ", ")
	for _, kv := range m.GetMetadataProps() {
		meta["meta."+kv.GetKey()] = kv.GetValue()
	}
	return meta
}

// typeKind names a non-tensor TypeProto's kind for errors.
func typeKind(t *onnxpb.TypeProto) string {
	switch {
	case t.GetSequenceType() != nil:
		return "sequence"
	case t.GetMapType() != nil:
		return "map"
	case t.GetOptionalType() != nil:
		return "optional"
	case t.GetSparseTensorType() != nil:
		return "sparse tensor"
	case t.GetTensorType() != nil:
		return "tensor"
	}
	return "value of unknown type"
}

// readInputs adds the graph inputs that are not initializers (older
// exporters list every weight as an input too).
func (b *builder) readInputs(g *ir.Graph) error {
	used := map[string]bool{}
	for _, vi := range b.model.GetGraph().GetInput() {
		name := vi.GetName()
		if name == "" {
			return errors.New("onnx: a graph input has no name")
		}
		if v, ok := b.values[name]; ok {
			if v.Const != nil && v.Producer == nil && !used[name] {
				continue // an initializer listed as an input
			}
			return fmt.Errorf("onnx: graph input %q is listed twice", name)
		}
		used[name] = true
		if t, ok := b.cfg.constInputs[name]; ok {
			if err := t.Validate(); err != nil {
				return fmt.Errorf("onnx: constant for input %q: %w", name, err)
			}
			b.values[name] = constValue(name, t)
			continue
		}
		typ, err := b.inputType(vi)
		if err != nil {
			return err
		}
		v := &ir.Value{Name: name, Type: typ}
		b.values[name] = v
		g.Inputs = append(g.Inputs, v)
	}
	for name := range b.cfg.inputShapes {
		if !used[name] {
			var names []string
			for _, v := range g.Inputs {
				names = append(names, v.Name)
			}
			return fmt.Errorf("onnx: a shape is given for input %q, the model's inputs are %v", name, names)
		}
	}
	return nil
}

func (b *builder) inputType(vi *onnxpb.ValueInfoProto) (ir.Type, error) {
	name := vi.GetName()
	if vi.GetType() == nil {
		return ir.Type{}, fmt.Errorf("onnx: graph input %q has no type", name)
	}
	tt := vi.GetType().GetTensorType()
	if tt == nil {
		return ir.Type{}, fmt.Errorf("onnx: graph input %q is a %s: %w", name, typeKind(vi.GetType()), ErrUnsupportedModel)
	}
	dt, err := DType(tt.GetElemType())
	if err != nil {
		return ir.Type{}, fmt.Errorf("onnx: graph input %q: %w", name, err)
	}
	if s, ok := b.cfg.inputShapes[name]; ok {
		for i, d := range s {
			if d < 0 && d != ir.Dynamic {
				return ir.Type{}, fmt.Errorf("onnx: the shape given for input %q has dimension %d = %d", name, i, d)
			}
		}
		return ir.Type{DType: dt, Shape: s.Clone()}, nil
	}
	if tt.GetShape() == nil {
		return ir.Type{}, fmt.Errorf("onnx: graph input %q has no shape (its rank is unknown); give one with WithInputShapes", name)
	}
	dims := tt.GetShape().GetDim()
	shape := make(tensor.Shape, len(dims))
	params := make([]string, len(dims))
	symbolic := false
	for i, d := range dims {
		switch v := d.GetValue().(type) {
		case *onnxpb.TensorShapeProto_Dimension_DimValue:
			if v.DimValue < 0 || v.DimValue > 1<<40 {
				return ir.Type{}, fmt.Errorf("onnx: graph input %q: dimension %d is %d", name, i, v.DimValue)
			}
			shape[i] = int(v.DimValue)
		default:
			// A symbol, or no size at all.
			shape[i], params[i] = ir.Dynamic, d.GetDimParam()
			symbolic = symbolic || i != 0
		}
	}
	if symbolic {
		return ir.Type{}, fmt.Errorf("onnx: %w", &SymbolicShapeError{Input: name, Shape: shape, Params: params})
	}
	return ir.Type{DType: dt, Shape: shape}, nil
}

// checkNodes reports every unsupported op type at once, checks that every
// input is defined somewhere, and returns the nodes in a topological order
// (the file's own order when it already is one, as ONNX requires).
func (b *builder) checkNodes() ([]int, error) {
	nodes := b.model.GetGraph().GetNode()
	var bad []UnsupportedOp
	badIdx := map[string]int{}
	for i, n := range nodes {
		d := normDomain(n.GetDomain())
		if _, ok := b.opsets[d]; !ok {
			name := fmt.Sprintf("%q", n.GetDomain())
			if d == "" {
				name = `"" (ai.onnx, ONNX's default)`
			}
			return nil, fmt.Errorf("onnx: %s uses domain %s, which the model does not import", nodeDesc(i, n), name)
		}
		_, known := importers[n.GetOpType()]
		if d == "" && known {
			continue
		}
		key := d + "\x00" + n.GetOpType()
		if j, ok := badIdx[key]; ok {
			bad[j].Count++
			continue
		}
		badIdx[key] = len(bad)
		bad = append(bad, UnsupportedOp{Domain: n.GetDomain(), OpType: n.GetOpType(), Node: n.GetName(), Index: i, Count: 1})
	}
	if len(bad) > 0 {
		sort.Slice(bad, func(i, j int) bool {
			if bad[i].Domain != bad[j].Domain {
				return bad[i].Domain < bad[j].Domain
			}
			return bad[i].OpType < bad[j].OpType
		})
		return nil, &UnsupportedOpsError{Ops: bad}
	}

	producer := map[string]int{}
	for i, n := range nodes {
		for _, o := range n.GetOutput() {
			if o == "" {
				continue
			}
			if _, ok := b.values[o]; ok {
				return nil, fmt.Errorf("onnx: %s: output %q redefines a graph input or initializer", nodeDesc(i, n), o)
			}
			if j, ok := producer[o]; ok {
				return nil, fmt.Errorf("onnx: %s: output %q is also produced by %s", nodeDesc(i, n), o, nodeDesc(j, nodes[j]))
			}
			producer[o] = i
		}
	}
	sorted := true
	deps := make([][]int, len(nodes))
	for i, n := range nodes {
		for _, in := range n.GetInput() {
			if in == "" {
				continue
			}
			if _, ok := b.values[in]; ok {
				continue
			}
			j, ok := producer[in]
			if !ok {
				return nil, fmt.Errorf("onnx: %s: input %q is not a graph input, an initializer or any node's output", nodeDesc(i, n), in)
			}
			if j >= i {
				sorted = false
			}
			deps[i] = append(deps[i], j)
		}
	}
	order := make([]int, 0, len(nodes))
	if sorted {
		for i := range nodes {
			order = append(order, i)
		}
		return order, nil
	}
	// Depth-first topological sort, keeping the file's order among
	// independent nodes; a node met again while on the stack closes a cycle.
	const (
		unvisited = iota
		active
		done
	)
	state := make([]int, len(nodes))
	var visit func(i int) error
	visit = func(i int) error {
		switch state[i] {
		case done:
			return nil
		case active:
			return fmt.Errorf("onnx: the graph has a cycle through %s", nodeDesc(i, nodes[i]))
		}
		state[i] = active
		for _, j := range deps[i] {
			if err := visit(j); err != nil {
				return err
			}
		}
		state[i] = done
		order = append(order, i)
		return nil
	}
	for i := range nodes {
		if err := visit(i); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// convertNode imports node i, whose inputs are all defined by now.
func (b *builder) convertNode(i int, n *onnxpb.NodeProto) (*ir.Node, error) {
	desc := nodeDesc(i, n)
	attrs, err := b.decodeAttrs(n)
	if err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", desc, err)
	}
	op, extra, err := importers[n.GetOpType()](attrs, b.opsets[""])
	if err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", desc, err)
	}
	if oc, ok := op.(ir.OutputCounter); ok {
		oc.SetOutputCount(len(n.GetOutput()))
	}
	name := n.GetName()
	if name == "" {
		name = fmt.Sprintf("%s_%d", n.GetOpType(), i)
	}
	node := &ir.Node{Name: name, Op: op}
	for _, in := range n.GetInput() {
		if in == "" {
			node.Inputs = append(node.Inputs, nil)
			continue
		}
		node.Inputs = append(node.Inputs, b.values[in])
	}
	for _, e := range extra {
		for len(node.Inputs) <= e.Index {
			node.Inputs = append(node.Inputs, nil)
		}
		if node.Inputs[e.Index] != nil {
			return nil, fmt.Errorf("onnx: %s: input %d is given both as an input and as an attribute", desc, e.Index)
		}
		node.Inputs[e.Index] = constValue(fmt.Sprintf("%s.input%d", name, e.Index), e.Value)
	}
	// Trailing absent inputs say nothing; dropping them keeps ops' input
	// counts as short as ONNX allows.
	for len(node.Inputs) > 0 && node.Inputs[len(node.Inputs)-1] == nil {
		node.Inputs = node.Inputs[:len(node.Inputs)-1]
	}
	for _, o := range n.GetOutput() {
		// An output nothing reads is left out: exporters list optional
		// outputs an inference graph never uses (BatchNormalization's
		// running statistics before opset 14, Dropout's mask), which the
		// IR's ops need not produce.
		if o == "" || !b.used[o] {
			node.Outputs = append(node.Outputs, nil)
			continue
		}
		v := &ir.Value{Name: o, Producer: node}
		b.values[o] = v
		node.Outputs = append(node.Outputs, v)
	}
	for len(node.Outputs) > 0 && node.Outputs[len(node.Outputs)-1] == nil {
		node.Outputs = node.Outputs[:len(node.Outputs)-1]
	}
	return node, nil
}

// decodeAttrs converts a node's attributes to Attrs.
func (b *builder) decodeAttrs(n *onnxpb.NodeProto) (Attrs, error) {
	out := make(Attrs, len(n.GetAttribute()))
	for _, ap := range n.GetAttribute() {
		name := ap.GetName()
		if name == "" {
			return nil, errors.New("an attribute has no name")
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("attribute %q is given twice", name)
		}
		if ap.GetRefAttrName() != "" {
			return nil, fmt.Errorf("attribute %q refers to a function attribute outside a function", name)
		}
		typ := ap.GetType()
		if typ == onnxpb.AttributeProto_UNDEFINED {
			typ = guessAttrType(ap)
		}
		var a Attr
		switch typ {
		case onnxpb.AttributeProto_FLOAT:
			a = Attr{Type: AttrFloat, Float: ap.GetF()}
		case onnxpb.AttributeProto_INT:
			a = Attr{Type: AttrInt, Int: ap.GetI()}
		case onnxpb.AttributeProto_STRING:
			a = Attr{Type: AttrString, String: string(ap.GetS())}
		case onnxpb.AttributeProto_TENSOR:
			if ap.GetT() == nil {
				return nil, fmt.Errorf("attribute %q is a tensor but holds none", name)
			}
			t, err := tensorFromProto(ap.GetT(), b.ext)
			if err != nil {
				return nil, fmt.Errorf("attribute %q: %w", name, err)
			}
			a = Attr{Type: AttrTensor, Tensor: t}
		case onnxpb.AttributeProto_FLOATS:
			a = Attr{Type: AttrFloats, Floats: ap.GetFloats()}
		case onnxpb.AttributeProto_INTS:
			a = Attr{Type: AttrInts, Ints: ap.GetInts()}
		case onnxpb.AttributeProto_STRINGS:
			s := make([]string, len(ap.GetStrings()))
			for i, v := range ap.GetStrings() {
				s[i] = string(v)
			}
			a = Attr{Type: AttrStrings, Strings: s}
		case onnxpb.AttributeProto_GRAPH, onnxpb.AttributeProto_GRAPHS, onnxpb.AttributeProto_SPARSE_TENSOR,
			onnxpb.AttributeProto_SPARSE_TENSORS, onnxpb.AttributeProto_TENSORS, onnxpb.AttributeProto_TYPE_PROTO,
			onnxpb.AttributeProto_TYPE_PROTOS:
			return nil, fmt.Errorf("attribute %q of type %s: %w", name, typ, ErrUnsupportedModel)
		default:
			return nil, fmt.Errorf("attribute %q has unknown type %d", name, typ)
		}
		out[name] = a
	}
	return out, nil
}

// guessAttrType reads the type of an attribute from the field it sets, as
// IR version 1 files, which lack the type field, require.
func guessAttrType(ap *onnxpb.AttributeProto) onnxpb.AttributeProto_AttributeType {
	switch {
	case len(ap.GetFloats()) > 0:
		return onnxpb.AttributeProto_FLOATS
	case len(ap.GetInts()) > 0:
		return onnxpb.AttributeProto_INTS
	case len(ap.GetStrings()) > 0:
		return onnxpb.AttributeProto_STRINGS
	case ap.GetT() != nil:
		return onnxpb.AttributeProto_TENSOR
	case ap.GetG() != nil:
		return onnxpb.AttributeProto_GRAPH
	case len(ap.GetS()) > 0:
		return onnxpb.AttributeProto_STRING
	case ap.GetF() != 0:
		return onnxpb.AttributeProto_FLOAT
	}
	return onnxpb.AttributeProto_INT
}
