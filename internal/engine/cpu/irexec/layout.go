package irexec

import (
	"fmt"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// buildView makes output 0 share input 0's bytes (Reshape, Flatten,
// Squeeze, Unsqueeze, Identity, inference Dropout): no step runs.
func buildView(nc *nodeCtx) (step, error) {
	src, dst := nc.inVal(0), nc.outVal(0)
	if src.nbytes != dst.nbytes {
		return nil, fmt.Errorf("view of %d bytes as %s%v (%d bytes)", src.nbytes, dst.dtype, dst.shape, dst.nbytes)
	}
	for i := 1; i < len(nc.out); i++ {
		if nc.out[i] >= 0 {
			return nil, unsupportedf("with extra outputs", "output %d (%s) is not computed by the executor", i, nc.outVal(i).name)
		}
	}
	dst.kind, dst.alias = kindAlias, nc.in[0]
	return nil, nil
}

// run is a stretch of an output copied from one input: n elements from
// element src of input k (k < 0: the fill value), written from dst on.
type run struct{ k, src, n, dst int32 }

// runsStep computes outputs that are fixed rearrangements of their data
// inputs (Slice, Pad, Tile, Concat, Split, DepthToSpace, SpaceToDepth,
// Gather and GatherElements with constant indices) as lists of copies.
// The lists come from the op's own reference evaluation applied to the
// inputs' element indices, so the executor cannot disagree with ir on
// which element goes where.
type runsStep struct {
	srcs []int // data inputs
	outs []runsOut
	es   int
	fill []byte // es bytes: Pad's constant value, read at run time when fillV >= 0
	// fillV is the value holding Pad's constant, or -1 (zero fill).
	fillV int
}

type runsOut struct {
	s    *runsStep
	dst  int
	runs []run
}

// runsData are the input positions each op rearranges; the others must be
// constants.
func runsData(op ir.Op, inputs int) []int {
	switch op.(type) {
	case *ir.Concat:
		d := make([]int, inputs)
		for i := range d {
			d[i] = i
		}
		return d
	}
	return []int{0}
}

func buildRuns(nc *nodeCtx) (step, error) {
	n := nc.n
	data := runsData(n.Op, len(n.Inputs))
	isData := map[int]bool{}
	for _, i := range data {
		isData[i] = true
	}
	s := &runsStep{es: nc.inVal(data[0]).dtype.Size(), fillV: -1}
	args := make([]*ir.Array, len(n.Inputs))
	base := make([]int, len(data))
	next := 0
	for j, i := range data {
		v := nc.inVal(i)
		if v.elems+next >= 1<<31-1 {
			return nil, unsupportedf("over 2^31 elements", "inputs of over 2^31 elements")
		}
		base[j] = next
		a := ir.NewArray(tensor.Int64, v.shape)
		for e := range a.Data {
			a.Data[e] = float64(next + e)
		}
		// A gap of one index keeps runs from crossing inputs.
		next += v.elems + 1
		args[i] = a
		s.srcs = append(s.srcs, nc.in[i])
	}
	if _, pad := n.Op.(*ir.Pad); pad && len(args) < 3 {
		args = append(args, nil)
	}
	for i := range args {
		v := n.Input(i)
		if _, pad := n.Op.(*ir.Pad); pad && i == 2 && v == nil {
			args[i] = ir.Scalar(tensor.Int64, -1) // zero fill
			continue
		}
		if isData[i] || v == nil {
			continue
		}
		if _, pad := n.Op.(*ir.Pad); pad && i == 2 {
			// Pad's constant value: -1 marks the filled elements.
			args[i] = ir.Scalar(tensor.Int64, -1)
			s.fillV = nc.in[i]
			continue
		}
		if v.Const == nil {
			return nil, unsupportedf("with a runtime input "+fmt.Sprint(i), "input %d (%s) is computed at run time; the executor needs it constant", i, v.Name)
		}
		a, err := ir.ArrayFromTensor(v.Const)
		if err != nil {
			return nil, err
		}
		args[i] = a
		nc.consumed(i)
	}
	res, err := n.Op.Eval(args)
	if err != nil {
		return nil, fmt.Errorf("mapping elements: %w", err)
	}
	for o, dst := range nc.out {
		if dst < 0 {
			continue
		}
		if o >= len(res) || res[o].Shape.NumElements() != nc.outVal(o).elems {
			return nil, fmt.Errorf("mapping elements: output %d does not match its type %s%v", o, nc.outVal(o).dtype, nc.outVal(o).shape)
		}
		var runs []run
		for e, f := range res[o].Data {
			src, k := int(f), int32(-1)
			if src >= 0 {
				for j := range data {
					if src >= base[j] {
						k = int32(j)
					}
				}
				src -= base[k]
			}
			if r := len(runs) - 1; r >= 0 && runs[r].k == k && (k < 0 || int(runs[r].src+runs[r].n) == src) {
				runs[r].n++
				continue
			}
			runs = append(runs, run{k: k, src: int32(src), n: 1, dst: int32(e)})
		}
		s.outs = append(s.outs, runsOut{s: s, dst: dst, runs: runs})
	}
	return s, nil
}

func (s *runsStep) run(x *Exec) error {
	for o := range s.outs {
		x.parRange(&s.outs[o], len(s.outs[o].runs), 64)
	}
	return nil
}

func (out *runsOut) rng(x *Exec, _, lo, hi int) {
	s := out.s
	es := s.es
	dst := x.view(out.dst)
	var fill []byte
	if s.fillV >= 0 {
		fill = x.view(s.fillV)[:es]
	}
	for _, r := range out.runs[lo:hi] {
		d := dst[int(r.dst)*es : int(r.dst+r.n)*es]
		if r.k < 0 {
			if fill == nil {
				clear(d)
				continue
			}
			for i := 0; i < len(d); i += es {
				copy(d[i:i+es], fill)
			}
			continue
		}
		src := x.view(s.srcs[r.k])
		copy(d, src[int(r.src)*es:])
	}
}

// stridedStep copies its input into the output along arbitrary strides:
// Transpose (permuted strides) and Expand (zero strides where broadcast).
type stridedStep struct {
	src, dst int
	es       int
	it       *rowIter
}

func newStrided(nc *nodeCtx, str []int) *stridedStep {
	out := nc.outVal(0)
	shape, ss := collapse(out.shape, str)
	return &stridedStep{src: nc.in[0], dst: nc.out[0], es: out.dtype.Size(), it: newRowIter(shape, ss)}
}

func buildTranspose(nc *nodeCtx) (step, error) {
	op := nc.n.Op.(*ir.Transpose)
	in := nc.inVal(0)
	r := len(in.shape)
	perm := make([]int, r)
	for i := range perm {
		if op.Perm == nil {
			perm[i] = r - 1 - i
		} else {
			perm[i] = (op.Perm[i] + r) % r
		}
	}
	// A permutation that keeps the dimensions of more than one element in
	// order moves only size-1 dimensions: the bytes are the same, and the
	// output is a view (ViT's tokens-first transposes at batch 1).
	last, moves := -1, false
	for _, a := range perm {
		if in.shape[a] == 1 {
			continue
		}
		moves = moves || a < last
		last = a
	}
	if !moves {
		return buildView(nc)
	}
	inStr := stridesOf(in.shape)
	str := make([]int, r)
	for i, a := range perm {
		str[i] = inStr[a]
	}
	return newStrided(nc, str), nil
}

func buildExpand(nc *nodeCtx) (step, error) {
	return newStrided(nc, broadcastStrides(nc.inVal(0).shape, nc.outVal(0).shape)), nil
}

func (s *stridedStep) run(x *Exec) error {
	x.parRange(s, s.it.rows, max(1, 4096/s.it.inner))
	return nil
}

func (s *stridedStep) rng(x *Exec, _, lo, hi int) {
	src, dst := x.view(s.src), x.view(s.dst)
	it, es := s.it, s.es
	n, st := it.inner, it.in[0]
	for row := lo; row < hi; row++ {
		off := it.offset(0, row)
		d := dst[row*n*es : (row+1)*n*es]
		switch {
		case st == 1:
			copy(d, src[off*es:(off+n)*es])
		case es == 4:
			s4, d4 := i32(src), i32(d)
			for i := range d4 {
				d4[i] = s4[off+i*st]
			}
		case es == 8:
			s8, d8 := i64(src), i64(d)
			for i := range d8 {
				d8[i] = s8[off+i*st]
			}
		default:
			for i := 0; i < n; i++ {
				copy(d[i*es:(i+1)*es], src[(off+i*st)*es:])
			}
		}
	}
}

// gatherStep is Gather with indices computed at run time: outer x indices
// x inner blocks copied from data.
type gatherStep struct {
	data, idx, dst int
	outer, inner   int
	axisLen, nIdx  int
	es             int
	idxDType       tensor.DType
}

func buildGather(nc *nodeCtx) (step, error) {
	if nc.n.Inputs[1].Const != nil {
		return buildRuns(nc)
	}
	op := nc.n.Op.(*ir.Gather)
	data, idx := nc.inVal(0), nc.inVal(1)
	axis := op.Axis
	if axis < 0 {
		axis += len(data.shape)
	}
	if axis < 0 || axis >= len(data.shape) {
		return nil, fmt.Errorf("axis %d out of range for %v", op.Axis, data.shape)
	}
	s := &gatherStep{data: nc.in[0], idx: nc.in[1], dst: nc.out[0], axisLen: data.shape[axis],
		nIdx: idx.elems, es: data.dtype.Size(), idxDType: idx.dtype, outer: 1, inner: 1}
	if s.idxDType != tensor.Int64 && s.idxDType != tensor.Int32 {
		return nil, fmt.Errorf("indices are %s, want int64 or int32", s.idxDType)
	}
	for _, d := range data.shape[:axis] {
		s.outer *= d
	}
	for _, d := range data.shape[axis+1:] {
		s.inner *= d
	}
	return s, nil
}

func (s *gatherStep) index(x *Exec, i int) (int, error) {
	var j int
	if s.idxDType == tensor.Int64 {
		j = int(i64(x.view(s.idx))[i])
	} else {
		j = int(i32(x.view(s.idx))[i])
	}
	if j < -s.axisLen || j >= s.axisLen {
		return 0, fmt.Errorf("index %d is out of range [%d, %d)", j, -s.axisLen, s.axisLen)
	}
	if j < 0 {
		j += s.axisLen
	}
	return j, nil
}

func (s *gatherStep) run(x *Exec) error {
	for i := 0; i < s.nIdx; i++ {
		if _, err := s.index(x, i); err != nil {
			return err
		}
	}
	x.parRange(s, s.outer*s.nIdx, max(1, 4096/max(1, s.inner)))
	return nil
}

func (s *gatherStep) rng(x *Exec, _, lo, hi int) {
	src, dst := x.view(s.data), x.view(s.dst)
	blk := s.inner * s.es
	for r := lo; r < hi; r++ {
		o, i := r/s.nIdx, r%s.nIdx
		j, _ := s.index(x, i) // checked in run
		copy(dst[r*blk:(r+1)*blk], src[(o*s.axisLen+j)*blk:])
	}
}

// gatherElementsStep is GatherElements with indices computed at run time:
// output element c reads data at c with its axis coordinate replaced by
// the index there.
type gatherElementsStep struct {
	data, idx, dst int
	axis           int
	shape          []int // the indices' (and output's) shape
	dataStr        []int
	axisLen, es    int
	idxDType       tensor.DType
}

func buildGatherElements(nc *nodeCtx) (step, error) {
	if nc.n.Inputs[1].Const != nil {
		return buildRuns(nc)
	}
	op := nc.n.Op.(*ir.GatherElements)
	data, idx := nc.inVal(0), nc.inVal(1)
	axis := op.Axis
	if axis < 0 {
		axis += len(data.shape)
	}
	if axis < 0 || axis >= len(data.shape) {
		return nil, fmt.Errorf("axis %d out of range for %v", op.Axis, data.shape)
	}
	if idx.dtype != tensor.Int64 && idx.dtype != tensor.Int32 {
		return nil, fmt.Errorf("indices are %s, want int64 or int32", idx.dtype)
	}
	return &gatherElementsStep{data: nc.in[0], idx: nc.in[1], dst: nc.out[0], axis: axis, shape: idx.shape,
		dataStr: stridesOf(data.shape), axisLen: data.shape[axis], es: data.dtype.Size(), idxDType: idx.dtype}, nil
}

func (s *gatherElementsStep) index(x *Exec, e int) int {
	if s.idxDType == tensor.Int64 {
		return int(i64(x.view(s.idx))[e])
	}
	return int(i32(x.view(s.idx))[e])
}

func (s *gatherElementsStep) run(x *Exec) error {
	n := x.p.vals[s.idx].elems
	for e := 0; e < n; e++ {
		if j := s.index(x, e); j < -s.axisLen || j >= s.axisLen {
			return fmt.Errorf("index %d is out of range [%d, %d)", j, -s.axisLen, s.axisLen)
		}
	}
	x.parRange(s, n, eltGrain)
	return nil
}

func (s *gatherElementsStep) rng(x *Exec, _, lo, hi int) {
	src, dst := x.view(s.data), x.view(s.dst)
	es := s.es
	for e := lo; e < hi; e++ {
		off, r := 0, e
		for d := len(s.shape) - 1; d >= 0; d-- {
			c := r % s.shape[d]
			r /= s.shape[d]
			if d == s.axis {
				c = s.index(x, e)
				if c < 0 {
					c += s.axisLen
				}
			}
			off += c * s.dataStr[d]
		}
		copy(dst[e*es:(e+1)*es], src[off*es:(off+1)*es])
	}
}
