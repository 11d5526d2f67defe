package cuda

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// The general-graph executor's planning: a bound, optimized ir.Graph
// becomes a list of GPU steps (cuDNN convolutions, cuBLAS products, the
// kernels of tools/kernels/graph.cu) over values that live in arena slots
// (shared by values whose lifetimes do not overlap), constants or views of
// other values. Planning touches no GPU, so that its lowering and fusion
// decisions are tested in CI.

// gkind is where a planned value's bytes live.
type gkind uint8

const (
	gArena gkind = iota // a slot of the instance's arena
	gConst              // the model's weights, in the storage dtype
	gAlias              // another value's bytes (a reshape-like view)
)

// gvalue is the plan's record of one IR value.
type gvalue struct {
	name  string
	shape tensor.Shape
	elems int64
	kind  gkind
	// nhwc: a 4-d value stored channels-last (its logical [N,C,H,W]
	// dimensions at strides HWC, 1, WC, C); else row-major.
	nhwc  bool
	slot  int
	alias int
	cnst  *tensor.Tensor
	// A strided view (of a concatenation buffer, see graphconcat.go; a
	// Split piece, Slice, Gather, Transpose or reshape of another value):
	// off is its first element within the value it aliases, strides its
	// physical element strides in the storage of its root (so a view of a
	// view composes: offsets add along the alias chain, strides are the
	// outer view's). strides is also set on a value a step writes in
	// another order than its nhwc flag says; nil: laid out as nhwc says.
	// A concatenation buffer's views keep the buffer's nhwc flag, as the
	// element order their rows are packed in (rowLayout).
	off     int64
	strides []int64
}

// stepKind is what a step runs.
type stepKind uint8

const (
	stConv      stepKind = iota + 1 // cuDNN convolution
	stGemm                          // cuBLAS (strided batched) product
	stEW                            // strided elementwise / copy kernel
	stAffine                        // per-channel scale, shift, residual, activation
	stPool                          // 2-d max or average pooling
	stReduce                        // reductions over trailing contiguous elements
	stSoftmax                       // softmax over rows
	stLayerNorm                     // layer normalization over rows
	stReduceCL                      // global pooling of a channels-last value
	stDW                            // channels-last depthwise convolution, epilogue fused
	stChain                         // elementwise ops applied in turn, one kernel (graphchain.go)
	stAttn                          // fused scaled dot-product attention
	stPadCL                         // NCHW image batch to channels-last, channels padded with zeros
	stFC                            // dense layer of a small batch, epilogue fused (graphfc.go)
)

func (k stepKind) String() string {
	switch k {
	case stConv:
		return "conv"
	case stGemm:
		return "gemm"
	case stEW:
		return "elementwise"
	case stAffine:
		return "epilogue"
	case stPool:
		return "pool"
	case stReduce:
		return "reduce"
	case stSoftmax:
		return "softmax"
	case stLayerNorm:
		return "layernorm"
	case stReduceCL:
		return "globalpool"
	case stDW:
		return "dwconv"
	case stChain:
		return "chain"
	case stAttn:
		return "attention"
	case stPadCL:
		return "pad"
	case stFC:
		return "fc"
	}
	return fmt.Sprintf("step(%d)", uint8(k))
}

// The kernels' op codes (graph.cu's enum).
const (
	ewCopy = iota
	ewRelu
	ewSigmoid
	ewTanh
	ewExp
	ewLog
	ewSqrt
	ewRecip
	ewNeg
	ewAbs
	ewErf
	ewHardSwish
	ewSiLU
	ewHardSigmoid
	ewGELU
	ewGELUTanh
	ewClip
	ewLeaky
	ewFill
	ewSoftplus
	ewFloor
	ewCeil
	ewMish
)

const (
	ewAdd = 32 + iota
	ewSub
	ewMul
	ewDiv
	ewPow
	ewMax
	ewMin
	ewPRelu
)

// maxDims is the rank the strided kernel indexes (graph.cu's MAXD).
const maxDims = 6

// ewMeta is the strided kernel's index description: shape, then element
// strides of out, a and b, each maxDims long with leading ones / zeros.
type ewMeta [4 * maxDims]int32

// convGeom is a 2-d convolution's geometry.
type convGeom struct {
	n, c, h, w     int // input
	k, oh, ow      int // output channels and size
	kh, kw         int
	padH, padW     int
	strH, strW     int
	dilH, dilW     int
	groups         int
	weight         int // the filter's value (a constant)
	hasAct         bool
	act            int
	p0, p1         float32
	hasBias, hasRs bool
	nhwc           bool // x, y and the filter channels-last
	cpad           int  // input channels padded with zeros to cpad (0: none)
	// pre: a depthwise convolution's prologue, the activation it applies
	// to its input (graphprologue.go); zero: none.
	pre preAct
}

// gemmGeom is a row-major Y[b][M,N] = alpha * opA(A[b]) opB(B[b]).
type gemmGeom struct {
	m, n, k        int
	transA, transB bool
	lda, ldb       int // leading dimensions of A's and B's memory (0: packed)
	batch          int
	strideA        int64 // elements; 0 broadcasts A
	strideB        int64
	alpha          float32
}

// gemmCall is a gemmGeom as cuBLAS's column-major call: row-major
// Y = op(A) op(B) is column-major Y^T = op(B)^T op(A)^T, so cuBLAS's first
// operand is B's memory and its second A's; m = N, n = M, ldc = N.
type gemmCall struct {
	opA, opB                  int
	ldA, ldB                  int
	strideA, strideB, strideC int64
}

func gemmCallOf(g *gemmGeom) gemmCall {
	c := gemmCall{opA: opN, ldA: g.n, opB: opN, ldB: g.k, strideA: g.strideB, strideB: g.strideA, strideC: int64(g.m) * int64(g.n)}
	if g.transB {
		c.opA, c.ldA = opT, g.k
	}
	if g.transA {
		c.opB, c.ldB = opT, g.m
	}
	if g.ldb > 0 {
		c.ldA = g.ldb
	}
	if g.lda > 0 {
		c.ldB = g.lda
	}
	return c
}

// cuBLAS's operation codes (cublasOperation_t), kept here so that planning
// needs no GPU package constants.
const (
	opN = 0
	opT = 1
)

// poolGeom is a 2-d pooling's geometry over NCHW planes.
type poolGeom struct {
	nc, h, w, oh, ow int
	kh, kw, sh, sw   int
	ph, pw, peh, pew int
	dh, dw           int
	max, countPad    bool
	c                int // channels when the planes are channels-last, else 0
}

// gstep is one planned GPU call.
type gstep struct {
	kind stepKind
	node string // the IR node it computes (profile, errors)
	// Operands: value indices (-1: none) and element offsets into them.
	out, a, b, res      int
	outOff, aOff, bOff  int64
	n                   int64 // elements the kernel covers
	op                  int
	p0, p1              float32
	meta                ewMeta
	flat, bScalar       bool
	fused               bool      // a convolution with its epilogue in the cuDNN call
	vec                 bool      // depthwise: 16-byte vectors of channels, the filter [kh][kw][C]
	tile                int       // depthwise: outputs per thread of the tiled kernel (0: not tiled)
	chanScale           bool      // elementwise: channels-last a op b[image][channel] (channels, inner = H*W*C)
	scale, shift        []float32 // affine (float32, uploaded per plan)
	channels, inner     int       // affine: c = (i / inner) % channels
	rows, rowLen, redOp int       // reduce, softmax, layernorm; affine over strided rows: rowLen
	padTo               int       // stPadCL: channels of the output (rows images, channels, rowLen pixels in)
	aRow, oRow          int64     // affine over strided rows: the row strides of a and out
	eps                 float32
	conv                *convGeom
	gemm                *gemmGeom
	pool                *poolGeom
	attn                *attnGeom // q = a, k = b, v = res; scale p0
	reads, defs         []int
	// Elementwise steps: the logical shape and strides of out, a and b
	// (before dimensions merge), from which a chain's index description
	// is built; a chain's ops after the first.
	lshape        tensor.Shape
	los, las, lbs []int64
	chain         []chainOp
	cmeta         []int32 // a chain's index description (chainMeta)
}

// gplan is a graph lowered for one batch size.
type gplan struct {
	batch     int
	vals      []gvalue
	steps     []*gstep
	input     int
	outputs   []int
	slotBytes []int64
	elem      int  // bytes per element of the storage dtype
	cl        bool // 4-d activations channels-last (fp16, bf16)
	// findMath: unfused convolutions run under the math type cudnnFind
	// ranked their algorithm with (opt-in: engine.Options.GraphExperiments).
	findMath bool
}

// planError lists every node kind the engine cannot run.
type planError struct {
	graph string
	first map[string]string
}

