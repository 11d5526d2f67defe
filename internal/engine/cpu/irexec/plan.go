// Package irexec runs a bound ir.Graph (static shapes, constants folded)
// on the CPU in float32.
//
// Compile turns the graph into a Plan: one step per node, each holding
// what its kernel needs precomputed (broadcast strides, packed weights,
// copy runs for layout ops), and an arena layout in which values whose
// lifetimes do not overlap share memory. A Plan is immutable and shared;
// an Exec is one worker's arena, scratch and thread pool over it, and Run
// performs a forward without allocating. Clone gives another worker its
// own Exec over the same Plan and weights.
//
// Weights are converted and packed once per WeightCache; plans compiled
// for several batch sizes of one graph share them.
package irexec

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"

	"goinfer/internal/engine/cpu/winograd"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// Options configure Compile.
type Options struct {
	// Threads is the parallelism of each Exec (0: GOMAXPROCS).
	Threads int
	// Weights caches converted and packed constants; plans of one graph
	// compiled for several batch sizes should share one. Nil makes a
	// private cache.
	Weights *WeightCache
	// mmOnly keeps every Gemm and MatMul on mmStep, for tests and
	// benchmarks of the dot-product path (mmGemvStep) against it.
	mmOnly bool
	// noSEScale leaves squeeze-and-excitation scales as their own steps
	// (fuseSEScale off), and noDWBlocks depthwise convolutions off the
	// blocked kernel (dwblock.go), for tests and benchmarks of the paths
	// they replace.
	noSEScale, noDWBlocks bool
	// Winograd says when 3x3 stride-1 convolutions run as Winograd
	// F(4x4, 3x3) (default: where it pays).
	Winograd winograd.Mode
	// ExpandFusion says where a pointwise expansion and the depthwise
	// convolution after it run as one step (fusePWDW).
	ExpandFusion ExpandMode
}

// Plan is a compiled graph. It is immutable and safe to share between
// Execs.
type Plan struct {
	name    string
	vals    []value
	steps   []planStep
	inputs  []int
	outputs []int
	// slotBytes are the arena slots' sizes; values of disjoint lifetimes
	// share a slot.
	slotBytes []int
	// scratch is the float32s each worker needs for its kernels' private
	// buffers; shared is the float32s one step needs for all workers.
	scratch, shared int
	// maxKK is the largest kernel area of a GEMM convolution (its masks),
	// phase the floats of a strided convolution's phase planes, sharedB
	// the floats of B a convolution packs once for all its tasks.
	maxKK, phase, sharedB int
	// wino and winoWorker are the floats of the largest Winograd
	// workspaces, shared and per worker.
	wino, winoWorker int
	winoMode         winograd.Mode
	threads          int
	expandMode       ExpandMode
	weights          *WeightCache
}

// planStep is a step and the node it came from, for errors.
type planStep struct {
	node string
	s    step
}

// step is one compiled node. Steps are shared by every Exec of a plan, so
// run keeps its per-call state in x.
type step interface {
	run(x *Exec) error
}

// emptyStep stands for a node whose outputs have no elements.
type emptyStep struct{}

func (emptyStep) run(*Exec) error { return nil }

// valueKind says where a value's bytes live.
type valueKind uint8

const (
	kindArena valueKind = iota // a slot of the Exec's arena
	kindConst                  // the plan's constant bytes
	kindAlias                  // the bytes of another value (a view op)
)

// value is the plan's record of one graph value.
type value struct {
	name   string
	dtype  tensor.DType
	shape  tensor.Shape
	elems  int
	kind   valueKind
	slot   int            // kindArena
	cnst   []byte         // kindConst, aligned for its dtype, when read at run time
	ct     *tensor.Tensor // kindConst: the constant
	alias  int            // kindAlias: the value whose bytes these are
	isOut  bool
	isIn   bool
	nbytes int
}

// unsupportedError lists every op kind (and dtype) Compile cannot run.
type unsupportedError struct {
	graph string
	first map[string]string // op kind -> first node and reason
}

