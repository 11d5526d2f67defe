package irexec

import (
	"fmt"

	"goinfer/internal/engine/cpu/gemm"
	"goinfer/internal/engine/cpu/vec"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// mmStep is a batch of matrix products Out = L * R with an epilogue, the
// kernel of Gemm and MatMul. L (rows x k) is packed per task from a
// strided operand, so transposes cost nothing but a strided packing; R
// (k x cols) too, or, when it is a constant (the weights of a linear
// layer), once at compile time with alpha folded in. Out element (i, j)
// is at oOff + i*ors + j*ocs.
type mmStep struct {
	batch, rows, cols, k int
	l, r, dst            int // value indices; r is -1 when pr is set
	// pr is the constant R packed as the tasks pack theirs: per K-block,
	// NR-wide panels over all columns (prCols of them, rounded up).
	pr               []float32
	prCols           int
	lrs, lcs         int // L's strides
	rrs, rcs         int // R's strides (when not packed)
	ors, ocs         int // Out's strides
	lOff, rOff, oOff []int
	alpha            float32 // applied to the product when R is not packed
	colBias          []float32
	// add is a broadcast addend (Gemm's C scaled by beta, or a residual):
	// value index and its strides in (row, col) coordinates.
	adds []mmAdd
	act  act
	// Task blocking: rw rows and cw columns per task, kc-deep blocks.
	rw, cw, kc int
	rt, ct     int // tasks along rows and columns per batch
	// rowTasks: a task computes all ct column blocks of its row block
	// (enough row blocks to occupy the workers), so each row block of L
	// is packed once. sharedL: too few row blocks for that, and several
	// workers; L is then packed once, panel by panel in parallel, into
	// the Exec's shared buffer (rows of a block roundUp(rw, MR)*k floats
	// apart) before the column tasks run, instead of by every worker
	// that gets a task of the block.
	rowTasks, sharedL bool
	packer            mmPacker
}

// mmPacker is the packing phase of a sharedL step: task t packs one
// MR-row panel of L over every K-block.
type mmPacker struct{ s *mmStep }

type mmAdd struct {
	v      int
	scale  float32
	rs, cs int
	// batched: the addend has the output's shape, so each product of the
	// batch reads it at the output's offset.
	batched bool
}

// mmScratch is the floats a worker needs to pack one task's operands.
func (s *mmStep) scratchElems() int {
	n := roundUp(s.rw, gemm.MR) * s.k
	if s.pr == nil {
		n += roundUp(s.cw, gemm.NR) * s.k
	}
	// The task's block of the product, accumulated over the K-blocks.
	return n + roundUp(s.rw, gemm.MR)*roundUp(s.cw, gemm.NR)
}

// block picks task sizes: panels of at most 1M floats per operand.
func (s *mmStep) block(threads int) {
	s.kc = gemm.BlockDepth(s.k) // as packR packs constants
	lim := max(gemm.NR, (1<<20)/max(s.k, 1)/gemm.NR*gemm.NR)
	s.cw = min(roundUp(s.cols, gemm.NR), 256, lim)
	// Rows in blocks of about equal size, at most 264 (44 panels): a
	// sequence of ViT's 197 tokens is one block rather than 192 rows and a
	// thin remainder that streams all of R again for 5 rows.
	maxRows := min(264, max(gemm.MR, (2<<20)/max(s.k, 1)/gemm.MR*gemm.MR))
	nrb := (s.rows + maxRows - 1) / maxRows
	s.rw = roundUp((s.rows+nrb-1)/nrb, gemm.MR)
	// More tasks when the batch alone does not occupy the workers.
split:
	for s.batch*((s.rows+s.rw-1)/s.rw)*((s.cols+s.cw-1)/s.cw) < tasksPerThread*threads {
		switch {
		case s.cw > 2*gemm.NR:
			s.cw = roundUp(s.cw/2, gemm.NR)
		case s.rw > 2*gemm.MR:
			s.rw = roundUp(s.rw/2, gemm.MR)
		default:
			break split
		}
	}
	s.rt, s.ct = (s.rows+s.rw-1)/s.rw, (s.cols+s.cw-1)/s.cw
	s.packer.s = s
	s.rowTasks = s.ct > 1 && s.batch*s.rt >= tasksPerThread*threads
	if !s.rowTasks {
		s.evenColumns(threads)
	}
	s.sharedL = !s.rowTasks && threads > 1 && s.ct > 1 && s.batch*s.rt < threads && s.sharedElems() <= maxSharedL
}

// evenColumns re-splits the columns when the tasks are few and do not
// divide among the workers: ViT's QKV product at batch 1 had 9 tasks of
// 256 columns, so one of two workers idled for a ninth of the step; 12 of
// 192 columns share out evenly. It looks for a column task count between
// ct and 2*ct that the workers divide, preferring one that also divides
// the NR-wide panels.
func (s *mmStep) evenColumns(threads int) {
	n := s.batch * s.rt
	if threads < 2 || n*s.ct%threads == 0 || n*s.ct >= 4*tasksPerThread*threads {
		return
	}
	panels := (s.cols + gemm.NR - 1) / gemm.NR
	best := 0
	for c := s.ct + 1; c <= 2*s.ct && c <= panels; c++ {
		if n*c%threads != 0 {
			continue
		}
		if panels%c == 0 {
			best = c
			break
		}
		if best == 0 {
			best = c
		}
	}
	if best == 0 {
		return
	}
	s.cw = (panels + best - 1) / best * gemm.NR
	s.ct = (s.cols + s.cw - 1) / s.cw
}

// maxSharedL bounds the shared packed L (floats): ViT-B/16's MLP input at
// batch 1 is 198 x 3072.
const maxSharedL = 4 << 20

// sharedElems is the size of L packed whole: every row block of every
// product in the batch.
func (s *mmStep) sharedElems() int { return s.batch * s.rt * roundUp(s.rw, gemm.MR) * s.k }

func (s *mmStep) run(x *Exec) error {
	x.mmRun++
	if s.sharedL {
		x.par(&s.packer, s.batch*s.rt*((s.rw+gemm.MR-1)/gemm.MR))
	}
	n := s.batch * s.rt * s.ct
	if s.rowTasks {
		n = s.batch * s.rt
	}
	x.par(s, n)
	return nil
}

// lBlock is row block (b, rb) of L as the tasks pack it, in dst: its first
// row, number of rows, and the PackedA over dst.
func (s *mmStep) lBlock(dst []float32, b, rb int) (i0, rows int, pa gemm.PackedA) {
	i0 = rb * s.rw
	rows = min(s.rows, i0+s.rw) - i0
	panels := (rows + gemm.MR - 1) / gemm.MR
	return i0, rows, gemm.PackedA{M: rows, K: s.k, KC: s.kc, Panels: panels, Data: dst[:panels*gemm.MR*s.k]}
}

// task packs panel ip of row block (b, rb) into the shared buffer.
func (p *mmPacker) task(x *Exec, _, t int) {
	s := p.s
	per := (s.rw + gemm.MR - 1) / gemm.MR
	br, ip := t/per, t%per
	b, rb := br/s.rt, br%s.rt
	blk := roundUp(s.rw, gemm.MR) * s.k
	i0, rows, pa := s.lBlock(x.shared[br*blk:], b, rb)
	if ip < pa.Panels {
		s.packPanel(x, &pa, b, i0, rows, ip)
	}
}

// packPanel packs panel ip (rows i0+ip*MR...) of L for product b into pa,
// every K-block.
func (s *mmStep) packPanel(x *Exec, pa *gemm.PackedA, b, i0, rows, ip int) {
	const mr = gemm.MR
	lv := x.f32(s.l)[s.lOff[b]:]
	for k0 := 0; k0 < s.k; k0 += s.kc {
		kc := min(s.kc, s.k-k0)
		d := pa.Panel(k0/s.kc, ip)
		if s.lcs == 1 && (ip+1)*mr <= rows {
			base := (i0+ip*mr)*s.lrs + k0
			packRows(d, lv[base:], s.lrs, kc)
			continue
		}
		for i := 0; i < mr; i++ {
			r := ip*mr + i
			if r >= rows {
				for kk := 0; kk < kc; kk++ {
					d[kk*mr+i] = 0
				}
				continue
			}
			base := (i0+r)*s.lrs + k0*s.lcs
			if s.lcs == 1 {
				for kk, v := range lv[base : base+kc] {
					d[kk*mr+i] = v
				}
				continue
			}
			for kk := 0; kk < kc; kk++ {
				d[kk*mr+i] = lv[base+kk*s.lcs]
			}
		}
	}
}

// mmPackedL identifies the rows of L a worker's scratch holds packed:
// tasks are numbered column block fastest, so a worker's next task often
// reads the same rows, which it then need not pack again.
type mmPackedL struct {
	run   uint64
	b, i0 int
}

func (s *mmStep) task(x *Exec, w, t int) {
	if !s.rowTasks {
		b, rest := t/(s.rt*s.ct), t%(s.rt*s.ct)
		s.block1(x, w, b, rest/s.ct, rest%s.ct)
		return
	}
	for jb := 0; jb < s.ct; jb++ {
		s.block1(x, w, t/s.rt, t%s.rt, jb)
	}
}

// block1 computes the product's block of row block rb and column block jb
// for batch index b.
func (s *mmStep) block1(x *Exec, w, b, rb, jb int) {
	const mr, nr = gemm.MR, gemm.NR
	sc := x.scratch[w]
	var i0, rows int
	var pa gemm.PackedA
	if s.sharedL {
		blk := roundUp(s.rw, mr) * s.k
		i0, rows, pa = s.lBlock(x.shared[(b*s.rt+rb)*blk:], b, rb)
	} else {
		// L's rows [i0, i1), packed unless this worker's scratch holds them.
		i0, rows, pa = s.lBlock(sc, b, rb)
		key := mmPackedL{run: x.mmRun, b: b, i0: i0}
		if x.mmPacked[w] != key {
			x.mmPacked[w] = key
			for ip := 0; ip < pa.Panels; ip++ {
				s.packPanel(x, &pa, b, i0, rows, ip)
			}
		}
	}
	panels := pa.Panels
	j0 := jb * s.cw
	j1 := min(s.cols, j0+s.cw)
	// R's columns [j0, j1): the constant's packing, or packed here, per
	// K-block NR-wide panels of kc rows.
	rp, nw, p0 := s.pr, s.prCols, j0/nr
	if rp == nil {
		nw, p0 = roundUp(j1-j0, nr), 0
		rp = sc[panels*mr*s.k : panels*mr*s.k+nw*s.k]
		rv := x.f32(s.r)[s.rOff[b]:]
		for k0 := 0; k0 < s.k; k0 += s.kc {
			kc := min(s.kc, s.k-k0)
			blk := rp[k0*nw : (k0+kc)*nw]
			for p := 0; p*nr < nw; p++ {
				d := blk[p*nr*kc : (p+1)*nr*kc]
				cw := min(nr, j1-j0-p*nr)
				for kk := 0; kk < kc; kk++ {
					row := d[kk*nr : (kk+1)*nr]
					base := (k0+kk)*s.rrs + (j0+p*nr)*s.rcs
					if s.rcs == 1 {
						copy(row[:cw], rv[base:base+cw])
					} else {
						for l := 0; l < cw; l++ {
							row[l] = rv[base+l*s.rcs]
						}
					}
					clear(row[cw:])
				}
			}
		}
	}
	// K-blocks outermost, so that one block of L's panels stays in cache
	// while the block's R panels pass under it; within a block, one
	// KernelRun keeps each group of L's panels in L1 while R's panels
	// stream by (packed contiguously, NR*kc floats apart). The block of
	// the product accumulates in scratch and is stored once, with the
	// epilogue.
	ld := roundUp(s.cw, nr)
	acc := sc[len(sc)-roundUp(s.rw, mr)*ld:]
	nkb := (s.k + s.kc - 1) / s.kc
	nb := (j1 - j0 + nr - 1) / nr
	for kb := 0; kb < nkb; kb++ {
		k0, kc := kb*s.kc, min(s.kc, s.k-kb*s.kc)
		kernelBlock(kc, pa.PanelRun(kb, 0), panels, rows, rp[k0*nw+p0*nr*kc:], nb, acc, ld, kb > 0)
	}
	s.store(x, x.f32(s.dst), acc, ld, b, i0, j0, rows, j1-j0)
}

// kernelBlock computes one K-block of a task: panels MR-row panels of L
// (a, rows real rows) against nb packed R panels (b, NR*kc floats apart)
// into acc (row stride ld; it holds every panel's rows), adding to it when
// load. Pairs of L panels run the 12 x 32 kernel against pairs of R
// panels where the CPU has it; an odd count of L panels leaves the last
// three, and an odd count of R panels the last one, to KernelRun.
func kernelBlock(kc int, a []float32, panels, rows int, b []float32, nb int, acc []float32, ld int, load bool) {
	const mr, nr = gemm.MR, gemm.NR
	pp := panels
	if pp%2 == 1 {
		pp -= 3
	}
	if !gemm.PairsWide() || nb < 2 || pp < 2 {
		t := gemm.Tile{C: acc, Ld: ld, Rows: rows, Cols: nb * nr, Load: load}
		gemm.KernelRun(panels, kc, a, mr*kc, b, nr, nr*kc, nb, &t)
		return
	}
	for ip := 0; ip < pp; ip += 2 {
		gemm.KernelPairs(kc, a[ip*mr*kc:], mr*kc, b, nr*kc, acc[ip*mr*ld:], ld, nb/2, load)
	}
	if nb%2 == 1 {
		t := gemm.Tile{C: acc[(nb-1)*nr:], Ld: ld, Rows: pp * mr, Cols: nr, Load: load}
		gemm.KernelRun(pp, kc, a, mr*kc, b[(nb-1)*nr*kc:], nr, nr*kc, 1, &t)
	}
	if pp < panels {
		r0 := pp * mr
		t := gemm.Tile{C: acc[r0*ld:], Ld: ld, Rows: rows - r0, Cols: nb * nr, Load: load}
		gemm.KernelRun(panels-pp, kc, a[pp*mr*kc:], mr*kc, b, nr, nr*kc, nb, &t)
	}
}

// packRows packs MR rows of kc values (row i at src[i*ld:]) into the
// panel d, MR values per k: the six rows are read side by side so that
// every store is to the next float of d.
func packRows(d, src []float32, ld, kc int) {
	r0, r1, r2 := src[:kc], src[ld:ld+kc], src[2*ld:2*ld+kc]
	r3, r4, r5 := src[3*ld:3*ld+kc], src[4*ld:4*ld+kc], src[5*ld:5*ld+kc]
	d = d[:kc*gemm.MR]
	for kk := range r0 {
		e := d[kk*gemm.MR : kk*gemm.MR+gemm.MR : kk*gemm.MR+gemm.MR]
		e[0], e[1], e[2], e[3], e[4], e[5] = r0[kk], r1[kk], r2[kk], r3[kk], r4[kk], r5[kk]
	}
}

// store writes a finished block (row stride ld) with the epilogue.
func (s *mmStep) store(x *Exec, out, tile []float32, ld, b, i0, j0, rows, cols int) {
	base := s.oOff[b]
	for i := 0; i < rows; i++ {
		t := tile[i*ld : i*ld+cols]
		if s.pr == nil && s.alpha != 1 {
			vec.ScaleShift(t, t, s.alpha, 0)
		}
		if s.colBias != nil {
			vec.Add(t, t, s.colBias[j0:j0+len(t)])
		}
		for _, a := range s.adds {
			src := x.f32(a.v)
			o := (i0+i)*a.rs + j0*a.cs
			if a.batched {
				o += base
			}
			if a.cs == 1 && a.scale == 1 {
				vec.Add(t, t, src[o:o+len(t)])
				continue
			}
			for j := range t {
				t[j] += a.scale * src[o+j*a.cs]
			}
		}
		s.act.apply(t)
		o := base + (i0+i)*s.ors + j0*s.ocs
		if s.ocs == 1 {
			copy(out[o:o+cols], t)
			continue
		}
		for j, v := range t {
			out[o+j*s.ocs] = v
		}
	}
}

// packR packs the constant input (as k x n through strides rs, cs, times
// alpha) as the tasks pack R: per K-block of gemm.BlockDepth(k), NR-wide
// panels of all columns, zero past the last. Plans share it through the
// weight cache.
func packR(nc *nodeCtx, input int, k, n, rs, cs int, alpha float32) ([]float32, error) {
	const nr = gemm.NR
	t := nc.n.Input(input).Const
	nc.consumed(input)
	wf, err := nc.c.p.weights.floats(t)
	if err != nil {
		return nil, err
	}
	form := fmt.Sprintf("gemmR %d %d %d %d %g", k, n, rs, cs, alpha)
	v, err := nc.c.p.weights.derived(t, form, func(v any) int64 { return 4 * int64(len(v.([]float32))) }, func() (any, error) {
		cols := roundUp(n, nr)
		kcb := gemm.BlockDepth(k)
		d := make([]float32, k*cols)
		for k0 := 0; k0 < k; k0 += kcb {
			kc := min(kcb, k-k0)
			for p := 0; p*nr < cols; p++ {
				panel := d[k0*cols+p*nr*kc : k0*cols+(p+1)*nr*kc]
				for kk := 0; kk < kc; kk++ {
					for l := 0; l < nr && p*nr+l < n; l++ {
						panel[kk*nr+l] = alpha * wf[(k0+kk)*rs+(p*nr+l)*cs]
					}
				}
			}
		}
		return d, nil
	})
	if err != nil {
		return nil, err
	}
	return v.([]float32), nil
}

func buildGemm(nc *nodeCtx) (step, error) {
	op := any(nc.n.Op).(*ir.Gemm)
	a, b, y := nc.inVal(0), nc.inVal(1), nc.outVal(0)
	if a.dtype != tensor.Float32 || b.dtype != tensor.Float32 {
		return nil, unsupportedf(a.dtype.String(), "Gemm of %s and %s", a.dtype, b.dtype)
	}
	m, n := y.shape[0], y.shape[1]
	k := a.shape[1]
	ars, acs := a.shape[1], 1
	if op.TransA {
		k, ars, acs = a.shape[0], 1, a.shape[1]
	}
	brs, bcs := b.shape[1], 1 // B' (k x n)
	if op.TransB {
		brs, bcs = 1, b.shape[1]
	}
	ac, ok := newAct(op.Epilogue)
	if !ok {
		return nil, unsupportedf(fmt.Sprint("activation ", op.Epilogue.Act), "epilogue activation %d", op.Epilogue.Act)
	}
	s := &mmStep{batch: 1, k: k, act: ac, lOff: []int{0}, rOff: []int{0}, oOff: []int{0}, alpha: float32(op.Alpha), dst: nc.out[0]}
	out := tensor.Shape{m, n}
	type addend struct {
		in    int
		scale float64
	}
	addends := []addend{}
	if nc.inVal(2) != nil && op.Beta != 0 {
		addends = append(addends, addend{2, op.Beta})
	}
	if op.Epilogue.Residual {
		if nc.inVal(3) == nil {
			return nil, fmt.Errorf("the epilogue adds a residual but input 3 is absent")
		}
		addends = append(addends, addend{3, 1})
	}
	s.l, s.r = nc.in[0], nc.in[1]
	s.rows, s.cols = m, n
	s.lrs, s.lcs, s.rrs, s.rcs = ars, acs, brs, bcs
	s.ors, s.ocs = n, 1
	for _, ad := range addends {
		v := nc.inVal(ad.in)
		if v.dtype != tensor.Float32 {
			return nil, fmt.Errorf("input %d is %s, want float32", ad.in, v.dtype)
		}
		str := broadcastStrides(v.shape, out) // (m, n) strides
		rs, cs := str[0], str[1]
		if v.kind == kindConst && rs == 0 && ad.in == 2 && s.colBias == nil {
			// A constant bias per column: folded, added with the block.
			c, _, err := nc.constFloats(ad.in)
			if err != nil {
				return nil, err
			}
			s.colBias = make([]float32, s.cols)
			for j := range s.colBias {
				s.colBias[j] = float32(ad.scale) * c[j*cs]
			}
			continue
		}
		s.adds = append(s.adds, mmAdd{v: nc.in[ad.in], scale: float32(ad.scale), rs: rs, cs: cs})
	}
	if b.kind == kindConst {
		if nc.c.gemv && gemvFits(s) {
			return newMMGemvStep(nc, s, 1, brs, bcs, float32(op.Alpha))
		}
		pr, err := packR(nc, 1, k, n, brs, bcs, float32(op.Alpha))
		if err != nil {
			return nil, err
		}
		s.pr, s.prCols, s.r = pr, roundUp(n, gemm.NR), -1
	}
	s.block(nc.c.p.threads)
	nc.needScratch(s.scratchElems())
	if s.sharedL {
		nc.needShared(s.sharedElems())
	}
	return s, nil
}

// matMulEpilogue maps a fused MatMul's bias (input 2) and residual (input
// 3) onto the step: addends broadcast along everything but the last
// dimension, or of the output's own shape.
func (s *mmStep) matMulEpilogue(nc *nodeCtx, e ir.Epilogue, y *value) error {
	ac, ok := newAct(e)
	if !ok {
		return unsupportedf(fmt.Sprint("activation ", e.Act), "epilogue activation %d", e.Act)
	}
	s.act = ac
	for in := 2; in <= 3; in++ {
		v := nc.inVal(in)
		if v == nil || in == 3 && !e.Residual {
			continue
		}
		if v.dtype != tensor.Float32 {
			return fmt.Errorf("input %d is %s, want float32", in, v.dtype)
		}
		n := y.shape[len(y.shape)-1]
		str := broadcastStrides(v.shape, y.shape)
		vector := true
		for _, d := range str[:len(str)-1] {
			vector = vector && d == 0
		}
		a := mmAdd{v: nc.in[in], scale: 1}
		switch {
		case vector && v.kind == kindConst && in == 2:
			c, _, err := nc.constFloats(in)
			if err != nil {
				return err
			}
			s.colBias = make([]float32, n)
			for j := range s.colBias {
				s.colBias[j] = c[j*str[len(str)-1]]
			}
			continue
		case vector:
			a.rs, a.cs = 0, str[len(str)-1]
		case v.shape.Equal(y.shape) && s.batch == 1:
			a.rs, a.cs = n, 1
		case v.shape.Equal(y.shape):
			a.rs, a.cs, a.batched = n, 1, true
		default:
			return unsupportedf("with a broadcast addend", "input %d %v does not match the output %v", in, v.shape, y.shape)
		}
		s.adds = append(s.adds, a)
	}
	return nil
}

func buildMatMul(nc *nodeCtx) (step, error) {
	a, b, y := nc.inVal(0), nc.inVal(1), nc.outVal(0)
	if a.dtype != tensor.Float32 || b.dtype != tensor.Float32 {
		return nil, unsupportedf(a.dtype.String(), "MatMul of %s and %s", a.dtype, b.dtype)
	}
	as, bs := a.shape, b.shape
	if len(as) == 1 {
		as = tensor.Shape{1, as[0]}
	}
	if len(bs) == 1 {
		bs = tensor.Shape{bs[0], 1}
	}
	m, k, n := as[len(as)-2], as[len(as)-1], bs[len(bs)-1]
	batchShape, err := ir.BroadcastShape(as[:len(as)-2], bs[:len(bs)-2])
	if err != nil {
		return nil, err
	}
	batch := batchShape.NumElements()
	if batch*m*n != y.elems {
		return nil, fmt.Errorf("output %v does not hold %d products of %dx%d", y.shape, batch, m, n)
	}
	s := &mmStep{k: k, alpha: 1, dst: nc.out[0]}
	bBatch := bs[:len(bs)-2].NumElements()
	constR := b.kind == kindConst && bBatch == 1
	if constR {
		// Constant weights, packed once (below, after the epilogue); every
		// batch row of A is a row of one product.
		s.l, s.r = nc.in[0], -1
		s.batch, s.rows, s.cols = 1, batch*m, n
		s.lrs, s.lcs = k, 1
		s.ors, s.ocs = n, 1
		s.lOff, s.rOff, s.oOff = []int{0}, []int{0}, []int{0}
	} else {
		s.l, s.r = nc.in[0], nc.in[1]
		s.batch, s.rows, s.cols = batch, m, n
		s.lrs, s.lcs, s.rrs, s.rcs = k, 1, n, 1
		s.ors, s.ocs = n, 1
		aStr := broadcastStrides(as[:len(as)-2], batchShape)
		bStr := broadcastStrides(bs[:len(bs)-2], batchShape)
		s.lOff, s.rOff, s.oOff = make([]int, batch), make([]int, batch), make([]int, batch)
		for i := 0; i < batch; i++ {
			r := i
			for d := len(batchShape) - 1; d >= 0; d-- {
				c := r % batchShape[d]
				r /= batchShape[d]
				s.lOff[i] += c * aStr[d] * m * k
				s.rOff[i] += c * bStr[d] * k * n
			}
			s.oOff[i] = i * m * n
		}
	}
	if err := s.matMulEpilogue(nc, any(nc.n.Op).(*ir.MatMul).Epilogue, y); err != nil {
		return nil, err
	}
	if constR {
		if nc.c.gemv && gemvFits(s) {
			return newMMGemvStep(nc, s, 1, n, 1, 1)
		}
		pr, err := packR(nc, 1, k, n, n, 1, 1)
		if err != nil {
			return nil, err
		}
		s.pr, s.prCols = pr, roundUp(n, gemm.NR)
	}
	s.block(nc.c.p.threads)
	nc.needScratch(s.scratchElems())
	if s.sharedL {
		nc.needShared(s.sharedElems())
	}
	return s, nil
}