func (e *planError) Error() string {
	keys := make([]string, 0, len(e.first))
	for k := range e.first {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "cuda engine: graph %q has ops the engine cannot run:", e.graph)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s (first at %s);", k, e.first[k])
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Unwrap makes the error ir.ErrUnsupported, which callers test for "valid,
// but not runnable here".
func (e *planError) Unwrap() error { return ir.ErrUnsupported }

// unsupportedOp is a lowering's refusal.
type unsupportedOp struct{ msg string }

func (u *unsupportedOp) Error() string { return u.msg }

func refuse(format string, args ...any) error {
	return &unsupportedOp{msg: fmt.Sprintf(format, args...)}
}

// planner is planGraph's state.
type planner struct {
	p     *gplan
	index map[*ir.Value]int
	bad   map[string]string
	// dw: the measured depthwise lowerings (graphdwtune.go); shapes
	// missing take graph.cu's kernel with its default tile.
	dw map[dwShape]dwTimed
	// uses counts each IR value's consumers (graph outputs included).
	uses   map[*ir.Value]int
	reader map[*ir.Value]*ir.Node // a reader of each value (the one, for single-use values)
	outs   map[*ir.Value]bool     // the graph's outputs
	// groups maps the concatenations that share a buffer to it
	// (graphconcat.go).
	groups map[*ir.Node]*concatGroup
	// defs is the step that last defined each value.
	defs map[int]*gstep
	// irv is the IR value of each plan value (temporaries have none).
	irv  map[int]*ir.Value
	opts planOptions
	attn map[*ir.Node]*attnMatch
	skip map[*ir.Node]bool // folded into an attention step
	// preCand are the depthwise nodes that may take a prologue (the
	// measured lowerings are keyed on it), pre those that do, preMoved
	// the convolutions whose activation they apply (graphprologue.go).
	preCand  map[*ir.Node]prologue
	pre      map[*ir.Node]preAct
	preMoved map[*ir.Node]bool
}

// planGraph lowers g, bound to batch (ir.Bind or ir.Optimize), into steps
// whose values are elem bytes each; with channelsLast, convolutions and
// the 4-d values around them are stored NHWC.
func planGraph(g *ir.Graph, batch, elem int, channelsLast bool) (*gplan, error) {
	return planGraphWith(g, batch, elem, channelsLast, planOptions{})
}

// planGraphDW is planGraph with the depthwise convolutions lowered as
// measured (dw: cuDNN's grouped convolution or graph.cu's kernel with a
// tile width, per shape).
func planGraphDW(g *ir.Graph, batch, elem int, channelsLast bool, dw map[dwShape]dwTimed) (*gplan, error) {
	return planGraphWith(g, batch, elem, channelsLast, planOptions{dw: dw})
}

// planOptions select planning decisions: the default plan, or one without
// concatenations in place (for tests that measure them), or one with
// elementwise chains (off by default: engine.Options.FuseChains), the
// measured depthwise lowerings, and one without fused attention.
type planOptions struct {
	copyConcats bool // every concatenation copies all its inputs
	chains      bool // runs of elementwise ops become one chain step
	// dw: the measured depthwise lowerings (graphdwtune.go); shapes
	// missing take graph.cu's kernel with its default tile.
	dw          map[dwShape]dwTimed
	noAttention bool // no fused attention steps (the kernels failed their check)
	// identityConv: convolutions whose activation cuDNN's fused call
	// lacks run it with the identity (bias fused) and the activation
	// after; dwPrologue: depthwise prologues (graphprologue.go). Both
	// opt-in (engine.Options.GraphExperiments) until measured on a GPU.
	identityConv, dwPrologue bool
	findMath                 bool // gplan.findMath
}

// planGraphWith is planGraph with options.
func planGraphWith(g *ir.Graph, batch, elem int, channelsLast bool, opts planOptions) (*gplan, error) {
	if len(g.Inputs) != 1 || len(g.Outputs) < 1 {
		return nil, fmt.Errorf("cuda engine: graph %q has %d inputs and %d outputs; want one input and at least one output", g.Name, len(g.Inputs), len(g.Outputs))
	}
	pl := &planner{p: &gplan{batch: batch, elem: elem, cl: channelsLast, findMath: opts.findMath}, index: map[*ir.Value]int{}, bad: map[string]string{},
		uses: map[*ir.Value]int{}, reader: map[*ir.Value]*ir.Node{}, outs: map[*ir.Value]bool{}, skip: map[*ir.Node]bool{},
		groups: map[*ir.Node]*concatGroup{}, defs: map[int]*gstep{}, irv: map[int]*ir.Value{}, opts: opts, dw: opts.dw}
	pl.countUses(g)
	if opts.dwPrologue {
		pl.preCand = prologueCandidates(g, channelsLast)
		pl.pre, pl.preMoved = prologueActs(pl.preCand, elem, opts.dw)
	}
	if !opts.noAttention {
		pl.attn = pl.findAttention(g)
	}
	for _, m := range pl.attn {
		for _, n := range m.skip {
			pl.skip[n] = true
		}
	}
	in, err := pl.value(g.Inputs[0])
	if err != nil {
		return nil, err
	}
	pl.p.input = in
	if !opts.copyConcats {
		if err := pl.planConcats(g); err != nil {
			return nil, err
		}
	}
	for _, n := range g.Nodes {
		if err := pl.node(n); err != nil {
			return nil, err
		}
	}
	if len(pl.bad) > 0 {
		return nil, &planError{graph: g.Name, first: pl.bad}
	}
	for _, v := range g.Outputs {
		o, err := pl.value(v)
		if err != nil {
			return nil, err
		}
		if pl.p.vals[pl.p.root(o)].kind != gArena {
			return nil, fmt.Errorf("cuda engine: graph %q: output %q is a constant; the engine computes outputs only", g.Name, v.Name)
		}
		// Outputs leave row-major.
		nc := &nodeCtx{pl: pl, n: &ir.Node{Name: "output " + v.Name, Op: &ir.Unary{Fn: ir.OpIdentity}}}
		if o, err = nc.contig(o); err != nil {
			return nil, err
		}
		pl.commit(nc)
		pl.p.outputs = append(pl.p.outputs, o)
	}
	pl.p.assignSlots()
	return pl.p, nil
}

func (p *gplan) root(v int) int {
	for p.vals[v].kind == gAlias {
		v = p.vals[v].alias
	}
	return v
}

// offset is v's element offset into its root's storage.
func (p *gplan) offset(v int) int64 {
	var off int64
	for p.vals[v].kind == gAlias {
		off += p.vals[v].off
		v = p.vals[v].alias
	}
	return off
}

// isView reports whether v is a strided view (not laid out as its nhwc
// flag says).
func (p *gplan) isView(v int) bool { return v >= 0 && p.vals[v].strides != nil }

// value returns v's index, adding it on first sight.
func (pl *planner) value(v *ir.Value) (int, error) {
	if i, ok := pl.index[v]; ok {
		return i, nil
	}
	for _, d := range v.Type.Shape {
		if d < 0 {
			return 0, fmt.Errorf("cuda engine: value %q has type %s: the graph is not bound", v.Name, v.Type)
		}
	}
	gv := gvalue{name: v.Name, shape: v.Type.Shape.Clone(), elems: int64(v.Type.Shape.NumElements()), slot: -1, alias: -1}
	if v.Const != nil {
		gv.kind, gv.cnst = gConst, v.Const
	}
	pl.p.vals = append(pl.p.vals, gv)
	i := len(pl.p.vals) - 1
	pl.index[v] = i
	pl.irv[i] = v
	return i, nil
}

// nodeCtx is what one node's lowering sees.
type nodeCtx struct {
	pl      *planner
	n       *ir.Node
	in, out []int
	steps   []*gstep
}

func (nc *nodeCtx) val(i int) *gvalue { return &nc.pl.p.vals[i] }

// inShape is input i's shape.
func (nc *nodeCtx) inShape(i int) tensor.Shape { return nc.val(nc.in[i]).shape }

// has reports whether input i is present.
func (nc *nodeCtx) has(i int) bool { return i < len(nc.in) && nc.in[i] >= 0 }

// constInts reads constant input i as integers.
func (nc *nodeCtx) constInts(i int) ([]int, bool, error) {
	if !nc.has(i) {
		return nil, false, nil
	}
	v := nc.n.Inputs[i]
	if v.Const == nil {
		return nil, false, refuse("input %d (%s) is computed at run time; the engine needs it constant", i, v.Name)
	}
	a, err := ir.ArrayFromTensor(v.Const)
	if err != nil {
		return nil, false, err
	}
	out := make([]int, len(a.Data))
	for k, f := range a.Data {
		out[k] = int(f)
	}
	return out, true, nil
}

// constFloats reads constant input i as float32.
func (nc *nodeCtx) constFloats(i int) ([]float32, error) {
	v := nc.n.Inputs[i]
	if v.Const == nil {
		return nil, refuse("input %d (%s) is computed at run time; the engine needs it constant", i, v.Name)
	}
	return v.Const.ToFloat32()
}

// moveHere takes step s, which now also computes this node, out of its
// place in the plan and appends it here, named for both nodes.
func (nc *nodeCtx) moveHere(s *gstep) {
	p := nc.pl.p
	if i := slices.Index(p.steps, s); i >= 0 {
		p.steps = slices.Delete(p.steps, i, i+1)
	}
	name := s.node + "+" + nc.n.Name
	nc.add(s)
	s.node = name
}

func (nc *nodeCtx) add(s *gstep) *gstep {
	s.node = nc.n.Name
	if s.node == "" {
		s.node = nc.n.Op.Kind()
	}
	nc.steps = append(nc.steps, s)
	return s
}

// node lowers one node into steps, or records why it cannot.
func (pl *planner) node(n *ir.Node) error {
	if pl.skip[n] {
		return nil // computed by the attention step of a later node
	}
	nc := &nodeCtx{pl: pl, n: n}
	for _, v := range n.Inputs {
		i := -1
		if v != nil {
			var err error
			if i, err = pl.value(v); err != nil {
				return err
			}
		}
		nc.in = append(nc.in, i)
	}
	for _, v := range n.Outputs {
		i := -1
		if v != nil {
			var err error
			if i, err = pl.value(v); err != nil {
				return err
			}
		}
		nc.out = append(nc.out, i)
	}
	for k, v := range n.Inputs {
		if v != nil && v.Const == nil && v.Type.DType != tensor.Float32 && !layoutOnlyInput(n.Op, k) {
			pl.refuse(n, fmt.Sprintf("%s input", v.Type.DType), fmt.Sprintf("input %q is %s at run time; the engine computes in floating point", v.Name, v.Type.DType))
			return nil
		}
	}
	err := nc.lowerViews()
	if err != nil {
		if u, ok := err.(*unsupportedOp); ok {
			pl.refuse(n, "", u.msg)
			return nil
		}
		return fmt.Errorf("cuda engine: %s: %w", n, err)
	}
	pl.commit(nc)
	return nil
}

// commit appends a node's steps with the values each reads and defines.
func (pl *planner) commit(nc *nodeCtx) {
	for _, s := range nc.steps {
		var reads []int
		operands := []int{s.a, s.b, s.res}
		for _, c := range s.chain {
			operands = append(operands, c.b)
		}
		for _, v := range operands {
			if v >= 0 && pl.p.vals[pl.p.root(v)].kind != gConst {
				reads = append(reads, v)
			}
		}
		s.reads = reads
		s.defs = []int{s.out}
		pl.defs[s.out] = s
		pl.p.steps = append(pl.p.steps, s)
	}
	nc.steps = nil
}

// st returns value v's physical element strides.
func (p *gplan) st(v int) []int64 {
	val := &p.vals[v]
	if val.strides != nil {
		return val.strides
	}
	if val.nhwc {
		s := val.shape
		c, h, w := int64(s[1]), int64(s[2]), int64(s[3])
		return []int64{h * w * c, 1, w * c, c}
	}
	return contiguous(val.shape)
}

func (nc *nodeCtx) st(v int) []int64 { return nc.pl.p.st(v) }

// sameLayout reports whether strides a and b address a tensor of shape
// identically (dimensions of size 1 have no stride that matters).
func sameLayout(shape tensor.Shape, a, b []int64) bool {
	for d := range shape {
		if shape[d] != 1 && a[d] != b[d] {
			return false
		}
	}
	return true
}

// isContig reports whether v is laid out row-major.
func (nc *nodeCtx) isContig(v int) bool {
	s := nc.val(v).shape
	return sameLayout(s, nc.st(v), contiguous(s))
}

// aligned reports whether view v starts on a 16-byte boundary, as the
// libraries' fast paths and the vector kernels want (arena slots and
// weights are aligned; only a view's offset can break it).
func (nc *nodeCtx) aligned(v int) bool {
	return nc.pl.p.offset(v)*int64(nc.pl.p.elem)%16 == 0
}

// contig returns v, or a row-major copy of it (also of a row-major view
// whose start is not 16-byte aligned).
func (nc *nodeCtx) contig(v int) (int, error) {
	if nc.isContig(v) && nc.aligned(v) {
		return v, nil
	}
	s := nc.val(v).shape
	t := nc.temp(s)
	return t, nc.copyStep(ewCopy, t, 0, contiguous(s), v, 0, nc.st(v), s)
}

// asNHWC returns v, or a channels-last copy of it.
func (nc *nodeCtx) asNHWC(v int) (int, error) {
	if nc.val(v).nhwc && !nc.pl.p.isView(v) && nc.aligned(v) {
		return v, nil
	}
	s := nc.val(v).shape
	t := nc.temp(s)
	nc.val(t).nhwc = true
	if sameLayout(s, nc.st(v), nc.st(t)) && nc.aligned(v) {
		// The same memory either way ([N, C, 1, 1]): no copy.
		nc.pl.p.vals = nc.pl.p.vals[:len(nc.pl.p.vals)-1]
		return v, nil
	}
	return t, nc.copyStep(ewCopy, t, 0, nc.st(t), v, 0, nc.st(v), s)
}

// outLike stores an elementwise op's output o channels-last when the plan
// is, o is 4-d and an input computed at run time is laid out channels-last
// (or none is 4-d): 4-d values of attention (batch, heads, tokens, head
// size) stay row-major, as products read them.
func (nc *nodeCtx) outLike(o int) {
	if !nc.pl.p.cl || len(nc.val(o).shape) != 4 || nc.pl.p.isView(o) {
		// A view (of a concatenation buffer) keeps the buffer's layout.
		return
	}
	any4 := false
	for _, v := range nc.in {
		if v < 0 || nc.val(v).kind == gConst || len(nc.val(v).shape) != 4 {
			continue
		}
		any4 = true
		s := nc.val(v).shape
		if nc.val(v).nhwc || sameLayout(s, nc.st(v), []int64{int64(s[1] * s[2] * s[3]), 1, int64(s[3] * s[1]), int64(s[1])}) {
			nc.val(o).nhwc = true
			return
		}
	}
	nc.val(o).nhwc = !any4
}

// outCL stores output value o channels-last when the plan is and o is 4-d.
func (nc *nodeCtx) outCL(o int) {
	if o >= 0 && nc.pl.p.cl && len(nc.val(o).shape) == 4 && !nc.pl.p.isView(o) {
		nc.val(o).nhwc = true
	}
}

// layoutOnlyInput marks inputs that are read at plan time (shapes, axes,
// indices), whatever their dtype.
func layoutOnlyInput(op ir.Op, k int) bool {
	switch op.(type) {
	case *ir.Reshape, *ir.Slice, *ir.Gather, *ir.Expand, *ir.Pad, *ir.Split, *ir.Squeeze, *ir.Unsqueeze, *ir.Reduce, *ir.Clip:
		return k > 0
	}
	return false
}

func (pl *planner) refuse(n *ir.Node, key, msg string) {
	k := n.Op.Kind()
	if key != "" {
		k += " " + key
	}
	if _, seen := pl.bad[k]; !seen {
		pl.bad[k] = fmt.Sprintf("%s: %s", n, msg)
	}
}

// temp adds an intermediate value of shape to the plan.
func (nc *nodeCtx) temp(shape tensor.Shape) int {
	p := nc.pl.p
	p.vals = append(p.vals, gvalue{name: fmt.Sprintf("%s.tmp%d", nc.n.Name, len(p.vals)), shape: shape.Clone(),
		elems: int64(shape.NumElements()), slot: -1, alias: -1})
	return len(p.vals) - 1
}

// alias makes output 0 a view of input 0: of the same layout when the
// shapes agree, else a reshape of its strides where they allow one (as
// PyTorch's view), else of a row-major copy.
func (nc *nodeCtx) alias() error {
	in := nc.in[0]
	o := nc.val(nc.out[0])
	iv := nc.val(in)
	if o.elems != iv.elems {
		return fmt.Errorf("a view of %d elements as %d", iv.elems, o.elems)
	}
	if o.shape.Equal(iv.shape) {
		o.kind, o.alias, o.nhwc, o.strides = gAlias, in, iv.nhwc, slices.Clone(iv.strides)
		return nil
	}
	if nc.isContig(in) {
		o.kind, o.alias = gAlias, in
		return nil
	}
	if st, ok := reshapeStrides(iv.shape, nc.st(in), o.shape); ok {
		nc.view(nc.out[0], in, st, 0)
		return nil
	}
	in, err := nc.contig(in)
	if err != nil {
		return err
	}
	o = nc.val(nc.out[0])
	o.kind, o.alias = gAlias, in
	return nil
}

// view makes value o a view of value in: strides st, first element off.
func (nc *nodeCtx) view(o, in int, st []int64, off int64) {
	v := nc.val(o)
	v.kind, v.alias, v.strides, v.off, v.nhwc = gAlias, in, slices.Clone(st), off, false
}

// oneReader reports whether node output k has one reader and is no graph
// output: a view of it that its reader must copy costs no more than the
// copy it replaces.
func (nc *nodeCtx) oneReader(k int) bool {
	v := nc.n.Outputs[k]
	return nc.pl.uses[v] == 1 && !nc.pl.outs[v]
}

// reshapeStrides returns the strides that read a tensor of shape old at
// strides os as shape nw without moving data, when there are such
// strides: every group of old dimensions that new dimensions regroup
// must be one strided run (NumPy's no-copy reshape rule).
func reshapeStrides(old tensor.Shape, os []int64, nw tensor.Shape) ([]int64, bool) {
	var od []int
	var ost []int64
	for i := range old {
		if old[i] != 1 {
			od, ost = append(od, old[i]), append(ost, os[i])
		}
	}
	ns := make([]int64, len(nw))
	oi, ni := 0, 0
	for ni < len(nw) || oi < len(od) {
		if ni < len(nw) && nw[ni] == 1 {
			ni++ // any stride: dimensions of one element are never stepped
			continue
		}
		if oi >= len(od) || ni >= len(nw) {
			return nil, false
		}
		np, op := int64(nw[ni]), int64(od[oi])
		nj, oj := ni+1, oi+1
		for np != op {
			if np < op {
				if nj >= len(nw) {
					return nil, false
				}
				np *= int64(nw[nj])
				nj++
			} else {
				if oj >= len(od) {
					return nil, false
				}
				op *= int64(od[oj])
				oj++
			}
		}
		for k := oi; k < oj-1; k++ {
			if ost[k] != ost[k+1]*int64(od[k+1]) {
				return nil, false
			}
		}
		st := ost[oj-1]
		for k := nj - 1; k >= ni; k-- {
			ns[k] = st
			st *= int64(nw[k])
		}
		ni, oi = nj, oj
	}
	return ns, true
}

func lowerNode(nc *nodeCtx) error {
	n := nc.n
	for k, v := range n.Outputs {
		if v != nil && v.Type.DType != tensor.Float32 {
			return refuse("output %d is %s; the engine computes in floating point", k, v.Type.DType)
		}
	}
	switch op := n.Op.(type) {
	case *ir.Reshape, *ir.Flatten, *ir.Squeeze, *ir.Unsqueeze, *ir.Dropout:
		return nc.alias()
	case *ir.Cast:
		return nc.alias() // float to float: the storage dtype is the engine's
	case *ir.Unary:
		if op.Fn == ir.OpIdentity {
			return nc.alias()
		}
		code, ok := unaryCodes[op.Fn]
		if !ok {
			return refuse("unary %s", op.Fn)
		}
		return nc.elementwise(code, 0, 0)
	case *ir.LeakyRelu:
		return nc.elementwise(ewLeaky, float32(op.Alpha), 0)
	case *ir.HardSigmoid:
		return nc.elementwise(ewHardSigmoid, float32(op.Alpha), float32(op.Beta))
	case *ir.Gelu:
		if op.Tanh {
			return nc.elementwise(ewGELUTanh, 0, 0)
		}
		return nc.elementwise(ewGELU, 0, 0)
	case *ir.Clip:
		lo, hi := float32(-math.MaxFloat32), float32(math.MaxFloat32)
		for k, dst := range []*float32{&lo, &hi} {
			if nc.has(k + 1) {
				f, err := nc.constFloats(k + 1)
				if err != nil {
					return err
				}
				if len(f) != 1 {
					return refuse("Clip bound of %d values", len(f))
				}
				*dst = f[0]
			}
		}
		return nc.elementwise(ewClip, lo, hi)
	case *ir.Binary:
		code, ok := binaryCodes[op.Fn]
		if !ok {
			return refuse("binary %s", op.Fn)
		}
		if nc.foldIntoAffine(code) || nc.fuseChain(code, 0, 0, true) {
			return nil
		}
		nc.outLike(nc.out[0])
		return nc.binary(code, nc.in[0], nc.in[1], nc.out[0], 0)
	case *ir.BatchNorm:
		return nc.batchNorm(op)
	case *ir.Conv:
		return nc.conv(op)
	case *ir.Gemm:
		return nc.gemmOp(op)
	case *ir.MatMul:
		if m := nc.pl.attn[n]; m != nil {
			return nc.attention(m)
		}
		return nc.matmul(op)
	case *ir.Pool:
		return nc.poolOp(op)
	case *ir.GlobalPool:
		s := nc.inShape(0)
		if len(s) < 3 {
			return refuse("global pooling of rank %d", len(s))
		}
		red := 0
		if op.Max {
			red = 1
		}
		if nc.val(nc.in[0]).nhwc {
			nc.add(&gstep{kind: stReduceCL, out: nc.out[0], a: nc.in[0], b: -1, res: -1, rows: s[0], channels: s[1], rowLen: s[2] * s[3], redOp: red, n: int64(s[0] * s[1])})
			return nil
		}
		in, err := nc.contig(nc.in[0])
		if err != nil {
			return err
		}
		nc.add(&gstep{kind: stReduce, out: nc.out[0], a: in, b: -1, res: -1, rows: s[0] * s[1], rowLen: tensor.Shape(s[2:]).NumElements(), redOp: red})
		return nil
	case *ir.Reduce:
		return nc.reduce(op)
	case *ir.Softmax:
		return nc.softmax(op)
	case *ir.LayerNorm:
		return nc.layerNorm(op)
	case *ir.Transpose:
		return nc.transpose(op)
	case *ir.Concat:
		return nc.concat(op)
	case *ir.Split:
		return nc.split(op)
	case *ir.Slice:
		return nc.slice()
	case *ir.Gather:
		return nc.gather(op)
	case *ir.Expand:
		return nc.expand()
	case *ir.Pad:
		return nc.pad(op)
	}
	return refuse("no kernel")
}

var unaryCodes = map[ir.UnaryKind]int{
	ir.OpRelu: ewRelu, ir.OpSigmoid: ewSigmoid, ir.OpTanh: ewTanh, ir.OpExp: ewExp, ir.OpLog: ewLog,
	ir.OpSqrt: ewSqrt, ir.OpReciprocal: ewRecip, ir.OpNeg: ewNeg, ir.OpAbs: ewAbs, ir.OpErf: ewErf,
	ir.OpHardSwish: ewHardSwish, ir.OpSiLU: ewSiLU, ir.OpSoftplus: ewSoftplus, ir.OpFloor: ewFloor,
	ir.OpCeil: ewCeil, ir.OpMish: ewMish,
}

var binaryCodes = map[ir.BinaryKind]int{
	ir.OpAdd: ewAdd, ir.OpSub: ewSub, ir.OpMul: ewMul, ir.OpDiv: ewDiv, ir.OpPow: ewPow, ir.OpPRelu: ewPRelu,
}

// actCode maps a fused epilogue's activation to the kernels' op code.
func actCode(e ir.Epilogue) (code int, p0, p1 float32, err error) {
	switch e.Act {
	case ir.ActNone:
		return ewCopy, 0, 0, nil
	case ir.ActRelu:
		return ewRelu, 0, 0, nil
	case ir.ActRelu6:
		return ewClip, 0, 6, nil
	case ir.ActClip:
		return ewClip, float32(e.Lo), float32(e.Hi), nil
	case ir.ActSigmoid:
		return ewSigmoid, 0, 0, nil
	case ir.ActSiLU:
		return ewSiLU, 0, 0, nil
	case ir.ActHardSwish:
		return ewHardSwish, 0, 0, nil
	case ir.ActHardSigmoid:
		return ewHardSigmoid, float32(e.Alpha), float32(e.Beta), nil
	case ir.ActGELU:
		return ewGELU, 0, 0, nil
	case ir.ActGELUTanh:
		return ewGELUTanh, 0, 0, nil
	case ir.ActLeakyRelu:
		return ewLeaky, float32(e.Alpha), 0, nil
	case ir.ActTanh:
		return ewTanh, 0, 0, nil
	}
	return 0, 0, 0, refuse("epilogue activation %s", e.Act)
}

// contiguous returns the row-major element strides of s.
func contiguous(s tensor.Shape) []int64 {
	st := make([]int64, len(s))
	acc := int64(1)
	for d := len(s) - 1; d >= 0; d-- {
		st[d] = acc
		acc *= int64(s[d])
	}
	return st
}

// broadcastStrides returns the strides that read a tensor of shape s at
// strides cs broadcast to shape to (right-aligned, NumPy's rules).
func broadcastStrides(s tensor.Shape, cs []int64, to tensor.Shape) ([]int64, error) {
	if len(s) > len(to) {
		return nil, fmt.Errorf("%v does not broadcast to %v", s, to)
	}
	out := make([]int64, len(to))
	off := len(to) - len(s)
	for d := range s {
		switch {
		case s[d] == to[off+d]:
			out[off+d] = cs[d]
		case s[d] == 1:
			out[off+d] = 0
		default:
			return nil, fmt.Errorf("%v does not broadcast to %v", s, to)
		}
	}
	return out, nil
}

// strided builds an elementwise or copy step over shape with the strides
// of out, a and b (b may be nil), merging dimensions where every operand
// allows and spotting the flat case.
func strided(shape tensor.Shape, os, as, bs []int64) (ewMeta, bool, bool, error) {
	type dim struct{ n, o, a, b int64 }
	var all []dim
	for d := range shape {
		if shape[d] == 1 {
			continue
		}
		x := dim{n: int64(shape[d]), o: os[d], a: as[d]}
		if bs != nil {
			x.b = bs[d]
		}
		all = append(all, x)
	}
	// Iterate in the output's memory order (an elementwise op may visit
	// elements in any order), so that channels-last writes are coalesced
	// and dimensions merge.
	sort.SliceStable(all, func(i, j int) bool { return all[i].o > all[j].o })
	var dims []dim
	for _, x := range all {
		if k := len(dims) - 1; k >= 0 {
			p := dims[k]
			if p.o == x.o*x.n && p.a == x.a*x.n && p.b == x.b*x.n {
				dims[k] = dim{n: p.n * x.n, o: x.o, a: x.a, b: x.b}
				continue
			}
		}
		dims = append(dims, x)
	}
	var m ewMeta
	if len(dims) > maxDims {
		return m, false, false, refuse("a strided access of %d dimensions (the kernel indexes %d)", len(dims), maxDims)
	}
	off := maxDims - len(dims)
	for d := 0; d < maxDims; d++ {
		m[d] = 1
	}
	for k, x := range dims {
		if x.n > math.MaxInt32 || x.o > math.MaxInt32 || x.a > math.MaxInt32 || x.b > math.MaxInt32 {
			return m, false, false, refuse("a dimension or stride beyond 2^31")
		}
		m[off+k] = int32(x.n)
		m[maxDims+off+k] = int32(x.o)
		m[2*maxDims+off+k] = int32(x.a)
		m[3*maxDims+off+k] = int32(x.b)
	}
	flat := len(dims) <= 1 && (len(dims) == 0 || (dims[0].o == 1 && dims[0].a == 1))
	bScalar := false
	if flat && len(dims) == 1 && bs != nil {
		switch dims[0].b {
		case 1:
		case 0:
			bScalar = true
		default:
			flat = false
		}
	}
	return m, flat, bScalar, nil
}

// copyStep copies (or applies op to) a strided view of a into a strided
// view of out over shape.
func (nc *nodeCtx) copyStep(op int, out int, outOff int64, os []int64, a int, aOff int64, as []int64, shape tensor.Shape) error {
	m, flat, _, err := strided(shape, os, as, nil)
	if err != nil {
		return err
	}
	nc.add(&gstep{kind: stEW, op: op, out: out, outOff: outOff, a: a, aOff: aOff, b: -1, res: -1,
		n: int64(shape.NumElements()), meta: m, flat: flat && outOff == 0 && aOff == 0,
		lshape: shape.Clone(), los: slices.Clone(os), las: slices.Clone(as)})
	return nil
}

// elementwise is a unary op of input 0 into output 0.
func (nc *nodeCtx) elementwise(code int, p0, p1 float32) error {
	if nc.fuseActivation(code, p0, p1) || nc.fuseChain(code, p0, p1, false) {
		return nil
	}
	nc.outLike(nc.out[0])
	s := nc.val(nc.out[0]).shape
	as, err := broadcastStrides(nc.inShape(0), nc.st(nc.in[0]), s)
	if err != nil {
		return err
	}
	if err := nc.copyStep(code, nc.out[0], 0, nc.st(nc.out[0]), nc.in[0], 0, as, s); err != nil {
		return err
	}
	last := nc.steps[len(nc.steps)-1]
	last.p0, last.p1 = p0, p1
	return nil
}

// binary is out = a op b with broadcasting.
func (nc *nodeCtx) binary(code, a, b, out int, _ int) error {
	if nc.chanScale(code, a, b, out) {
		return nil
	}
	s := nc.val(out).shape
	as, err := broadcastStrides(nc.val(a).shape, nc.st(a), s)
	if err != nil {
		return err
	}
	bs, err := broadcastStrides(nc.val(b).shape, nc.st(b), s)
	if err != nil {
		return err
	}
	m, flat, bScalar, err := strided(s, nc.st(out), as, bs)
	if err != nil {
		return err
	}
	nc.add(&gstep{kind: stEW, op: code, out: out, a: a, b: b, res: -1, n: int64(s.NumElements()), meta: m, flat: flat, bScalar: bScalar,
		lshape: s.Clone(), los: slices.Clone(nc.st(out)), las: as, lbs: bs})
	return nil
}

// affineStep is y = act(x*scale[c] + shift[c] + res) with c = (i/inner)%C.
func (nc *nodeCtx) affineStep(y, x int, scale, shift []float32, res int, channels, inner int, act int, p0, p1 float32) {
	if nc.val(y).nhwc {
		inner = 1 // the channel is the innermost dimension
	}
	nc.add(&gstep{kind: stAffine, out: y, a: x, b: -1, res: res, n: nc.val(y).elems, scale: scale, shift: shift,
		channels: max(channels, 1), inner: max(inner, 1), op: act, p0: p0, p1: p1})
}

func (nc *nodeCtx) batchNorm(op *ir.BatchNorm) error {
	s := nc.inShape(0)
	if len(s) < 2 {
		return refuse("batch norm of rank %d", len(s))
	}
	var ps [4][]float32
	for k := range ps {
		f, err := nc.constFloats(k + 1)
		if err != nil {
			return err
		}
		ps[k] = f
	}
	c := s[1]
	scale, shift := make([]float32, c), make([]float32, c)
	for i := 0; i < c; i++ {
		sc := float64(ps[0][i]) / math.Sqrt(float64(ps[3][i])+op.Epsilon)
		scale[i] = float32(sc)
		shift[i] = float32(float64(ps[1][i]) - float64(ps[2][i])*sc)
	}
	x, y := nc.in[0], nc.out[0]
	inner := tensor.Shape(s[2:]).NumElements()
	p := nc.pl.p
	if !p.isView(x) && !nc.aligned(x) {
		// A row-major view at an offset the vector kernel cannot start at.
		var err error
		if x, err = nc.contig(x); err != nil {
			return err
		}
	}
	if !p.isView(y) {
		nc.val(y).nhwc = nc.val(x).nhwc
	}
	if p.isView(x) || p.isView(y) {
		if nc.affineRows(y, x, scale, shift, c, inner, ewCopy, 0, 0) {
			return nil
		}
		// Not rows of one length: through packed copies.
		var err error
		if x, err = nc.packed(x); err != nil {
			return err
		}
		if p.isView(y) {
			t := nc.temp(s)
			nc.val(t).nhwc = nc.val(x).nhwc
			nc.affineStep(t, x, scale, shift, -1, c, inner, ewCopy, 0, 0)
			return nc.copyStep(ewCopy, y, 0, nc.st(y), t, 0, nc.st(t), s)
		}
		nc.val(y).nhwc = nc.val(x).nhwc
	}
	nc.affineStep(y, x, scale, shift, -1, c, inner, ewCopy, 0, 0)
	return nil
}

// epilogue adds what a fused Conv, Gemm or MatMul applies after its
// product (in place on y): the bias (per channel, over inner elements), the
// residual and the activation, as one kernel when the residual has y's
// shape, else as a broadcast add and an activation.
func (nc *nodeCtx) epilogue(y int, bias []float32, channels, inner int, res int, e ir.Epilogue) error {
	act, p0, p1, err := actCode(e)
	if err != nil {
		return err
	}
	if res >= 0 && (!nc.val(res).shape.Equal(nc.val(y).shape) || !sameLayout(nc.val(y).shape, nc.st(res), nc.st(y))) {
		if bias != nil {
			nc.affineStep(y, y, nil, bias, -1, channels, inner, ewCopy, 0, 0)
		}
		if err := nc.binary(ewAdd, y, res, y, 0); err != nil {
			return err
		}
		if act != ewCopy {
			nc.affineStep(y, y, nil, nil, -1, 1, 1, act, p0, p1)
		}
		return nil
	}
	if bias == nil && res < 0 && act == ewCopy {
		return nil
	}
	nc.affineStep(y, y, nil, bias, res, channels, inner, act, p0, p1)
	return nil
}

func (nc *nodeCtx) conv(op *ir.Conv) error {
	if nc.n.Inputs[1].Const == nil {
		return refuse("a convolution filter computed at run time")
	}
	g, err := convGeomOf(op, nc.inShape(0), nc.inShape(1), nc.val(nc.out[0]).shape, nc.in[1])
	if err != nil {
		return err
	}
	var bias []float32
	if nc.has(2) {
		f, err := nc.constFloats(2)
		if err != nil {
			return err
		}
		bias = f
	}
	res := -1
	if op.Epilogue.Residual {
		res = nc.in[len(nc.in)-1]
	}
	epi := op.Epilogue
	if nc.pl.preMoved[nc.n] {
		// The depthwise convolution reading the output applies the
		// activation (its prologue).
		epi.Act = ir.ActNone
	}
	x := nc.in[0]
	if res < 0 {
		if done, err := nc.fcStep(g, x, bias, epi); done || err != nil {
			return err
		}
	}
	if g.groups == 1 && g.c < 8 && g.kh == g.strH && g.kw == g.strW && g.padH == 0 && g.padW == 0 && g.dilH == 1 && g.dilW == 1 && g.kh*g.kw > 1 {
		return nc.patchConv(g, x, bias, res, epi)
	}
	if !nc.pl.p.cl {
		if x, err = nc.contig(x); err != nil {
			return err
		}
		return nc.convStep(g, x, nc.out[0], bias, res, epi)
	}
	g.nhwc = true
	nc.outCL(nc.out[0])
	y := nc.out[0]
	lib, tile := false, 0
	if g.isDepthwise() {
		// Measured as it would run: with the prologue its candidate
		// gives it (prologueActs made the same choice).
		g.pre = nc.pl.preCand[nc.n].act
		lib, tile = dwLowering(g, nc.pl.p.elem, nc.pl.dw)
		if lib {
			g.pre = preAct{}
		}
	}
	if g.isDepthwise() && lib {
		// cuDNN's grouped convolution, chosen by measurement, and its
		// epilogue as a kernel: the fused cuDNN call is not used here, as
		// it is not what was measured.
		if x, err = nc.asNHWC(x); err != nil {
			return err
		}
		nc.add(&gstep{kind: stConv, out: y, a: x, b: -1, res: -1, conv: g})
		return nc.epilogue(y, bias, g.k, 1, res, epi)
	}
	if g.isDepthwise() {
		// Depthwise: graph.cu's kernel, its epilogue fused.
		if x, err = nc.asNHWC(x); err != nil {
			return err
		}
		w, err := nc.constFloats(1)
		if err != nil {
			return err
		}
		act, p0, p1, err := actCode(epi)
		if err != nil {
			return err
		}
		fuseRes := res < 0 || (nc.val(res).shape.Equal(nc.val(y).shape) && sameLayout(nc.val(y).shape, nc.st(res), nc.st(y)) && nc.aligned(res))
		s := dwStep(g, x, y, w, bias, nc.val(y).elems, nc.pl.p.elem, act, p0, p1)
		if s.vec {
			s.tile = tile
		}
		s.setPre(g.pre)
		if fuseRes {
			s.res = res
			nc.add(s)
			return nil
		}
		s.op, s.p0, s.p1 = ewCopy, 0, 0
		nc.add(s)
		return nc.epilogue(y, nil, g.k, 1, res, epi)
	}
	if g.groups == 1 && g.c < 8 {
		// Few input channels (an RGB stem): padded with zeros to 8, which
		// cuDNN's channels-last kernels run several times faster.
		t := nc.temp(tensor.Shape{g.n, 8, g.h, g.w})
		nc.val(t).nhwc = true
		if slices.Equal(nc.st(x), contiguous(nc.val(x).shape)) {
			// One pass: every channel of t written once, by pixel.
			nc.add(&gstep{kind: stPadCL, out: t, a: x, b: -1, res: -1, rows: g.n, channels: g.c, rowLen: g.h * g.w,
				padTo: 8, n: int64(g.n * g.h * g.w)})
		} else {
			ts := nc.val(t).shape
			if err := nc.copyStep(ewFill, t, 0, nc.st(t), x, 0, make([]int64, 4), ts); err != nil {
				return err
			}
			if err := nc.copyStep(ewCopy, t, 0, nc.st(t), x, 0, nc.st(x), nc.val(x).shape); err != nil {
				return err
			}
		}
		x, g.cpad = t, 8
	} else if x, err = nc.asNHWC(x); err != nil {
		return err
	}
	return nc.convStep(g, x, y, bias, res, epi)
}

// patchConv lowers a convolution of few input channels whose windows tile
// the image (kernel = stride, no padding or dilation: ViT's and
// ConvNeXt's patch embeddings of RGB images) as a copy of the input into
// patches [N, OH, OW, C, kh, kw] and one product with the filter, writing
// channels-last [N, OH, OW, K]: cuDNN ran ViT-B/16's at batch 256 in
// 1.6 ms, its 3 channels padded to 8. Wider inputs (ConvNeXt's
// downsampling) stay cuDNN's, whose channels-last reads are contiguous.
func (nc *nodeCtx) patchConv(g *convGeom, x int, bias []float32, res int, e ir.Epilogue) error {
	y := nc.out[0]
	xs := nc.st(x)
	ps := tensor.Shape{g.n, g.oh, g.ow, g.c, g.kh, g.kw}
	pt := nc.temp(ps)
	src := []int64{xs[0], xs[2] * int64(g.kh), xs[3] * int64(g.kw), xs[1], xs[2], xs[3]}
	if err := nc.copyStep(ewCopy, pt, 0, contiguous(ps), x, 0, src, ps); err != nil {
		return err
	}
	if nc.pl.p.cl {
		nc.val(y).nhwc = true
	} else {
		nc.val(y).strides = []int64{int64(g.oh * g.ow * g.k), 1, int64(g.ow * g.k), int64(g.k)}
	}
	k := g.c * g.kh * g.kw
	s := nc.add(&gstep{kind: stGemm, out: y, a: pt, b: g.weight, res: -1,
		gemm: &gemmGeom{m: g.n * g.oh * g.ow, n: g.k, k: k, transB: true, batch: 1, alpha: 1}})
	return nc.gemmEpilogue(s, bias, g.k, res, e)
}

// convStep adds a cuDNN convolution and its epilogue: fused into the call
// (cudnnConvolutionBiasActivationForward: bias, residual, ReLU or
// identity) where cuDNN can, else a kernel after it.
func (nc *nodeCtx) convStep(g *convGeom, x, y int, bias []float32, res int, e ir.Epilogue) error {
	act, _, _, err := actCode(e)
	if err != nil {
		return err
	}
	resOK := res < 0 || (nc.val(res).shape.Equal(nc.val(y).shape) && sameLayout(nc.val(y).shape, nc.st(res), nc.st(y)) && nc.aligned(res))
	if nc.pl.opts.identityConv && resOK && act != ewRelu && act != ewCopy {
		// The fused call with the identity (bias and residual in it, on
		// the precomputed implicit GEMM), then the activation alone.
		if err := nc.convStep(g, x, y, bias, res, ir.Epilogue{Residual: e.Residual}); err != nil {
			return err
		}
		_, p0, p1, _ := actCode(e)
		nc.affineStep(y, y, nil, nil, -1, g.k, g.oh*g.ow, act, p0, p1)
		return nil
	}
	if (act == ewRelu || act == ewCopy) && resOK && (bias != nil || res >= 0 || act == ewRelu || nc.pl.opts.identityConv) {
		if bias == nil {
			bias = make([]float32, g.k) // the fused call needs one
		}
		inner := g.oh * g.ow
		if g.nhwc {
			inner = 1
		}
		nc.add(&gstep{kind: stConv, out: y, a: x, b: -1, res: res, conv: g, fused: true, shift: bias, op: act,
			channels: g.k, inner: inner, n: nc.val(y).elems})
		return nil
	}
	nc.add(&gstep{kind: stConv, out: y, a: x, b: -1, res: -1, conv: g})
	return nc.epilogue(y, bias, g.k, g.oh*g.ow, res, e)
}

// biasVector returns a bias for an output of n columns when c (broadcast
// to the output) is one value per column or one value for all.
func biasVector(c tensor.Shape, f []float32, n int, scale float32) ([]float32, bool) {
	for d := 0; d < len(c)-1; d++ {
		if c[d] != 1 {
			return nil, false
		}
	}
	out := make([]float32, n)
	switch {
	case len(f) == n:
		for i := range out {
			out[i] = f[i] * scale
		}
	case len(f) == 1:
		for i := range out {
			out[i] = f[0] * scale
		}
	default:
		return nil, false
	}
	return out, true
}

func (nc *nodeCtx) gemmOp(op *ir.Gemm) error {
	as, bs := nc.inShape(0), nc.inShape(1)
	if len(as) != 2 || len(bs) != 2 {
		return fmt.Errorf("Gemm of %v and %v", as, bs)
	}
	m, k := as[0], as[1]
	if op.TransA {
		m, k = k, m
	}
	n := bs[1]
	if op.TransB {
		n = bs[0]
	}
	g := &gemmGeom{m: m, n: n, k: k, transA: op.TransA, transB: op.TransB, batch: 1, alpha: float32(op.Alpha)}
	a, lda, ta, err := nc.matrix(nc.in[0])
	if err != nil {
		return err
	}
	b, ldb, tb, err := nc.matrix(nc.in[1])
	if err != nil {
		return err
	}
	g.lda, g.ldb, g.transA, g.transB = lda, ldb, g.transA != ta, g.transB != tb
	step := nc.add(&gstep{kind: stGemm, out: nc.out[0], a: a, b: b, res: -1, gemm: g})
	var bias []float32
	if nc.has(2) && op.Beta != 0 {
		c := nc.n.Inputs[2]
		if c.Const == nil {
			return refuse("Gemm's C computed at run time")
		}
		f, err := c.Const.ToFloat32()
		if err != nil {
			return err
		}
		var ok bool
		if bias, ok = biasVector(c.Type.Shape, f, n, float32(op.Beta)); !ok {
			return refuse("Gemm's C of shape %v (the engine adds a bias per column)", c.Type.Shape)
		}
	}
	res := -1
	if op.Epilogue.Residual {
		res = nc.in[len(nc.in)-1]
	}
	return nc.gemmEpilogue(step, bias, n, res, op.Epilogue)
}

// matOperand returns how cuBLAS reads a matrix [..., r, c] at strides st
// in place: row-major at leading dimension ld, or transposed (column
// c at ld); ok is false when neither of the last two strides is one.
func matOperand(s tensor.Shape, st []int64) (ld int, trans, ok bool) {
	n := len(s)
	r, c := s[n-2], s[n-1]
	sr, sc := st[n-2], st[n-1]
	switch {
	case r == 1 && c == 1:
		return 1, false, true
	case c == 1 || sc == 1:
		if r == 1 {
			return c, false, true
		}
		return int(sr), false, sr >= int64(c) && sr <= math.MaxInt32
	case r == 1 || sr == 1:
		if c == 1 {
			return r, true, true
		}
		return int(sc), true, sc >= int64(r) && sc <= math.MaxInt32
	}
	return 0, false, false
}

// batchStride returns the one stride that steps through the elements of
// shape s at strides st in row-major order, when there is one (0 for a
// single element).
func batchStride(s tensor.Shape, st []int64) (int64, bool) {
	var stride, next int64
	first := true
	for d := len(s) - 1; d >= 0; d-- {
		if s[d] == 1 {
			continue
		}
		if first {
			stride, next, first = st[d], st[d]*int64(s[d]), false
			continue
		}
		if st[d] != next {
			return 0, false
		}
		next *= int64(s[d])
	}
	return stride, true
}

// flatRows reports whether the rows of [..., M, K] at strides st are one
// strided run with unit column stride (one matrix of all rows).
func flatRows(s tensor.Shape, st []int64) bool {
	ld, tr, ok := matOperand(s, st)
	if !ok || tr {
		return false
	}
	r := len(s)
	rs, ok := batchStride(s[:r-1], st[:r-1])
	return ok && (rs == int64(ld) || tensor.Shape(s[:r-1]).NumElements() == 1)
}

// matrix returns a 2-d operand as cuBLAS reads it: the value (v or a
// row-major copy), its leading dimension and whether it is stored
// transposed.
func (nc *nodeCtx) matrix(v int) (int, int, bool, error) {
	if ld, tr, ok := matOperand(nc.val(v).shape, nc.st(v)); ok {
		return v, ld, tr, nil
	}
	c, err := nc.contig(v)
	if err != nil {
		return 0, 0, false, err
	}
	ld, tr, _ := matOperand(nc.val(c).shape, nc.st(c))
	return c, ld, tr, nil
}

func (nc *nodeCtx) matmul(op *ir.MatMul) error {
	as, bs, ys := nc.inShape(0), nc.inShape(1), nc.val(nc.out[0]).shape
	if len(as) < 2 || len(bs) < 2 {
		return refuse("MatMul of 1-d operands")
	}
	m, k, n := as[len(as)-2], as[len(as)-1], bs[len(bs)-1]
	if bs[len(bs)-2] != k {
		return fmt.Errorf("MatMul of %v and %v", as, bs)
	}
	ab, bb := tensor.Shape(as[:len(as)-2]), tensor.Shape(bs[:len(bs)-2])
	yb := tensor.Shape(ys[:len(ys)-2])
	batch := yb.NumElements()
	g := &gemmGeom{m: m, n: n, k: k, batch: batch, alpha: 1}
	a, b := nc.in[0], nc.in[1]
	if ab.NumElements() != 1 && ab.NumElements() != batch || bb.NumElements() != 1 && bb.NumElements() != batch ||
		ab.NumElements() == batch && !ab.Equal(yb) && batch > 1 || bb.NumElements() == batch && !bb.Equal(yb) && batch > 1 {
		return refuse("MatMul broadcasting batch dimensions %v against %v", ab, bb)
	}
	// Operands are read in place where cuBLAS can address them: a
	// transposed last pair through the operation flag, a row stride
	// through the leading dimension, batch dimensions that make one
	// strided run through the batch stride; others are copied row-major.
	opnd := func(v int, rowsFlat bool) (int, int, bool, int64, error) {
		for try := 0; ; try++ {
			s, st := nc.val(v).shape, nc.st(v)
			ld, tr, ok := matOperand(s, st)
			r := len(s)
			var bs int64
			if ok {
				if rowsFlat {
					// Every row of every batch: one matrix of rows at ld.
					var rs int64
					rs, ok = batchStride(s[:r-1], st[:r-1])
					ok = ok && !tr && (rs == int64(ld) || tensor.Shape(s[:r-1]).NumElements() == 1)
				} else {
					bs, ok = batchStride(s[:r-2], st[:r-2])
				}
			}
			if ok || try > 0 {
				return v, ld, tr, bs, nil
			}
			var err error
			if v, err = nc.contig(v); err != nil {
				return 0, 0, false, 0, err
			}
		}
	}
	var err error
	if bb.NumElements() == 1 && batch > 1 && m >= 16 && !flatRows(as, nc.st(a)) {
		// B shared, but A's rows make no single strided run (tokens-first
		// activations): products of A's batches in place against B at
		// batch stride 0, rather than a copy of A.
		if _, _, ok := matOperand(as, nc.st(a)); ok {
			if _, ok := batchStride(ab, nc.st(a)[:len(as)-2]); ok {
				bb = ab
			}
		}
	}
	if bb.NumElements() == 1 && batch > 1 {
		// B shared by every product: one GEMM over all rows of A.
		var ldb int
		var tb bool
		if b, ldb, tb, _, err = opnd(b, false); err != nil {
			return err
		}
		var lda int
		var ta bool
		if a, lda, ta, _, err = opnd(a, true); err != nil {
			return err
		}
		g.m, g.batch, g.lda, g.ldb, g.transA, g.transB = m*batch, 1, lda, ldb, ta, tb
	} else {
		var lda, ldb int
		var ta, tb bool
		var sa, sb int64
		if a, lda, ta, sa, err = opnd(a, false); err != nil {
			return err
		}
		if b, ldb, tb, sb, err = opnd(b, false); err != nil {
			return err
		}
		if ab.NumElements() == 1 {
			sa = 0
		}
		if bb.NumElements() == 1 {
			sb = 0
		}
		g.lda, g.ldb, g.transA, g.transB, g.strideA, g.strideB = lda, ldb, ta, tb, sa, sb
	}
	step := nc.add(&gstep{kind: stGemm, out: nc.out[0], a: a, b: b, res: -1, gemm: g})
	next := 2
	var bias []float32
	e := op.Epilogue
	hasBias := len(nc.in) > 2 && (!e.Residual || len(nc.in) > 3)
	if hasBias {
		if nc.has(2) {
			c := nc.n.Inputs[2]
			if c.Const == nil {
				return refuse("MatMul bias computed at run time")
			}
			f, err := c.Const.ToFloat32()
			if err != nil {
				return err
			}
			var ok bool
			if bias, ok = biasVector(c.Type.Shape, f, n, 1); !ok {
				return refuse("MatMul bias of shape %v", c.Type.Shape)
			}
		}
		next = 3
	}
	res := -1
	if e.Residual {
		res = nc.in[next]
	}
	return nc.gemmEpilogue(step, bias, n, res, e)
}

// gemmEpilogue fuses a product's epilogue into its call (cuBLASLt: bias,
// the residual as C with beta 1, ReLU or GELU) when one call can do it: a
// single product, a residual of the output's layout and an activation
// cuBLASLt has. cuBLASLt's GELU is the tanh form, within half an ulp of
// the erf form in 16-bit storage, so erf GELU is fused in 16-bit plans
// only. Otherwise (and at run time where cuBLASLt refuses) the epilogue
// is a kernel after the product.
func (nc *nodeCtx) gemmEpilogue(s *gstep, bias []float32, n int, res int, e ir.Epilogue) error {
	act, p0, p1, err := actCode(e)
	if err != nil {
		return err
	}
	y := s.out
	resOK := res < 0 || (nc.val(res).shape.Equal(nc.val(y).shape) && sameLayout(nc.val(y).shape, nc.st(res), nc.st(y)) && nc.aligned(res))
	actOK := act == ewCopy || act == ewRelu || act == ewGELUTanh || (act == ewGELU && nc.pl.p.elem == 2)
	if s.gemm.batch != 1 || !resOK || !actOK || (bias == nil && res < 0 && act == ewCopy) {
		return nc.epilogue(y, bias, n, 1, res, e)
	}
	s.fused, s.shift, s.res, s.op, s.p0, s.p1 = true, bias, res, act, p0, p1
	s.channels, s.inner, s.n = n, 1, nc.val(y).elems
	return nil
}

func (nc *nodeCtx) poolOp(op *ir.Pool) error {
	xs, ys := nc.inShape(0), nc.val(nc.out[0]).shape
	if len(xs) != 4 || len(op.Kernel) != 2 {
		return refuse("%d-d pooling (the engine runs 2-d)", len(xs)-2)
	}
	if len(nc.out) > 1 && nc.out[1] >= 0 {
		return refuse("MaxPool's indices output")
	}
	g := &poolGeom{nc: xs[0] * xs[1], h: xs[2], w: xs[3], oh: ys[2], ow: ys[3], kh: op.Kernel[0], kw: op.Kernel[1],
		sh: 1, sw: 1, dh: 1, dw: 1, max: op.Max, countPad: op.CountIncludePad}
	if len(op.Strides) == 2 {
		g.sh, g.sw = op.Strides[0], op.Strides[1]
	}
	if len(op.Dilations) == 2 {
		g.dh, g.dw = op.Dilations[0], op.Dilations[1]
	}
	if len(op.Pads) == 4 {
		g.ph, g.pw, g.peh, g.pew = op.Pads[0], op.Pads[1], op.Pads[2], op.Pads[3]
	}
	x := nc.in[0]
	if nc.val(x).nhwc {
		g.c = xs[1]
		nc.val(nc.out[0]).nhwc = true
	} else {
		var err error
		if x, err = nc.contig(x); err != nil {
			return err
		}
	}
	nc.add(&gstep{kind: stPool, out: nc.out[0], a: x, b: -1, res: -1, pool: g, n: nc.val(nc.out[0]).elems})
	return nil
}

// trailing reports whether axes (normalized) are exactly the last len(axes)
// dimensions of rank r.
func trailing(axes []int, r int) bool {
	s := slices.Clone(axes)
	slices.Sort(s)
	for k, a := range s {
		if a != r-len(s)+k {
			return false
		}
	}
	return true
}

func normAxis(a, r int) int {
	if a < 0 {
		a += r
	}
	return a
}

func (nc *nodeCtx) reduce(op *ir.Reduce) error {
	s := nc.inShape(0)
	r := len(s)
	axes := slices.Clone(op.Axes)
	if nc.has(1) {
		a, _, err := nc.constInts(1)
		if err != nil {
			return err
		}
		axes = a
	}
	if len(axes) == 0 {
		if op.NoopWithEmptyAxes {
			return nc.alias()
		}
		for d := 0; d < r; d++ {
			axes = append(axes, d)
		}
	}
	for k := range axes {
		axes[k] = normAxis(axes[k], r)
	}
	if !trailing(axes, r) {
		return refuse("%s over axes %v of rank %d (the engine reduces trailing axes)", op.Fn, axes, r)
	}
	var red int
	switch op.Fn {
	case ir.ReduceMean:
		red = 0
	case ir.ReduceMax:
		red = 1
	case ir.ReduceSum:
		red = 2
	default:
		return refuse("%s", op.Fn)
	}
	l := tensor.Shape(s[r-len(axes):]).NumElements()
	in, err := nc.contig(nc.in[0])
	if err != nil {
		return err
	}
	nc.add(&gstep{kind: stReduce, out: nc.out[0], a: in, b: -1, res: -1, rows: s.NumElements() / max(l, 1), rowLen: l, redOp: red})
	return nil
}

func (nc *nodeCtx) softmax(op *ir.Softmax) error {
	if op.Hard {
		return refuse("Hardmax")
	}
	s := nc.inShape(0)
	r := len(s)
	ax := normAxis(op.Axis, r)
	red := 0
	if op.Log {
		red = 1
	}
	if !op.Coerce2D && tensor.Shape(s[ax+1:]).NumElements() != 1 {
		// Move the axis last, normalize, and move it back.
		perm := make([]int, 0, r)
		for d := 0; d < r; d++ {
			if d != ax {
				perm = append(perm, d)
			}
		}
		perm = append(perm, ax)
		ts := make(tensor.Shape, r)
		for d, p := range perm {
			ts[d] = s[p]
		}
		t1, t2 := nc.temp(ts), nc.temp(ts)
		is := nc.st(nc.in[0])
		as := make([]int64, r)
		for d, p := range perm {
			as[d] = is[p]
		}
		if err := nc.copyStep(ewCopy, t1, 0, contiguous(ts), nc.in[0], 0, as, ts); err != nil {
			return err
		}
		nc.add(&gstep{kind: stSoftmax, out: t2, a: t1, b: -1, res: -1, rows: s.NumElements() / max(s[ax], 1), rowLen: s[ax], redOp: red})
		// Back: output dimension perm[d] reads t2's dimension d.
		ts2 := contiguous(ts)
		bs := make([]int64, r)
		for d, p := range perm {
			bs[p] = ts2[d]
		}
		return nc.copyStep(ewCopy, nc.out[0], 0, nc.st(nc.out[0]), t2, 0, bs, s)
	}
	l := tensor.Shape(s[ax:]).NumElements()
	in, err := nc.contig(nc.in[0])
	if err != nil {
		return err
	}
	nc.add(&gstep{kind: stSoftmax, out: nc.out[0], a: in, b: -1, res: -1, rows: s.NumElements() / max(l, 1), rowLen: l, redOp: red})
	return nil
}

func (nc *nodeCtx) layerNorm(op *ir.LayerNorm) error {
	s := nc.inShape(0)
	ax := normAxis(op.Axis, len(s))
	l := tensor.Shape(s[ax:]).NumElements()
	expand := func(i int) ([]float32, error) {
		f, err := nc.constFloats(i)
		if err != nil {
			return nil, err
		}
		if len(f) == l {
			return f, nil
		}
		if len(f) == 1 {
			out := make([]float32, l)
			for k := range out {
				out[k] = f[0]
			}
			return out, nil
		}
		return nil, refuse("LayerNorm parameter of %d values for rows of %d", len(f), l)
	}
	g, err := expand(1)
	if err != nil {
		return err
	}
	var b []float32
	if nc.has(2) {
		if b, err = expand(2); err != nil {
			return err
		}
	}
	if len(nc.out) > 1 && slices.ContainsFunc(nc.out[1:], func(o int) bool { return o >= 0 }) {
		return refuse("LayerNorm's mean and inverse deviation outputs")
	}
	in, err := nc.contig(nc.in[0])
	if err != nil {
		return err
	}
	nc.add(&gstep{kind: stLayerNorm, out: nc.out[0], a: in, b: -1, res: -1, rows: s.NumElements() / max(l, 1), rowLen: l,
		scale: g, shift: b, eps: float32(op.Epsilon)})
	return nil
}

func (nc *nodeCtx) transpose(op *ir.Transpose) error {
	s := nc.inShape(0)
	perm := op.Perm
	if perm == nil {
		for d := len(s) - 1; d >= 0; d-- {
			perm = append(perm, d)
		}
	}
	is := nc.st(nc.in[0])
	ys := nc.val(nc.out[0]).shape
	as := make([]int64, len(perm))
	for d, p := range perm {
		as[d] = is[p]
	}
	// A transpose that only relabels channels-last memory is a view.
	o := nc.val(nc.out[0])
	if sameLayout(ys, as, contiguous(ys)) {
		// Row-major as it is: no strides, so that folds and chains see
		// an ordinary value (ConvNeXt's transpose back to NCHW).
		o.kind, o.alias, o.nhwc, o.strides, o.off = gAlias, nc.in[0], false, nil, 0
		return nil
	}
	if len(ys) == 4 {
		o.nhwc = true
		if sameLayout(ys, as, nc.st(nc.out[0])) {
			o.kind, o.alias = gAlias, nc.in[0]
			return nil
		}
		o.nhwc = false
	}
	// Otherwise a strided view for a single reader: products read it
	// through cuBLAS's transpose flags and leading dimensions, attention
	// and elementwise kernels through strides, and others copy it (the
	// copy this transpose would have made).
	if nc.oneReader(0) {
		nc.view(nc.out[0], nc.in[0], as, 0)
		return nil
	}
	return nc.copyStep(ewCopy, nc.out[0], 0, contiguous(ys), nc.in[0], 0, as, ys)
}

func (nc *nodeCtx) concat(op *ir.Concat) error {
	if cg := nc.pl.groups[nc.n]; cg != nil {
		return nc.concatInPlace(cg)
	}
	ys := nc.val(nc.out[0]).shape
	ax := normAxis(op.Axis, len(ys))
	nc.outCL(nc.out[0])
	os := nc.st(nc.out[0])
	off := 0
	for k := range nc.in {
		s := nc.inShape(k)
		if err := nc.copyStep(ewCopy, nc.out[0], int64(off)*os[ax], os, nc.in[k], 0, nc.st(nc.in[k]), s); err != nil {
			return err
		}
		off += s[ax]
	}
	return nil
}

func (nc *nodeCtx) split(op *ir.Split) error {
	s := nc.inShape(0)
	ax := normAxis(op.Axis, len(s))
	is := nc.st(nc.in[0])
	off := 0
	for _, o := range nc.out {
		if o < 0 {
			continue
		}
		// Each piece is a view of the input at its offset.
		nc.view(o, nc.in[0], is, int64(off)*is[ax])
		off += nc.val(o).shape[ax]
	}
	return nil
}

func (nc *nodeCtx) slice() error {
	s := nc.inShape(0)
	r := len(s)
	starts, _, err := nc.constInts(1)
	if err != nil {
		return err
	}
	axes, ok, err := nc.constInts(3)
	if err != nil {
		return err
	}
	if !ok {
		for d := range starts {
			axes = append(axes, d)
		}
	}
	steps, ok, err := nc.constInts(4)
	if err != nil {
		return err
	}
	if !ok {
		for range starts {
			steps = append(steps, 1)
		}
	}
	is := nc.st(nc.in[0])
	as := slices.Clone(is)
	var off int64
	for k, a := range axes {
		a = normAxis(a, r)
		dim, st, step := s[a], starts[k], steps[k]
		if st < 0 {
			st += dim
		}
		if step > 0 {
			st = min(max(st, 0), dim)
		} else {
			st = min(max(st, 0), dim-1)
		}
		off += int64(st) * is[a]
		as[a] = is[a] * int64(step)
	}
	ys := nc.val(nc.out[0]).shape
	if ys.NumElements() == 0 {
		return nil
	}
	if !slices.ContainsFunc(steps, func(k int) bool { return k <= 0 }) {
		nc.view(nc.out[0], nc.in[0], as, off)
		return nil
	}
	nc.outCL(nc.out[0])
	return nc.copyStep(ewCopy, nc.out[0], 0, nc.st(nc.out[0]), nc.in[0], off, as, ys)
}

func (nc *nodeCtx) gather(op *ir.Gather) error {
	s := nc.inShape(0)
	ax := normAxis(op.Axis, len(s))
	idx, _, err := nc.constInts(1)
	if err != nil {
		return err
	}
	is := nc.st(nc.in[0])
	ishape := nc.inShape(1)
	if len(idx) > 64 {
		return refuse("Gather of %d indices (the engine gathers up to 64 as copies)", len(idx))
	}
	if len(idx) == 1 {
		// One index: a view with the axis fixed (index dimensions of one).
		i := idx[0]
		if i < 0 {
			i += s[ax]
		}
		if i < 0 || i >= s[ax] {
			return fmt.Errorf("Gather index %d out of range for %d", idx[0], s[ax])
		}
		st := append(slices.Clone(is[:ax]), make([]int64, len(ishape))...)
		nc.view(nc.out[0], nc.in[0], append(st, is[ax+1:]...), int64(i)*is[ax])
		return nil
	}
	nc.outCL(nc.out[0])
	yst := nc.st(nc.out[0])
	// One copy per index: data with the axis fixed, into the output with
	// the index dimensions fixed.
	rest := append(slices.Clone(s[:ax]), s[ax+1:]...)
	as := append(slices.Clone(is[:ax]), is[ax+1:]...)
	os := append(slices.Clone(yst[:ax]), yst[ax+len(ishape):]...)
	ist := contiguous(ishape)
	for k, i := range idx {
		if i < 0 {
			i += s[ax]
		}
		if i < 0 || i >= s[ax] {
			return fmt.Errorf("Gather index %d out of range for %d", idx[k], s[ax])
		}
		var ooff int64
		rem := int64(k)
		for d := range ishape {
			c := rem / ist[d]
			rem -= c * ist[d]
			ooff += c * yst[ax+d]
		}
		if err := nc.copyStep(ewCopy, nc.out[0], ooff, os, nc.in[0], int64(i)*is[ax], as, tensor.Shape(rest)); err != nil {
			return err
		}
	}
	return nil
}

func (nc *nodeCtx) expand() error {
	nc.outCL(nc.out[0])
	ys := nc.val(nc.out[0]).shape
	as, err := broadcastStrides(nc.inShape(0), nc.st(nc.in[0]), ys)
	if err != nil {
		return err
	}
	return nc.copyStep(ewCopy, nc.out[0], 0, nc.st(nc.out[0]), nc.in[0], 0, as, ys)
}

func (nc *nodeCtx) pad(op *ir.Pad) error {
	if op.Mode != "" && op.Mode != "constant" {
		return refuse("%s padding", op.Mode)
	}
	s := nc.inShape(0)
	r := len(s)
	pads, _, err := nc.constInts(1)
	if err != nil {
		return err
	}
	var fill float32
	if nc.has(2) {
		f, err := nc.constFloats(2)
		if err != nil {
			return err
		}
		if len(f) > 0 {
			fill = f[0]
		}
	}
	axes, ok, err := nc.constInts(3)
	if err != nil {
		return err
	}
	if !ok {
		for d := 0; d < r; d++ {
			axes = append(axes, d)
		}
	}
	begin := make([]int, r)
	for k, a := range axes {
		begin[normAxis(a, r)] = pads[k]
		if pads[k] < 0 || pads[k+len(axes)] < 0 {
			return refuse("negative padding")
		}
	}
	nc.outCL(nc.out[0])
	ys := nc.val(nc.out[0]).shape
	yst := nc.st(nc.out[0])
	if err := nc.copyStep(ewFill, nc.out[0], 0, yst, nc.in[0], 0, make([]int64, r), ys); err != nil {
		return err
	}
	nc.steps[len(nc.steps)-1].p0 = fill
	var off int64
	for d := range begin {
		off += int64(begin[d]) * yst[d]
	}
	return nc.copyStep(ewCopy, nc.out[0], off, yst, nc.in[0], 0, nc.st(nc.in[0]), s)
}

// assignSlots gives every arena value a slot: lifetimes run from the step
// defining a value to the last step reading it or a view of it (graph
// outputs to the end, the input from the start); a freed slot goes to the
// next value that fits it best, as irexec's arena does.
func (p *gplan) assignSlots() {
	last := make([]int, len(p.vals))
	first := make([]int, len(p.vals))
	for i := range last {
		last[i], first[i] = -1, -1
	}
	for s, st := range p.steps {
		for _, v := range append(slices.Clone(st.reads), st.defs...) {
			r := p.root(v)
			last[r] = max(last[r], s)
			if first[r] < 0 {
				first[r] = s
			}
		}
	}
	for _, v := range p.outputs {
		last[p.root(v)] = len(p.steps)
	}
	in := p.root(p.input)
	first[in] = -1
	if last[in] < 0 {
		last[in] = 0
	}
	var free []int
	take := func(v int) {
		val := &p.vals[v]
		if val.kind != gArena || val.slot >= 0 {
			return
		}
		need := val.elems * int64(p.elem)
		best := -1
		for k, s := range free {
			b := p.slotBytes[s]
			switch {
			case best < 0:
				best = k
			case b >= need && (p.slotBytes[free[best]] < need || b < p.slotBytes[free[best]]):
				best = k
			case b < need && p.slotBytes[free[best]] < need && b > p.slotBytes[free[best]]:
				best = k
			}
		}
		if best < 0 {
			p.slotBytes = append(p.slotBytes, need)
			val.slot = len(p.slotBytes) - 1
			return
		}
		s := free[best]
		free = append(free[:best], free[best+1:]...)
		p.slotBytes[s] = max(p.slotBytes[s], need)
		val.slot = s
	}
	take(in)
	for s, st := range p.steps {
		for _, v := range st.defs {
			take(p.root(v))
		}
		done := map[int]bool{}
		for _, v := range append(slices.Clone(st.reads), st.defs...) {
			r := p.root(v)
			if last[r] == s && !done[r] && p.vals[r].kind == gArena {
				done[r] = true
				free = append(free, p.vals[r].slot)
			}
		}
	}
}

// arenaLayout returns each slot's byte offset and the arena's size.
func (p *gplan) arenaLayout() ([]int64, int64) {
	const align = 256
	offs := make([]int64, len(p.slotBytes))
	var size int64
	for i, n := range p.slotBytes {
		offs[i] = size
		size += (n + align - 1) / align * align
	}
	return offs, max(size, align)
}

// kindCounts summarizes a plan's steps by kind, for tests and reports.
func (p *gplan) kindCounts() map[stepKind]int {
	m := map[stepKind]int{}
	for _, s := range p.steps {
		m[s.kind]++
	}
	return m
}