func (e *unsupportedError) Error() string {
	kinds := make([]string, 0, len(e.first))
	for k := range e.first {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var b strings.Builder
	fmt.Fprintf(&b, "irexec: graph %q has ops the cpu executor cannot run:", e.graph)
	for _, k := range kinds {
		fmt.Fprintf(&b, " %s (first at %s);", k, e.first[k])
	}
	return strings.TrimSuffix(b.String(), ";")
}

// ErrUnsupported is wrapped by Compile's error when the graph holds ops or
// dtypes the executor lacks.
var ErrUnsupported = fmt.Errorf("unsupported by the cpu executor")

// Unwrap makes the error both ErrUnsupported and ir.ErrUnsupported, which
// callers above the engines test for "valid, but not runnable here".
func (e *unsupportedError) Unwrap() []error { return []error{ErrUnsupported, ir.ErrUnsupported} }

// Compile builds a plan for g, which must be bound (ir.Bind): every shape
// static. It fails with one error naming every unsupported op kind and the
// first node of each.
func Compile(ctx context.Context, g *ir.Graph, opts Options) (*Plan, error) {
	if g == nil {
		return nil, fmt.Errorf("irexec: Compile of a nil graph")
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("irexec: %w", err)
	}
	if opts.Threads < 0 {
		return nil, fmt.Errorf("irexec: Threads %d must be 0 (GOMAXPROCS) or positive", opts.Threads)
	}
	if opts.Threads == 0 {
		opts.Threads = runtime.GOMAXPROCS(0)
	}
	if opts.Weights == nil {
		opts.Weights = NewWeightCache()
	}
	c := &compiler{
		p:        &Plan{name: g.Name, threads: opts.Threads, weights: opts.Weights, winoMode: opts.Winograd, expandMode: opts.ExpandFusion},
		index:    map[*ir.Value]int{},
		bad:      map[string]string{},
		gemv:     !opts.mmOnly,
		seScale:  !opts.noSEScale,
		dwBlocks: !opts.noDWBlocks,
	}
	for _, v := range g.Inputs {
		i, err := c.value(v)
		if err != nil {
			return nil, err
		}
		c.p.vals[i].isIn = true
		c.p.inputs = append(c.p.inputs, i)
	}
	for _, n := range g.Nodes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := c.node(n); err != nil {
			return nil, err
		}
	}
	if len(c.bad) > 0 {
		return nil, &unsupportedError{graph: g.Name, first: c.bad}
	}
	for _, v := range g.Outputs {
		i, err := c.value(v)
		if err != nil {
			return nil, err
		}
		c.p.vals[i].isOut = true
		c.p.outputs = append(c.p.outputs, i)
	}
	c.fuseStemPool()
	c.fuseSEScale()
	c.fuseDWPool()
	c.fusePWDW()
	c.sharePhases()
	if err := c.materialize(); err != nil {
		return nil, err
	}
	c.p.assignSlots(c.uses)
	return c.p, nil
}

// compiler is Compile's state.
type compiler struct {
	p     *Plan
	index map[*ir.Value]int
	// uses lists, per step, the values it reads and defines (liveness).
	uses []stepUses
	bad  map[string]string
	// gemv lets few-row products of constant weights run as dot products.
	gemv bool
	// seScale and dwBlocks are Options.noSEScale and noDWBlocks, negated.
	seScale, dwBlocks bool
}

// stepUses are the values a step reads and defines.
type stepUses struct{ reads, defs []int }

// materialize gives the constants that steps read at run time (or that
// are graph outputs) aligned bytes from the weight cache; constants only
// packed at compile time keep no second copy.
func (c *compiler) materialize() error {
	need := func(v int) error {
		r := &c.p.vals[c.p.root(v)]
		if r.kind != kindConst || r.cnst != nil {
			return nil
		}
		b, err := c.p.weights.bytes(r.ct)
		if err != nil {
			return fmt.Errorf("irexec: constant %q: %w", r.name, err)
		}
		r.cnst = b
		return nil
	}
	for _, u := range c.uses {
		for _, v := range u.reads {
			if err := need(v); err != nil {
				return err
			}
		}
	}
	for _, v := range c.p.outputs {
		if err := need(v); err != nil {
			return err
		}
	}
	return nil
}

// value returns v's index in the plan, adding it on first sight.
func (c *compiler) value(v *ir.Value) (int, error) {
	if i, ok := c.index[v]; ok {
		return i, nil
	}
	if err := v.Type.Shape.Validate(); err != nil {
		return 0, fmt.Errorf("irexec: value %q: %w", v.Name, err)
	}
	for _, d := range v.Type.Shape {
		if d < 0 {
			return 0, fmt.Errorf("irexec: value %q has type %s: the graph is not bound (ir.Bind)", v.Name, v.Type)
		}
	}
	if v.Type.DType.Size() == 0 {
		return 0, fmt.Errorf("irexec: value %q has no dtype", v.Name)
	}
	val := value{
		name: v.Name, dtype: v.Type.DType, shape: v.Type.Shape.Clone(),
		elems: v.Type.Shape.NumElements(), slot: -1, alias: -1,
	}
	val.nbytes = val.elems * val.dtype.Size()
	if v.Const != nil {
		if err := v.Const.Validate(); err != nil {
			return 0, fmt.Errorf("irexec: constant %q: %w", v.Name, err)
		}
		if v.Const.DType != v.Type.DType || !v.Const.Shape.Equal(v.Type.Shape) {
			return 0, fmt.Errorf("irexec: constant %q holds %s%v but its value is typed %s", v.Name, v.Const.DType, v.Const.Shape, v.Type)
		}
		val.kind, val.ct = kindConst, v.Const
	}
	c.p.vals = append(c.p.vals, val)
	i := len(c.p.vals) - 1
	c.index[v] = i
	return i, nil
}

