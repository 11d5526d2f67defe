package irexec

import (
	"fmt"

	"goinfer/internal/engine/cpu/gemm"
	"goinfer/internal/engine/cpu/vec"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// Convolutions with more than one input channel per group are GEMMs (M =
// output channels of a group, N = output pixels of all images, K = input
// channels of the group x kernel area) over an implicit im2col matrix that
// is never built: each task packs its K-blocks of B straight from the
// activations with masked loads (gemm.PackGather). All groups of a grouped
// convolution are tasks of one parallel job. One task computes an
// (M-range, N-range) block of one group: it packs a K-block of B for its
// N-range and sweeps A's MC-row blocks over it, one NR-wide B micro-panel
// at a time. Depthwise convolutions (one input channel per group) have
// their own direct kernel (depthwise.go).
const (
	ncMax = 256
	mcMax = 192 // a multiple of gemm.MR
	// tasksPerThread is how many tasks per worker a parallel op aims for,
	// so that dynamic scheduling evens out uneven task costs.
	tasksPerThread = 4
	// maxKernel bounds each kernel dimension, so that per-panel row and
	// column masks live in fixed arrays.
	maxKernel = 16
	// maxSharedB bounds the floats of B a convolution packs once for all
	// its M-range tasks.
	maxSharedB = 2 << 20
)

// convGeom is a 2-D convolution's geometry (1-D ones have H = 1).
type convGeom struct {
	n, inC, outC, groups int
	ih, iw, oh, ow       int
	kh, kw               int
	sh, sw               int
	dh, dw               int
	pt, pl               int // top and left padding; the output size implies the rest
	icg, ocg             int
}

// convGeometry reads a Conv's attributes against its input and weight
// shapes, resolving auto_pad.
func convGeometry(op *ir.Conv, x, w, y *value) (convGeom, error) {
	var g convGeom
	rank := len(x.shape)
	if rank != 3 && rank != 4 {
		return g, unsupportedf(fmt.Sprintf("%d-D", rank-2), "%d-D convolution (the executor runs 1-D and 2-D)", rank-2)
	}
	sp := rank - 2
	get := func(v []int, i, def int) int {
		if i < len(v) {
			return v[i]
		}
		return def
	}
	g.n, g.inC, g.outC = x.shape[0], x.shape[1], w.shape[0]
	g.groups = max(op.Group, 1)
	g.icg, g.ocg = g.inC/g.groups, g.outC/g.groups
	g.ih, g.iw, g.oh, g.ow = 1, x.shape[rank-1], 1, y.shape[rank-1]
	g.kh, g.kw = 1, w.shape[rank-1]
	g.sh, g.sw, g.dh, g.dw = 1, get(op.Strides, sp-1, 1), 1, get(op.Dilations, sp-1, 1)
	pads := op.Pads
	if op.AutoPad != "" && op.AutoPad != "NOTSET" {
		pads = autoPads(op.AutoPad, x.shape[2:], w.shape[2:], op.Strides, op.Dilations)
	}
	g.pl = get(pads, sp-1, 0)
	if sp == 2 {
		g.ih, g.oh, g.kh = x.shape[2], y.shape[2], w.shape[2]
		g.sh, g.dh = get(op.Strides, 0, 1), get(op.Dilations, 0, 1)
		g.pt = get(pads, 0, 0)
	}
	if g.kh > maxKernel || g.kw > maxKernel {
		return g, unsupportedf("kernel over 16", "kernel %dx%d is larger than the executor's %d", g.kh, g.kw, maxKernel)
	}
	if g.groups*g.icg != g.inC || g.groups*g.ocg != g.outC || w.shape[1] != g.icg {
		return g, fmt.Errorf("input %v and weight %v do not fit group %d", x.shape, w.shape, g.groups)
	}
	return g, nil
}

// autoPads resolves ONNX's auto_pad into begin-then-end pads.
func autoPads(mode string, in, k tensor.Shape, strides, dil []int) []int {
	sp := len(in)
	pads := make([]int, 2*sp)
	if mode == "VALID" {
		return pads
	}
	for i := 0; i < sp; i++ {
		s, d := 1, 1
		if i < len(strides) {
			s = strides[i]
		}
		if i < len(dil) {
			d = dil[i]
		}
		out := (in[i] + s - 1) / s
		total := max(0, (out-1)*s+(k[i]-1)*d+1-in[i])
		small, big := total/2, total-total/2
		if mode == "SAME_LOWER" {
			pads[i], pads[i+sp] = big, small
		} else {
			pads[i], pads[i+sp] = small, big
		}
	}
	return pads
}

// convLayout is how a convolution reads its implicit im2col matrix. Output
// pixel n = oy*OW + ox; in the two contiguous layouts B's row for kernel
// position (ky, kx) is the input read at a constant shift from n, so a
// panel row is NR consecutive values, loaded under a padding mask.
type convLayout uint8

const (
	// layoutShift: stride 1 and the input as wide as the output (a "same"
	// convolution), so input pixel (oy+ky*dh-pt, ox+kx*dw-pl) is at flat
	// index n + (ky*dh-pt)*IW + kx*dw-pl.
	layoutShift convLayout = iota
	// layoutPhases: strides > 1, no dilation, and ceil(IW/SW) == OW. The
	// input is first split into SH*SW phase planes (rows py::SH, columns
	// px::SW), where a strided window becomes a shift, as in layoutShift.
	layoutPhases
	// layoutGather: anything else; each lane is gathered.
	layoutGather
)

// convStep is a convolution with its weights packed per group.
type convStep struct {
	convGeom
	src, res, dst int // res is -1 without a residual input
	// scale, when not -1, is a per-channel factor of the input (an SE
	// block's, see fuseSEScale), applied to the weights' columns, or with
	// scaleB to the rows of B as they are packed.
	scale  int
	scaleB bool
	bias   []float32
	act    act
	a      []*gemm.PackedA // per group: ocg x icg*kh*kw
	layout convLayout
	// ph, pw are the phase planes' height and width (layoutPhases), and
	// usedPhase says which of the phases the kernel reads.
	ph, pw    int
	usedPhase []bool
	// kOff and kMask are, per row of B, the offset PackGather adds to each
	// lane and the index of the row's kernel-position mask.
	kOff, kMask []int32
	// direct says whole panels of B are read in place from the input
	// (a pointwise convolution on a CPU whose kernel reads strided B).
	direct bool
	// phasesShared says the step before left this input's phase planes
	// in the phase buffer (see sharePhases).
	phasesShared bool
}

func buildConv(nc *nodeCtx) (step, error) {
	op := any(nc.n.Op).(*ir.Conv)
	x, w, y := nc.inVal(0), nc.inVal(1), nc.outVal(0)
	if x.dtype != tensor.Float32 {
		return nil, unsupportedf(x.dtype.String(), "Conv of %s", x.dtype)
	}
	g, err := convGeometry(op, x, w, y)
	if err != nil {
		return nil, err
	}
	ac, ok := newAct(op.Epilogue)
	if !ok {
		return nil, unsupportedf(fmt.Sprint("activation ", op.Epilogue.Act), "epilogue activation %d", op.Epilogue.Act)
	}
	var bias []float32
	if b := nc.inVal(2); b != nil && b.kind == kindConst {
		bias, _, err = nc.constFloats(2)
		if err != nil {
			return nil, err
		}
	}
	res := -1
	if op.Epilogue.Residual {
		if nc.inVal(3) == nil {
			return nil, fmt.Errorf("the epilogue adds a residual but input 3 is absent")
		}
		if r := nc.inVal(3); r.dtype != tensor.Float32 || !r.shape.Equal(y.shape) {
			return nil, unsupportedf("with a broadcast residual", "residual %s%v is not the output's shape %v", r.dtype, r.shape, y.shape)
		}
		res = nc.in[3]
	}
	if b := nc.inVal(2); w.kind != kindConst || b != nil && b.kind != kindConst {
		// Weights or bias computed at run time: nothing to pack ahead.
		var wf []float32
		if w.kind == kindConst {
			if wf, _, err = nc.constFloats(1); err != nil {
				return nil, err
			}
		}
		s := newDirectConv(nc, g, wf, bias, res, ac)
		if w.kind != kindConst {
			s.wv = nc.in[1]
		}
		if b != nil && b.kind != kindConst {
			s.bv = nc.in[2]
		}
		return s, nil
	}
	wf, _, err := nc.constFloats(1)
	if err != nil {
		return nil, err
	}
	if g.icg == 1 {
		if bs := newDWBlockStep(nc, g, wf, bias, res, ac); bs != nil {
			return bs, nil
		}
		return newDirectConv(nc, g, wf, bias, res, ac), nil
	}
	if ts := newTapsConvStep(nc, g, wf, bias, res, ac); ts != nil {
		return ts, nil
	}
	if ws, err := buildWinograd(nc, g, wf, bias, res, ac); ws != nil || err != nil {
		return ws, err
	}
	if gs := newGemvStep(nc, g, wf, bias, res, ac); gs != nil {
		return gs, nil
	}
	s := &convStep{convGeom: g, src: nc.in[0], res: res, scale: -1, dst: nc.out[0], bias: bias, act: ac}
	kk := g.kh * g.kw
	kdim := g.icg * kk
	packed, err := nc.c.p.weights.derived(nc.n.Input(1).Const, "conv", func(v any) int64 {
		n := int64(0)
		for _, a := range v.([]*gemm.PackedA) {
			n += 4 * int64(len(a.Data))
		}
		return n
	}, func() (any, error) {
		var as []*gemm.PackedA
		for gi := 0; gi < g.groups; gi++ {
			a, err := gemm.PackA(wf[gi*g.ocg*kdim:(gi+1)*g.ocg*kdim], g.ocg, kdim, kdim, gemm.BlockDepth(kdim))
			if err != nil {
				return nil, fmt.Errorf("packing weights of group %d: %w", gi, err)
			}
			as = append(as, a)
		}
		return as, nil
	})
	if err != nil {
		return nil, err
	}
	s.a = packed.([]*gemm.PackedA)
	s.ph, s.pw = (g.ih+g.sh-1)/g.sh, (g.iw+g.sw-1)/g.sw
	switch {
	case g.sh == 1 && g.sw == 1 && g.iw == g.ow:
		s.layout = layoutShift
	case (g.sh > 1 || g.sw > 1) && g.dh == 1 && g.dw == 1 && s.pw == g.ow:
		s.layout = layoutPhases
	default:
		s.layout = layoutGather
	}
	if int64(g.inC)*int64(g.sh*g.sw)*int64(s.ph*s.pw)*int64(g.n) >= 1<<31 {
		return nil, unsupportedf("over 2^31 elements", "input %v is too large", x.shape)
	}
	s.kOff, s.kMask = make([]int32, kdim), make([]int32, kdim)
	s.usedPhase = make([]bool, g.sh*g.sw)
	for k := 0; k < kdim; k++ {
		ci, r := k/kk, k%kk
		ky, kx := r/g.kw, r%g.kw
		s.kMask[k] = int32(r)
		switch s.layout {
		case layoutShift:
			s.kOff[k] = int32(ci*g.ih*g.iw + (ky*g.dh-g.pt)*g.iw + kx*g.dw - g.pl)
		case layoutPhases:
			py, dy := floorDivMod(ky-g.pt, g.sh)
			px, dx := floorDivMod(kx-g.pl, g.sw)
			plane := (ci*g.sh+py)*g.sw + px
			s.usedPhase[py*g.sw+px] = true
			s.kOff[k] = int32(plane*s.ph*s.pw + dy*s.pw + dx)
		case layoutGather:
			s.kOff[k] = int32(ci*g.ih*g.iw + ky*g.dh*g.iw + kx*g.dw)
		}
	}
	// Planes of a whole number of panels keep every panel's rows on
	// 64-byte lines; B rows read at other strides straddle two lines each,
	// which made the 7x7 and 14x14 layers slower than packing them.
	s.direct = s.pointwise() && gemm.StridedB() && (g.ih*g.iw)%gemm.NR == 0
	p := nc.c.p
	p.maxKK = max(p.maxKK, kk)
	p.phase = max(p.phase, s.phaseElems())
	p.sharedB = max(p.sharedB, min(s.sharedElems(), maxSharedB))
	return s, nil
}

// phaseElems is the floats the phase planes of the input take
// (layoutPhases), 0 otherwise.
func (s *convStep) phaseElems() int {
	if s.layout != layoutPhases {
		return 0
	}
	return s.n * s.inC * s.sh * s.sw * s.ph * s.pw
}

// sharedElems is the most floats a shared packing of B can take.
func (s *convStep) sharedElems() int {
	return s.groups * s.icg * s.kh * s.kw * roundUp(s.n*s.oh*s.ow, gemm.NR)
}

// floorDivMod returns q mod m in [0, m) and floor(q/m).
func floorDivMod(q, m int) (mod, div int) {
	div = q / m
	if q%m < 0 {
		div--
	}
	return q - div*m, div
}

func roundUp(x, m int) int { return (x + m - 1) / m * m }

// inPlane is the floats per input channel that B is read from: a plane, or
// its phase planes.
func (s *convStep) inPlane() int {
	if s.layout == layoutPhases {
		return s.sh * s.sw * s.ph * s.pw
	}
	return s.ih * s.iw
}

func (s *convStep) run(x *Exec) error {
	j := &x.conv
	j.s = s
	j.a, j.scale = s.a, nil
	switch {
	case s.scale >= 0 && s.scaleB:
		j.scale = s.scaleRows(x)
	case s.scale >= 0:
		j.a = s.scaledA(x)
	}
	j.in, j.out = x.f32(s.src), x.f32(s.dst)
	if s.layout == layoutPhases && s.phasesShared {
		j.in = x.phaseBuf[:s.phaseElems()]
	} else if s.layout == layoutPhases {
		pj := &x.phaseJ
		pj.s, pj.in, pj.out = s, j.in, x.phaseBuf[:s.phaseElems()]
		pj.planes = s.n * s.inC
		// Tasks of about 64 KB of input, but at least tasksPerThread
		// per worker where there are planes enough: stage 4's input at
		// batch 1 made 4 tasks for 16 workers.
		pj.per = max(1, min((1<<14)/(s.ih*s.iw), pj.planes/(tasksPerThread*x.pool.Size())))
		x.pool.Run(pj, (pj.planes+pj.per-1)/pj.per)
		j.in = pj.out
	}
	j.res = nil
	if s.res >= 0 {
		j.res = x.f32(s.res)
	}
	// The GEMM's N runs over the output pixels of all images, so that
	// small late-stage images still fill whole NR-wide panels.
	j.ntot = s.n * s.oh * s.ow
	sp := x.convSplitFor(s)
	j.nch, j.mch, j.kch = sp.nch, sp.mch, sp.kch
	j.np, j.mp = (j.ntot+gemm.NR-1)/gemm.NR, (s.ocg+gemm.MR-1)/gemm.MR
	j.nw = (j.np + j.nch - 1) / j.nch * gemm.NR
	j.shared, j.parts = nil, nil
	kdim := s.icg * s.kh * s.kw
	if j.kch > 1 {
		// A K split: each task packs its own K range of B; ranges
		// past the first sum into the buffer a shared packing uses.
		j.parts = x.sharedB[:(j.kch-1)*s.n*s.outC*s.oh*s.ow]
	} else if size := s.groups * j.nch * kdim * j.nw; j.mch > 1 && !s.direct && size <= len(x.sharedB) {
		// Several tasks would pack the same columns of B: pack them once,
		// in parallel over K-blocks, and let the tasks share them.
		j.shared = x.sharedB[:size]
		pk := &x.packJ
		pk.c, pk.nkb = j, j.a[0].Blocks()
		// Each K-block of a chunk in a few panel ranges where K-blocks
		// alone are too few tasks for the workers (9 to 18 at batch 1 in
		// ResNet-18's late stages).
		pk.pparts = max(1, min(j.nw/gemm.NR, tasksPerThread*x.pool.Size()/(s.groups*j.nch*pk.nkb)))
		x.pool.Run(pk, s.groups*j.nch*pk.nkb*pk.pparts)
	}
	x.pool.Run(j, s.groups*j.nch*j.mch*j.kch)
	if j.kch > 1 {
		rj := &x.reduceJ
		rj.c, rj.planes = j, s.n*s.outC
		rj.per = max(1, rj.planes/(tasksPerThread*x.pool.Size()))
		x.pool.Run(rj, (rj.planes+rj.per-1)/rj.per)
	}
	j.in, j.out, j.res, j.shared, j.parts, j.a, j.scale = nil, nil, nil, nil, nil, nil, nil
	return nil
}

// convJob is one call of a convStep, split into tasks of (group, N-range,
// M-range), N running over all images' output pixels.
type convJob struct {
	s            *convStep
	a            []*gemm.PackedA // s.a, or its columns scaled (scaledA)
	scale        []float32       // the input channels' scales packing applies, NR copies each (scaleRows)
	in, res, out []float32
	ntot         int // images x output pixels
	// shared, when set, holds B packed once for all M-ranges.
	shared []float32
	// np and mp are a group's column and row panels, dealt out evenly
	// to nch column ranges and mch row ranges (see convSplit); nw is the
	// widest column range's pixels, the stride of the shared packing.
	np, mp, nch, mch int
	nw               int
	// kch is the K ranges of a split reduction; parts holds the partial
	// sums of ranges 1..kch-1, each laid out as the output.
	kch     int
	parts   []float32
	scratch []convScratch
}

// outFor is where K range jk's sums go.
func (j *convJob) outFor(jk int) []float32 {
	if jk == 0 {
		return j.out
	}
	size := len(j.parts) / (j.kch - 1)
	return j.parts[(jk-1)*size : jk*size]
}

// sharedBlock returns the packed K-block (rows k0...) of group g's N chunk
// jn in the shared packing.
func (j *convJob) sharedBlock(g, jn, k0 int) []float32 {
	kdim := j.s.icg * j.s.kh * j.s.kw
	off := ((g*j.nch+jn)*kdim + k0) * j.nw
	return j.shared[off : off+(kdim-k0)*j.nw]
}

// nRange is column range jn's output columns [n0, n1).
func (j *convJob) nRange(jn int) (n0, n1 int) {
	return jn * j.np / j.nch * gemm.NR, min(j.ntot, (jn+1)*j.np/j.nch*gemm.NR)
}

// mRange is row range jm's output channels [m0, m1) within a group.
func (j *convJob) mRange(jm int) (m0, m1 int) {
	return jm * j.mp / j.mch * gemm.MR, min(j.s.ocg, (jm+1)*j.mp/j.mch*gemm.MR)
}

// packJob packs B for a convJob's shared mode: one task per group, N chunk
// and K-block.
type packJob struct {
	c   *convJob
	nkb int
	// pparts is how many panel ranges each chunk's K-block is packed in.
	pparts int
}

func (p *packJob) Run(w, t int) {
	const nr = gemm.NR
	j := p.c
	s := j.s
	t, pr := t/p.pparts, t%p.pparts
	g, r := t/(j.nch*p.nkb), t%(j.nch*p.nkb)
	jn, kb := r/p.nkb, r%p.nkb
	n0, n1 := j.nRange(jn)
	np := (n1 - n0 + nr - 1) / nr
	p0, p1 := evenRange0(pr, p.pparts, np), evenRange0(pr+1, p.pparts, np)
	if p0 == p1 {
		return
	}
	c0, c1 := n0+p0*nr, min(n1, n0+p1*nr)
	ws := &j.scratch[w]
	s.prepare(ws, c0, c1-c0, true)
	k0, kc := j.a[g].BlockK(kb)
	s.pack(j.sharedBlock(g, jn, k0)[p0*nr*kc:], j.in[g*s.icg*s.inPlane():], ws, k0, kc, c1-c0, j.scale)
}

// convScratch is one worker's private memory for convolution tasks.
type convScratch struct {
	packB []float32 // a packed KCMax x ncMax block of B
	tile  [gemm.MR * gemm.NR]float32
	// For a task's panels: the lane offsets and, per kernel position, the
	// padding masks (see gemm.Gather).
	lanes   [ncMax / gemm.NR][gemm.NR]int32
	panels  [ncMax / gemm.NR]gemm.Panel
	masks   []int32 // ncMax/NR panels x maxKK masks x NR lanes
	allOnes []int32 // maxKK masks that read every lane
	maskOf  [ncMax / gemm.NR][]int32
	// contiguous says a panel's lanes are consecutive.
	contiguous [ncMax / gemm.NR]bool
	gather     gemm.Gather
	// cols holds the narrow last panel of a task's pixels, when it
	// has at most gemm.ColsMax columns, expanded for KernelCols.
	cols gemm.ColsCache
}

func newConvScratch(maxKK int) convScratch {
	s := convScratch{
		packB:   make([]float32, gemm.KCMax*ncMax),
		cols:    gemm.NewColsCache(),
		masks:   make([]int32, ncMax/gemm.NR*maxKK*gemm.NR),
		allOnes: make([]int32, maxKK*gemm.NR),
	}
	for i := range s.allOnes {
		s.allOnes[i] = -1
	}
	return s
}

func (s *convScratch) bytes() int64 {
	return int64(4 * (len(s.packB) + s.cols.Floats() + len(s.tile) + len(s.lanes)*gemm.NR + len(s.masks) + len(s.allOnes)))
}

func (j *convJob) Run(w, t int) {
	const mr, nr = gemm.MR, gemm.NR
	s := j.s
	per := j.nch * j.mch * j.kch
	g, r := t/per, t%per
	jk, r := r%j.kch, r/j.kch
	npix := s.oh * s.ow
	in := j.in[g*s.icg*s.inPlane():]
	var bias []float32
	if s.bias != nil {
		bias = s.bias[g*s.ocg : (g+1)*s.ocg]
	}
	jn := r / j.mch
	n0, n1 := j.nRange(jn)
	m0, m1 := j.mRange(r % j.mch)
	a := j.a[g]
	ws := &j.scratch[w]
	tile := &ws.tile
	s.prepare(ws, n0, n1-n0, j.shared == nil)
	ws.cols.Reset()
	nb := a.Blocks()
	// K-blocks kb0..kb1 are the task's; with several K ranges the
	// epilogue waits for the reduction.
	kb0, kb1 := evenRange0(jk, j.kch, nb), evenRange0(jk+1, j.kch, nb)
	out := j.outFor(jk)
	for kb := kb0; kb < kb1; kb++ {
		k0, kc := a.BlockK(kb)
		bp := ws.packB
		if j.shared != nil {
			bp = j.sharedBlock(g, jn, k0)
		} else {
			s.pack(bp, in, ws, k0, kc, n1-n0, j.scale)
		}
		last := kb == nb-1 && j.kch == 1
		for ic := m0; ic < m1; ic += mcMax {
			ie := min(m1, ic+mcMax)
			for jp := 0; n0+jp*nr < n1; jp++ {
				pn := &ws.panels[jp]
				if pn.Whole {
					jp += j.runPanels(ws, out, g, jp, n0, n1, kb, kb0, kb1, ic, ie, m0, m1, bp) - 1
					continue
				}
				bpan := bp[jp*nr*kc : (jp+1)*nr*kc]
				cols := min(nr, n1-n0-jp*nr)
				// Columns from split on belong to the next image; the
				// kernel stores a panel spanning at most two in place.
				split := min(cols, npix-pn.Pix)
				inPlace := cols-split <= npix
				narrow := cols <= gemm.ColsMax && gemm.ColsFast()
				if narrow {
					// A panel of a few real columns (a 7x7 map's 49th
					// pixel) costs a whole one through the
					// micro-kernel, a few FMAs per column through
					// KernelCols.
					inPlace = false
					ws.cols.For(kb, kc, bpan, cols)
				}
				for ip := ic / mr; ip*mr < ie; {
					rows := min(mr, ie-ip*mr)
					var ep gemm.Epilogue
					if last {
						ep.ReLU = s.act.relu()
						if bias != nil {
							ep.Bias = bias[ip*mr:]
						}
					}
					if inPlace {
						np := min(gemm.WidePanels(), (ie-ip*mr+mr-1)/mr)
						rows := min(np*mr, ie-ip*mr)
						off := (pn.Img*s.outC+g*s.ocg+ip*mr)*npix + pn.Pix
						off2 := ((pn.Img+1)*s.outC + g*s.ocg + ip*mr) * npix
						t := gemm.Tile{C: out[off:], Ld: npix, Rows: rows, Cols: cols, Split: split, Load: kb > kb0, Bias: ep.Bias, ReLU: ep.ReLU}
						if split < cols {
							t.C2 = out[off2:]
						}
						if last && j.res != nil {
							t.Res = j.res[off:]
							if split < cols {
								t.Res2 = j.res[off2:]
							}
						}
						gemm.KernelPanels(np, kc, a.PanelRun(kb, ip), mr*kc, bpan, &t)
						ip += np
						continue
					}
					// A partial tile, or one spanning images: compute it
					// aside and store it image by image.
					if narrow {
						gemm.KernelCols(a.Panel(kb, ip), &ws.cols.ColsPanel, tile[:])
					} else {
						gemm.KernelTile(kc, a.Panel(kb, ip), bpan, tile[:], cols)
					}
					img, pix := pn.Img, pn.Pix
					for l := 0; l < cols; {
						seg := min(cols-l, npix-pix)
						off := (img*s.outC+g*s.ocg+ip*mr)*npix + pix
						gemm.MergeTile(out[off:], npix, tile[l:], rows, seg, kb > kb0)
						if last {
							if j.res != nil {
								ep.Res, ep.LdRes = j.res[off:], npix
							}
							gemm.ApplyEpilogue(out[off:], npix, rows, seg, ep)
						}
						l += seg
						img, pix = img+1, 0
					}
					ip++
				}
			}
			if last && s.act.post() {
				j.postAct(g, ic, ie, n0, n1)
			}
		}
	}
}

// runPanels computes the whole panels from jp on that lie in one image
// (consecutive output pixels, stored in place) for rows ic..ie of K-block
// kb in one gemm.KernelRun call, B read from the input in place for a
// direct step, else from the task's packed block bp. It returns how many
// panels it computed.
func (j *convJob) runPanels(ws *convScratch, out []float32, g, jp, n0, n1, kb, kb0, kb1, ic, ie, m0, m1 int, bp []float32) int {
	const nr = gemm.NR
	s := j.s
	pn := &ws.panels[jp]
	nb := gemm.WholeRun(ws.panels[jp:], (n1-n0+nr-1)/nr-jp)
	a := j.a[g]
	k0, kc := a.BlockK(kb)
	npix := s.oh * s.ow
	last := kb == a.Blocks()-1 && j.kch == 1
	off := (pn.Img*s.outC+g*s.ocg+ic)*npix + pn.Pix
	t := gemm.Tile{C: out[off:], Ld: npix, Rows: ie - ic, Cols: nb * nr, Load: kb > kb0}
	if last {
		t.ReLU = s.act.relu()
		if s.bias != nil {
			t.Bias = s.bias[g*s.ocg+ic:]
		}
		if j.res != nil {
			t.Res = j.res[off:]
		}
	}
	np := (ie - ic + gemm.MR - 1) / gemm.MR
	t.Next = j.nextA(a, kb, kb1, ie, m0, m1)
	if s.direct {
		plane := s.inPlane()
		b := j.in[(g*s.icg+pn.Img*s.inC+k0)*plane+pn.Pix:]
		gemm.KernelRun(np, kc, a.PanelRun(kb, ic/gemm.MR), gemm.MR*kc, b, plane, nr, nb, &t)
	} else {
		gemm.KernelRun(np, kc, a.PanelRun(kb, ic/gemm.MR), gemm.MR*kc, bp[jp*nr*kc:], nr, nr*kc, nb, &t)
	}
	return nb
}

// nextA is the packed A a task of rows m0..m1 reads after rows ..ie of
// K-block kb: its next row range, else its rows of the next K-block (nil
// after its last, kb1-1). Its weights come from memory once per forward at
// batch 1, and the micro-kernel fetches them ahead while it reuses the
// current ones.
func (j *convJob) nextA(a *gemm.PackedA, kb, kb1, ie, m0, m1 int) []float32 {
	const mr = gemm.MR
	r0 := ie
	if r0 >= m1 {
		if kb+1 >= kb1 {
			return nil
		}
		kb, r0 = kb+1, m0
	}
	_, kc := a.BlockK(kb)
	rows := roundUp(min(m1, r0+mcMax)-r0, mr)
	return a.PanelRun(kb, r0/mr)[:rows*kc]
}

// postAct runs the activation the micro-kernel does not apply over the
// task's finished outputs (channels m0..m1 of group g, columns n0..n1), one
// call per channel and image: per 16-column panel, the calls' fixed cost
// would match the work on 16 values.
func (j *convJob) postAct(g, m0, m1, n0, n1 int) {
	s := j.s
	npix := s.oh * s.ow
	for n := n0; n < n1; {
		img, pix := n/npix, n%npix
		seg := min(n1-n, npix-pix)
		for m := m0; m < m1; m++ {
			off := (img*s.outC+g*s.ocg+m)*npix + pix
			s.act.apply(j.out[off : off+seg])
		}
		n += seg
	}
}

// phaseJob splits a strided convolution's input planes into phase planes:
// phase (py, px) of a plane holds its pixels (py+SH*r, px+SW*c), zero past
// the edge.
type phaseJob struct {
	s           *convStep
	in, out     []float32
	planes, per int
}

func (j *phaseJob) Run(_, t int) {
	s := j.s
	sh, sw, ph, pw := s.sh, s.sw, s.ph, s.pw
	for p := t * j.per; p < min(j.planes, (t+1)*j.per); p++ {
		src := j.in[p*s.ih*s.iw : (p+1)*s.ih*s.iw]
		for py := range sh {
			phase := j.out[(p*sh+py)*sw*ph*pw:][:sw*ph*pw]
			if sw == 2 && s.iw >= 2 && (s.usedPhase[py*2] || s.usedPhase[py*2+1]) {
				// Both column phases of the rows of this parity at once
				// (the phase buffer holds all of them, read or not), in
				// one call: a call per row had cost as much as the split.
				in := (s.ih - py + sh - 1) / sh
				d0, d1 := phase[:ph*pw], phase[ph*pw:]
				if in > 0 {
					gemm.Deinterleave2Rows(d0, d1, src[py*s.iw:], s.iw, in, sh*s.iw, pw)
				}
				if s.iw/2 < pw {
					for r := range in {
						clear(d1[r*pw+s.iw/2 : (r+1)*pw])
					}
				}
				clear(d0[in*pw:])
				clear(d1[in*pw:])
				continue
			}
			for px := range sw {
				if !s.usedPhase[py*sw+px] {
					continue // no kernel position reads it
				}
				for r := range ph {
					iy := r*sh + py
					d := phase[px*ph*pw+r*pw:][:pw]
					if iy >= s.ih || px >= s.iw {
						clear(d)
						continue
					}
					row := src[iy*s.iw+px : (iy+1)*s.iw]
					cnt := (len(row) + sw - 1) / sw
					for c := range d[:cnt] {
						d[c] = row[c*sw]
					}
					clear(d[cnt:])
				}
			}
		}
	}
}

// prepare computes, for the nw output columns from n0 on (column q is
// pixel q%npix of image q/npix), where each NR-wide panel starts and, when
// packing, its lane offsets and padding masks (one per kernel position:
// lane l reads input pixel (iy0+ky*dh, ix0+kx*dw) if it lies inside the
// image and l is a real column), which every K-block of the task reuses.
func (s *convStep) prepare(ws *convScratch, n0, nw int, packing bool) {
	const nr = gemm.NR
	kk := s.kh * s.kw
	npix := s.oh * s.ow
	imgStride := s.inC * s.inPlane()
	for p := 0; p*nr < nw; p++ {
		c0 := n0 + p*nr
		w := min(nr, nw-p*nr)
		pn := &ws.panels[p]
		*pn = gemm.PanelAt(c0, w, npix)
		img, pix := pn.Img, pn.Pix
		if !packing {
			continue // the caller only stores tiles
		}
		if pn.Whole && s.pointwise() {
			// A 1x1 kernel without padding reads the output pixels'
			// own input pixels: consecutive, all inside.
			lanes := &ws.lanes[p]
			base := int32(img*imgStride + pix)
			for l := range lanes {
				lanes[l] = base + int32(l)
			}
			ws.contiguous[p] = true
			ws.maskOf[p] = ws.allOnes[:kk*nr]
			continue
		}
		oy, ox := pix/s.ow, pix%s.ow
		// rowOK[ky][l] and colOK[kx][l] are -1 where lane l's input row
		// (column) at kernel offset ky (kx) is inside the image.
		var rowOK [maxKernel][nr]int32
		var colOK [maxKernel][nr]int32
		lanes := &ws.lanes[p]
		interior := w == nr
		for l := range nr {
			iy0, ix0 := oy*s.sh-s.pt, ox*s.sw-s.pl
			interior = interior && iy0 >= 0 && iy0+(s.kh-1)*s.dh < s.ih && ix0 >= 0 && ix0+(s.kw-1)*s.dw < s.iw
			if s.layout == layoutGather {
				lanes[l] = int32(img*imgStride + iy0*s.iw + ix0)
			} else {
				lanes[l] = int32(img*imgStride + oy*s.ow + ox)
			}
			for ky := range s.kh {
				if l < w && uint(iy0+ky*s.dh) < uint(s.ih) {
					rowOK[ky][l] = -1
				}
			}
			for kx := range s.kw {
				if uint(ix0+kx*s.dw) < uint(s.iw) {
					colOK[kx][l] = -1
				}
			}
			if ox++; ox == s.ow {
				ox, oy = 0, oy+1
				if oy == s.oh {
					oy, img = 0, img+1
				}
			}
		}
		ws.contiguous[p] = s.layout != layoutGather && pn.Whole
		if interior {
			ws.maskOf[p] = ws.allOnes[:kk*nr]
			continue
		}
		masks := ws.masks[p*kk*nr : (p+1)*kk*nr]
		ws.maskOf[p] = masks
		for ky := range s.kh {
			for kx := range s.kw {
				m := masks[(ky*s.kw+kx)*nr : (ky*s.kw+kx+1)*nr]
				r, c := &rowOK[ky], &colOK[kx]
				for l := range m {
					m[l] = r[l] & c[l]
				}
			}
		}
	}
}

// scaleRows returns the input channels' scales of a convolution that
// scales B as it packs it (fuseSEScale), each repeated NR times (a packed
// panel's row), in x's shared buffer. It runs once per call, before the
// tasks: filled in each pack, the rows cost as much as the packing at 2
// threads, where a task packs one or two panels.
func (s *convStep) scaleRows(x *Exec) []float32 {
	const nr = gemm.NR
	sc := x.f32(s.scale)[:s.inC]
	rows := x.shared[:s.inC*nr]
	for k, v := range sc {
		r := rows[k*nr : (k+1)*nr : (k+1)*nr]
		for l := range r {
			r[l] = v
		}
	}
	return rows
}

// pointwise reports a 1x1 convolution of stride 1 without padding in the
// shift layout: output pixel i reads input pixel i of every channel.
func (s *convStep) pointwise() bool {
	return s.layout == layoutShift && s.kh == 1 && s.kw == 1 && s.pt == 0 && s.pl == 0 && s.ih == s.oh && s.iw == s.ow
}

// pack writes rows [k0, k0+kc) of the task's implicit im2col matrix (nw
// columns, prepared by prepare) into NR-wide panels; with sc (a
// pointwise convolution's input channel scales, see fuseSEScale, each
// repeated NR times: scaleRows) row k is multiplied by sc[k].
func (s *convStep) pack(dst, src []float32, ws *convScratch, k0, kc, nw int, sc []float32) {
	const nr = gemm.NR
	g := &ws.gather
	g.Offs, g.Mask = s.kOff[k0:k0+kc], s.kMask[k0:k0+kc]
	var rows []float32
	if sc != nil {
		// A packed panel is kc rows of NR values.
		rows = sc[k0*nr : (k0+kc)*nr]
	}
	for p := 0; p*nr < nw; p++ {
		if s.direct && ws.panels[p].Whole {
			continue // read in place
		}
		g.Contiguous = ws.contiguous[p]
		g.Lanes = ws.lanes[p]
		g.Masks = ws.maskOf[p]
		panel := dst[p*nr*kc : (p+1)*nr*kc]
		gemm.PackGather(panel, src, g)
		if rows != nil {
			vec.Mul(panel, panel, rows)
		}
	}
}
