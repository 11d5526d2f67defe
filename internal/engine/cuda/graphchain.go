package cuda

import (
	"math"
	"slices"
	"sort"
)

// Elementwise chains. A run of elementwise and broadcast ops whose
// intermediate values have one consumer each (ConvNeXt's layer scale and
// residual add after a transpose, a bias add before an activation) reads
// and writes memory once per op; as one chain step it does so once: each
// element is loaded, passed through the ops in turn (each binary op
// loading its own broadcast operand) and stored. graph.cu's ew_chain
// interprets the op list.

// maxChain is the ops one chain step applies (graph.cu's MAXOPS).
const maxChain = 4

// chainMetaLen is the length of a chain's index description: shape and
// the strides of out, a and each op's operand (maxDims each), then the op
// count, the op codes and each op's two parameters (float32 bits).
const chainMetaLen = (3+maxChain)*maxDims + 1 + 3*maxChain

// chainOp is one op of a chain: code, operand (a value, -1 for unary ops)
// at logical strides over the chain's shape, and parameters.
type chainOp struct {
	op     int
	b      int
	bOff   int64
	bst    []int64
	p0, p1 float32
}

// commutative reports whether binary op code's operands may swap.
func commutative(code int) bool {
	return code == ewAdd || code == ewMul || code == ewMax || code == ewMin
}

// fuseChain appends the node's elementwise op (binary: input 0 op input 1)
// to the step computing its running input when that input has no other
// consumer: the step moves to this node's place in the order (its inputs
// are values no later step overwrites) and now defines the node's output.
func (nc *nodeCtx) fuseChain(code int, p0, p1 float32, binary bool) bool {
	pl, p := nc.pl, nc.pl.p
	if !pl.opts.chains || len(nc.out) != 1 {
		return false
	}
	y := nc.out[0]
	cands := []int{0}
	if binary && commutative(code) {
		cands = append(cands, 1)
	}
	for _, k := range cands {
		x := nc.in[k]
		if x < 0 || p.isView(x) || p.isView(y) || nc.val(x).kind != gArena || !nc.val(x).shape.Equal(nc.val(y).shape) || pl.uses[nc.n.Inputs[k]] != 1 {
			continue
		}
		s := pl.defs[x]
		if s == nil || (s.kind != stEW && s.kind != stChain) || s.out != x || s.a == x || s.b == x || s.outOff != 0 ||
			s.n != nc.val(x).elems || s.op == ewFill || len(s.chain) >= maxChain || s.lshape == nil {
			continue
		}
		op := chainOp{op: code, b: -1, p0: p0, p1: p1}
		if binary {
			b := nc.in[1-k]
			bst, err := broadcastStrides(nc.val(b).shape, nc.st(b), nc.val(y).shape)
			if err != nil {
				continue
			}
			op.b, op.bst = b, bst
		}
		chain := s.chain
		if s.kind == stEW {
			chain = []chainOp{{op: s.op, b: s.b, bOff: s.bOff, bst: s.lbs, p0: s.p0, p1: s.p1}}
		}
		nc.val(y).nhwc = nc.val(x).nhwc
		trial := *s
		trial.chain, trial.los = append(slices.Clone(chain), op), slices.Clone(nc.st(y))
		m, err := chainMeta(&trial)
		if err != nil {
			nc.val(y).nhwc = false
			continue
		}
		s.kind, s.chain, s.los, s.cmeta, s.out = stChain, trial.chain, trial.los, m, y
		delete(pl.defs, x)
		// Moved here: its new operand may be computed after it.
		nc.moveHere(s)
		return true
	}
	return false
}

// chainMeta is a chain step's index description (graph.cu's ew_chain),
// its dimensions merged where every operand allows.
func chainMeta(s *gstep) ([]int32, error) {
	type dim struct {
		n  int64
		st []int64 // out, a, each op's operand
	}
	nops := len(s.chain)
	var all []dim
	for d := range s.lshape {
		if s.lshape[d] == 1 {
			continue
		}
		x := dim{n: int64(s.lshape[d]), st: []int64{s.los[d], s.las[d]}}
		for _, c := range s.chain {
			var b int64
			if c.bst != nil {
				b = c.bst[d]
			}
			x.st = append(x.st, b)
		}
		all = append(all, x)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].st[0] > all[j].st[0] })
	var dims []dim
	for _, x := range all {
		if k := len(dims) - 1; k >= 0 {
			p, ok := dims[k], true
			for o := range x.st {
				ok = ok && p.st[o] == x.st[o]*x.n
			}
			if ok {
				dims[k] = dim{n: p.n * x.n, st: x.st}
				continue
			}
		}
		dims = append(dims, x)
	}
	if len(dims) > maxDims {
		return nil, refuse("a chain of %d dimensions (the kernel indexes %d)", len(dims), maxDims)
	}
	m := make([]int32, chainMetaLen)
	off := maxDims - len(dims)
	for d := 0; d < maxDims; d++ {
		m[d] = 1
	}
	for k, x := range dims {
		if x.n > math.MaxInt32 {
			return nil, refuse("a dimension beyond 2^31")
		}
		m[off+k] = int32(x.n)
		for o, st := range x.st {
			if st > math.MaxInt32 {
				return nil, refuse("a stride beyond 2^31")
			}
			m[(1+o)*maxDims+off+k] = int32(st)
		}
	}
	base := (3 + maxChain) * maxDims
	m[base] = int32(nops)
	for k, c := range s.chain {
		m[base+1+k] = int32(c.op)
		m[base+1+maxChain+k] = int32(math.Float32bits(c.p0))
		m[base+1+2*maxChain+k] = int32(math.Float32bits(c.p1))
	}
	return m, nil
}