// node compiles one node into a step, or records why it cannot.
func (c *compiler) node(n *ir.Node) error {
	in := make([]int, len(n.Inputs))
	for i, v := range n.Inputs {
		in[i] = -1
		if v == nil {
			continue
		}
		j, err := c.value(v)
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		in[i] = j
	}
	out := make([]int, len(n.Outputs))
	for i, v := range n.Outputs {
		out[i] = -1
		if v == nil {
			continue
		}
		j, err := c.value(v)
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		out[i] = j
	}
	nc := &nodeCtx{c: c, n: n, in: in, out: out}
	s, err := build(nc)
	if err != nil {
		var u *unsupported
		if asUnsupported(err, &u) {
			key := n.Op.Kind()
			if u.key != "" {
				key += " " + u.key
			}
			if _, seen := c.bad[key]; !seen {
				c.bad[key] = fmt.Sprintf("%s: %s", n, u.msg)
			}
			return nil
		}
		return fmt.Errorf("irexec: %s: %w", n, err)
	}
	if s == nil {
		return nil // a view: the output is the input's bytes
	}
	var reads []int
	for i, v := range in {
		if v >= 0 && !nc.compileTime[i] {
			reads = append(reads, v)
		}
	}
	defs := slices.DeleteFunc(slices.Clone(out), func(i int) bool { return i < 0 })
	empty := true
	for _, d := range defs {
		empty = empty && c.p.vals[d].elems == 0
	}
	if empty {
		s = emptyStep{} // nothing to compute; kernels need not handle it
	}
	c.p.steps = append(c.p.steps, planStep{node: n.String(), s: s})
	c.uses = append(c.uses, stepUses{reads: reads, defs: defs})
	return nil
}

// nodeCtx is what a step builder sees of its node.
type nodeCtx struct {
	c       *compiler
	n       *ir.Node
	in, out []int
	// compileTime marks the constant inputs the step consumed while it was
	// built (packed weights, folded statistics), which it does not read
	// at run time.
	compileTime map[int]bool
}

// consumed marks constant input i as used at compile time only.
func (nc *nodeCtx) consumed(i int) {
	if nc.compileTime == nil {
		nc.compileTime = map[int]bool{}
	}
	nc.compileTime[i] = true
}

// inVal returns input i's plan record, nil when absent.
func (nc *nodeCtx) inVal(i int) *value {
	if i >= len(nc.in) || nc.in[i] < 0 {
		return nil
	}
	return &nc.c.p.vals[nc.in[i]]
}

// outVal returns output i's plan record, nil when absent.
func (nc *nodeCtx) outVal(i int) *value {
	if i >= len(nc.out) || nc.out[i] < 0 {
		return nil
	}
	return &nc.c.p.vals[nc.out[i]]
}

// needScratch and needShared record a step's buffer needs in float32s.
func (nc *nodeCtx) needScratch(n int) { nc.c.p.scratch = max(nc.c.p.scratch, n) }
func (nc *nodeCtx) needShared(n int)  { nc.c.p.shared = max(nc.c.p.shared, n) }

// constFloats returns input i's data as float32 when it is a constant.
func (nc *nodeCtx) constFloats(i int) ([]float32, bool, error) {
	v := nc.n.Input(i)
	if v == nil || v.Const == nil {
		return nil, false, nil
	}
	nc.consumed(i)
	f, err := nc.c.p.weights.floats(v.Const)
	return f, true, err
}

// unsupported is a builder's refusal: valid semantics the executor lacks.
type unsupported struct{ key, msg string }

func (u *unsupported) Error() string { return u.msg }

func unsupportedf(key, format string, args ...any) error {
	return &unsupported{key: key, msg: fmt.Sprintf(format, args...)}
}

func asUnsupported(err error, u **unsupported) bool {
	if e, ok := err.(*unsupported); ok {
		*u = e
		return true
	}
	return false
}

// Inputs returns the graph inputs' names, dtypes and shapes.
func (p *Plan) Inputs() []ir.NamedType { return p.signature(p.inputs) }

// Outputs returns the graph outputs' names, dtypes and shapes.
func (p *Plan) Outputs() []ir.NamedType { return p.signature(p.outputs) }

func (p *Plan) signature(idx []int) []ir.NamedType {
	out := make([]ir.NamedType, len(idx))
	for i, j := range idx {
		v := &p.vals[j]
		out[i] = ir.NamedType{Name: v.name, Type: ir.Type{DType: v.dtype, Shape: v.shape.Clone()}}
	}
	return out
}

// Weights returns the plan's weight cache.
func (p *Plan) Weights() *WeightCache { return p.weights }

// Steps is the number of kernels a forward runs.
func (p *Plan) Steps() int { return len(p.steps) }
