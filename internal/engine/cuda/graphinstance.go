package cuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sort"
	"time"

	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
)

// graphWorkspace is the cuDNN workspace of a graph instance: algorithms
// that need more are skipped.
const graphWorkspace = 256 << 20

// runStep is a planned step made runnable on one instance: its pointers,
// descriptors, algorithm and kernel arguments.
type runStep struct {
	s          *gstep
	fn         cu.Function
	args       *cu.KernelArgs
	grid       int
	block      int
	xd, yd     cu.TensorDesc
	wd         cu.FilterDesc
	cd         cu.ConvDesc
	algo       int
	x, w, y    cu.DevPtr
	a, b, c    cu.DevPtr
	blasType   int
	ldA, ldB   int
	opA, opB   int
	strideC    int64
	strideAcol int64
	strideBcol int64
	// A convolution with its epilogue: fused into cuDNN's call (bias in
	// bd/bias, residual z, activation act) or, where cuDNN refuses, the
	// affine kernel after the convolution (fn, args).
	fused bool
	bd    cu.TensorDesc
	act   cu.ActivationDesc
	z     cu.DevPtr
	bias  cu.DevPtr
	algoF int
	// chunks splits the convolution over the batch (nil: one call).
	chunks *convChunks
	// A product with its epilogue in one cuBLASLt call (nil: cuBLAS, and
	// the epilogue kernel fn after it when the step is fused).
	lt    *cu.LtMatmul
	beta  float32
	alpha float32
}

// prepared is one batch size's runnable steps on an instance, and its
// CUDA graph when compiled.
type prepared struct {
	dp    *devPlan
	steps []*runStep
	graph cu.Graph
	exec  cu.GraphExec
	inArg *cu.KernelArgs
	out   *cu.KernelArgs
}

// graphInstance is one worker's stream, handles, workspace and arena.
type graphInstance struct {
	m       *graphModel
	d       *device
	stream  cu.Stream
	streamW *stream
	h       cu.DNNHandle
	blas    cu.BLASHandle
	lt      cu.LtHandle // 0 without cuBLASLt
	blasWs  cu.DevPtr
	ws      cu.DevPtr
	arena   cu.DevPtr
	arenaSz int64
	preps   map[int]*prepared
	relu    cu.ActivationDesc
	ident   cu.ActivationDesc
	closed  bool
}

var (
	_ engine.Instance = (*graphInstance)(nil)
	_ Profiler        = (*graphInstance)(nil)
	_ Memoryer        = (*graphInstance)(nil)
)

// NewInstance implements engine.Model: a stream, cuDNN and cuBLAS handles,
// workspace and an arena for the largest prepared batch size; compiled,
// the prepared sizes are tuned and captured.
func (m *graphModel) NewInstance(ctx context.Context) (engine.Instance, error) {
	defer runtime.UnlockOSThread()
	if err := m.dev.enter(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, errors.New("cuda engine: NewInstance on a closed model")
	}
	m.mu.Unlock()
	i := &graphInstance{m: m, d: m.dev, preps: map[int]*prepared{}}
	if err := i.init(ctx); err != nil {
		i.release()
		return nil, err
	}
	m.mu.Lock()
	m.instances++
	m.mu.Unlock()
	return i, nil
}

func (i *graphInstance) init(ctx context.Context) error {
	m, rt := i.m, i.d.rt
	var err error
	if i.stream, err = rt.StreamCreate(); err != nil {
		return err
	}
	i.streamW = &stream{d: i.d, s: i.stream, borrowed: true}
	if i.h, i.blas, err = newHandles(m.libs, i.d.ordinal); err != nil {
		return err
	}
	if err := m.libs.DNN.SetStream(i.h, i.stream); err != nil {
		return err
	}
	blas := m.libs.BLAS
	if err := blas.SetStream(i.blas, i.stream); err != nil {
		return err
	}
	if err := blas.SetMathMode(i.blas, m.prec.blasMath); err != nil {
		return err
	}
	if m.libs.BLASLt != nil {
		// Without a handle, products run their epilogue as a kernel.
		if h, err := m.libs.BLASLt.Create(); err == nil {
			i.lt = h
		}
	}
	if i.blasWs, err = i.d.alloc(blasWorkspace, "the cuBLAS workspace"); err != nil {
		return err
	}
	if err := blas.SetWorkspace(i.blas, i.blasWs, blasWorkspace); err != nil {
		return err
	}
	if i.ws, err = i.d.alloc(graphWorkspace, "the cuDNN workspace"); err != nil {
		return err
	}
	if i.relu, err = m.libs.DNN.NewActivation(cu.ActivationRelu); err != nil {
		return err
	}
	if i.ident, err = m.libs.DNN.NewActivation(cu.ActivationIdentity); err != nil {
		return err
	}
	t0 := time.Now()
	// Largest first: its arena serves the smaller sizes.
	sizes := append([]int(nil), m.opts.BatchSizes...)
	sort.Sort(sort.Reverse(sort.IntSlice(sizes)))
	for _, n := range sizes {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := i.prepare(n); err != nil {
			return err
		}
	}
	if m.opts.Compile {
		m.mu.Lock()
		m.info.CompileTime += time.Since(t0)
		m.mu.Unlock()
	}
	return rt.StreamSynchronize(i.stream)
}

// prepare returns batch n's runnable steps, building them (and, compiled,
// capturing them) on first use. A plan whose arena is larger than the
// instance's grows the arena, which invalidates every prepared size.
func (i *graphInstance) prepare(n int) (*prepared, error) {
	if pr := i.preps[n]; pr != nil {
		return pr, nil
	}
	dp, err := i.m.plan(context.Background(), n)
	if err != nil {
		return nil, err
	}
	_, size := dp.p.arenaLayout()
	if size > i.arenaSz {
		for k, pr := range i.preps {
			pr.destroy(i)
			delete(i.preps, k)
		}
		rt := i.d.rt
		if i.arena != 0 {
			if err := rt.StreamSynchronize(i.stream); err != nil {
				return nil, err
			}
			rt.Free(i.arena)
			i.arena, i.arenaSz = 0, 0
		}
		if i.arena, err = i.d.alloc(size, fmt.Sprintf("activations for batch %d", n)); err != nil {
			return nil, err
		}
		i.arenaSz = size
		// Zeroed once so that no stale NaN bit pattern is ever read.
		if err := rt.MemsetAsync(i.arena, 0, size, i.stream); err != nil {
			return nil, err
		}
		// Sizes prepared before were dropped: prepare them again.
		defer func() {
			for _, bn := range i.m.opts.BatchSizes {
				if bn != n && i.preps[bn] == nil {
					i.prepare(bn)
				}
			}
		}()
	}
	pr := &prepared{dp: dp, inArg: new(cu.KernelArgs), out: new(cu.KernelArgs)}
	for k, s := range dp.p.steps {
		rs, err := i.build(dp, k, s)
		if err != nil {
			pr.destroy(i)
			return nil, fmt.Errorf("cuda engine: %s (batch %d): %w", s.node, n, err)
		}
		pr.steps = append(pr.steps, rs)
	}
	if i.m.opts.Compile {
		if err := i.capture(pr); err != nil {
			pr.destroy(i)
			return nil, err
		}
	}
	i.preps[n] = pr
	return pr, nil
}

// ptr is value v's device address on this instance.
func (i *graphInstance) ptr(p *gplan, v int) cu.DevPtr {
	if v < 0 {
		return 0
	}
	r := p.root(v)
	val := &p.vals[r]
	switch val.kind {
	case gConst:
		i.m.mu.Lock()
		defer i.m.mu.Unlock()
		return i.m.consts[constKey{t: val.cnst}] + cu.DevPtr(p.offset(v)*int64(p.elem))
	case gArena:
		offs, _ := p.arenaLayout()
		return i.arena + cu.DevPtr(offs[val.slot]+p.offset(v)*int64(p.elem))
	}
	return 0
}

// gridFor is a grid-stride launch for n elements.
func gridFor(n int64) (grid, block int) { return launchDims(n) }

// rowGrid is one block per row, capped: the row kernels stride over rows.
func rowGrid(rows int) int { return min(max(rows, 1), 65535) }

// lnVecsPerLane is graph.cu's LN_VPL: layernorm_vec holds rows of up to 32
// lanes times this many 16-byte vectors in registers.
const lnVecsPerLane = 4

// lnVecMaxRows bounds the rows given to layernorm_vec. With few rows (batch
// 1) a row's latency decides, and one read of the row into registers wins;
// with many (batch 256) throughput does, and layernorm_warp, which holds
// less in registers and so keeps more warps resident, is faster.
const lnVecMaxRows = 8192

// lnGroupLanes is graph.cu's layernorm_group's lanes per row of nv
// vectors: the least power of two holding it at lnVecsPerLane vectors a
// lane, at most 32. Rows it gives fewer than 32 lanes (up to 16 *
// lnVecsPerLane vectors) run that kernel when there are too many for
// layernorm_vec: several rows per warp, each read once in vectors.
func lnGroupLanes(nv int) int {
	g := 1
	for g*lnVecsPerLane < nv && g < 32 {
		g <<= 1
	}
	return g
}

func f32arg(a *cu.KernelArgs, f float32) *cu.KernelArgs {
	return a.Int(int(int32(math.Float32bits(f))))
}

func (i *graphInstance) build(dp *devPlan, k int, s *gstep) (*runStep, error) {
	p, m, kern := dp.p, i.m, i.m.kern
	el := cu.DevPtr(p.elem)
	rs := &runStep{s: s, args: new(cu.KernelArgs)}
	out := i.ptr(p, s.out) + el*cu.DevPtr(s.outOff)
	a := i.ptr(p, s.a) + el*cu.DevPtr(s.aOff)
	b := i.ptr(p, s.b) + el*cu.DevPtr(s.bOff)
	switch s.kind {
	case stEW:
		rs.grid, rs.block = gridFor(s.n)
		if s.chanScale {
			vn := int64(16 / p.elem)
			rs.fn = kern.scaleCL
			rs.grid, rs.block = gridFor(s.n / vn)
			rs.args.Ptr(out).Ptr(a).Ptr(b).Int(int(s.n / vn)).Int(s.channels).Int(s.inner).Int(s.op)
			break
		}
		if s.flat {
			rs.fn = kern.ewFlat
			f32arg(f32arg(rs.args.Ptr(out).Ptr(a).Ptr(b).Int64(s.n).Int(s.op), s.p0), s.p1).Int(b2i(s.bScalar))
		} else {
			rs.fn = kern.ew
			f32arg(f32arg(rs.args.Ptr(out).Ptr(a).Ptr(b).Ptr(dp.meta[k]).Int64(s.n).Int(s.op), s.p0), s.p1)
		}
	case stChain:
		rs.grid, rs.block = gridFor(s.n)
		rs.args.Ptr(out).Ptr(a)
		for j := 0; j < maxChain; j++ {
			var bp cu.DevPtr
			if j < len(s.chain) && s.chain[j].b >= 0 {
				bp = i.ptr(p, s.chain[j].b) + el*cu.DevPtr(s.chain[j].bOff)
			}
			rs.args.Ptr(bp)
		}
		rs.fn = kern.ewChain
		rs.args.Ptr(dp.meta[k]).Int64(s.n)
	case stAffine:
		i.affineArgs(rs, dp, k, out, a)
	case stPool:
		g := s.pool
		rs.fn = kern.pool
		rs.grid, rs.block = gridFor(s.n)
		rs.args.Ptr(out).Ptr(a).Int(g.nc).Int(g.h).Int(g.w).Int(g.oh).Int(g.ow).Int(g.kh).Int(g.kw).Int(g.sh).Int(g.sw).
			Int(g.ph).Int(g.pw).Int(g.dh).Int(g.dw).Int(b2i(g.max)).Int(b2i(g.countPad)).Int(g.peh).Int(g.pew).Int(g.c)
	case stReduce:
		rs.fn, rs.grid, rs.block = kern.reduce, rowGrid(s.rows), 256
		rs.args.Ptr(out).Ptr(a).Int(s.rows).Int(s.rowLen).Int(s.redOp)
	case stPadCL:
		rs.fn = kern.padCL
		rs.grid, rs.block = gridFor(s.n)
		rs.args.Ptr(out).Ptr(a).Int64(s.n).Int(s.rowLen).Int(s.channels)
	case stReduceCL:
		rs.fn = kern.reduceCL
		rs.grid, rs.block = rowGrid(s.rows*((s.channels+31)/32)), 256
		rs.args.Ptr(out).Ptr(a).Int(s.rows).Int(s.channels).Int(s.rowLen).Int(s.redOp)
	case stSoftmax:
		rs.fn, rs.grid, rs.block = kern.softmax, rowGrid(s.rows), 256
		if s.rowLen <= 256 {
			// A warp per row, eight rows per block.
			rs.fn, rs.grid = kern.softmaxWarp, rowGrid((s.rows+7)/8)
		}
		rs.args.Ptr(out).Ptr(a).Int(s.rows).Int(s.rowLen).Int(s.redOp)
	case stLayerNorm:
		rs.fn, rs.grid, rs.block = kern.norm, rowGrid(s.rows), 256
		if s.rowLen <= 4096 {
			rs.fn, rs.grid = kern.normWarp, rowGrid((s.rows+7)/8)
		}
		vn := 16 / p.elem
		vecs := s.rowLen%vn == 0 && (out|a)%16 == 0
		lanes := lnGroupLanes(s.rowLen / vn)
		switch {
		case vecs && lanes < 32 && (s.rows > lnVecMaxRows || hasExperiment(m.opts.GraphExperiments, "lngroup")) &&
			!hasExperiment(m.opts.GraphExperiments, "nolngroup"):
			rs.fn, rs.grid = kern.normGroup, rowGrid((s.rows+256/lanes-1)/(256/lanes))
		case vecs && s.rows <= lnVecMaxRows && s.rowLen/vn <= 32*lnVecsPerLane && !hasExperiment(m.opts.GraphExperiments, "nolnvec"):
			rs.fn = kern.normVec
		}
		f32arg(rs.args.Ptr(out).Ptr(a).Ptr(dp.scale[k]).Ptr(dp.shift[k]).Int(s.rows).Int(s.rowLen), s.eps)
	case stDW:
		fn, n, err := kern.dwKernel(s, p.elem)
		if err != nil {
			return nil, err
		}
		rs.fn = fn
		rs.grid, rs.block = dwLaunch(s, n)
		f32arg(f32arg(rs.args.Ptr(out).Ptr(a).Ptr(dp.scale[k]).Ptr(dp.shift[k]).Ptr(i.ptr(p, s.res)).Ptr(dp.meta[k]).
			Int(int(n)).Int(s.op), s.p0), s.p1)
	case stFC:
		g := s.conv
		rs.fn, rs.grid, rs.block = kern.fc, fcGrid(s), 32*fcWarps
		f32arg(f32arg(rs.args.Ptr(out).Ptr(a).Ptr(dp.scale[k]).Ptr(dp.shift[k]).Int(g.n).Int(g.c).Int(g.k).Int(s.op), s.p0), s.p1)
	case stAttn:
		g := s.attn
		rs.fn, rs.block = kern.attn, 256
		rs.grid = min(g.b1*g.b2*g.s+7, 1<<24) / 8 // a warp per query row
		if hd := max(g.d, g.dv); kern.attnMMA64 != 0 && hd <= attnMaxHead {
			// Tensor cores: 64 query rows per block of 4 warps.
			rs.fn, rs.block = kern.attnMMA128, 128
			if hd <= 64 {
				rs.fn = kern.attnMMA64
			}
			if m.fused.ldm {
				rs.fn = kern.attnLdm128
				if hd <= 64 {
					rs.fn = kern.attnLdm64
				}
			}
			rs.grid = min(g.b1*g.b2*((g.s+63)/64), 1<<24)
			if useSplitAttention(m.fused, hd, rs.grid) && !hasExperiment(m.opts.GraphExperiments, "noattnsplit") {
				rs.fn, rs.grid = kern.attnSplit64, g.b1*g.b2*((g.s+15)/16)
			}
		}
		f32arg(rs.args.Ptr(out).Ptr(a).Ptr(b).Ptr(i.ptr(p, s.res)).Ptr(dp.meta[k]), s.p0)
	case stGemm:
		c := gemmCallOf(s.gemm)
		rs.a, rs.b, rs.c = b, a, out
		rs.opA, rs.ldA, rs.opB, rs.ldB = c.opA, c.ldA, c.opB, c.ldB
		rs.strideAcol, rs.strideBcol, rs.strideC = c.strideA, c.strideB, c.strideC
		rs.blasType = cu.CudaR32F
		switch m.prec.elem {
		case 2:
			rs.blasType = cu.CudaR16F
			if m.prec.dnnType == cu.DataBFloat16 {
				rs.blasType = cu.CudaR16BF
			}
		}
		if s.fused {
			// The epilogue kernel, in place on y, for when cuBLASLt
			// cannot take it.
			i.affineArgs(rs, dp, k, out, out)
			i.buildLt(rs, dp, k)
		}
	case stConv:
		if err := i.buildConv(rs, p, s, a, out); err != nil {
			return nil, err
		}
		if s.fused {
			rs.fused = true
			rs.bias, rs.z = dp.bias[k], i.ptr(p, s.res)
			rs.act = i.ident
			if s.op == ewRelu {
				rs.act = i.relu
			}
			// The fallback epilogue kernel, in place on y.
			rs.fn = kern.affine
			rs.grid, rs.block = gridFor(s.n)
			f32arg(f32arg(rs.args.Ptr(out).Ptr(out).Ptr(0).Ptr(dp.shift[k]).Ptr(rs.z).Int64(s.n).
				Int(s.channels).Int(s.inner).Int(s.op), 0), 0)
			format := cu.TensorNCHW
			if s.conv.nhwc {
				format = cu.TensorNHWC
			}
			bd, err := i.m.libs.DNN.NewTensor4d(format, m.prec.dnnType, 1, s.conv.k, 1, 1)
			if err != nil {
				return nil, err
			}
			rs.bd = bd
			// The fused call runs implicit precomputed GEMM: cuDNN takes an
			// identity activation with this algorithm only, and with the
			// plain implicit GEMM Find may rank first at batch 1 the fused
			// call ran 10 to 40 times slower (a generic kernel).
			rs.algoF = cu.ConvFwdAlgoImplicitPrecompGemm
			need, err := i.m.libs.DNN.ConvForwardWorkspace(i.h, rs.xd, rs.wd, rs.cd, rs.yd, rs.algoF)
			if err != nil || need > graphWorkspace {
				rs.algoF = rs.algo
				if s.op == ewCopy {
					rs.fused = false
				}
			}
		}
	default:
		return nil, fmt.Errorf("step kind %s", s.kind)
	}
	return rs, nil
}

// affineArgs makes rs launch the affine kernel of step k (y = out, x = a),
// over strided rows where the step says so, and over 16-byte vectors
// where the layout and alignment allow.
func (i *graphInstance) affineArgs(rs *runStep, dp *devPlan, k int, out, a cu.DevPtr) {
	p, kern, s := dp.p, i.m.kern, dp.p.steps[k]
	if s.rowLen > 0 {
		// Strided rows (a view of a shared concatenation buffer); out and
		// a carry the views' offsets, so their alignment is the rows'.
		vn := int64(16 / p.elem)
		vec := s.inner == 1 && int64(s.channels)%vn == 0 && s.n%vn == 0 && int64(s.rowLen)%vn == 0 &&
			s.aRow%vn == 0 && s.oRow%vn == 0 && (out|a)%16 == 0
		if vec {
			rs.fn = kern.affineRowsVec
			rs.grid, rs.block = gridFor(s.n / vn)
			f32arg(f32arg(rs.args.Ptr(out).Ptr(a).Ptr(dp.scale[k]).Ptr(dp.shift[k]).Int(int(s.n/vn)).Int(s.channels).
				Int(s.rowLen).Int(int(s.oRow)).Int(int(s.aRow)).Int(s.op), s.p0), s.p1)
			return
		}
		rs.fn = kern.affineRows
		rs.grid, rs.block = gridFor(s.n)
		f32arg(f32arg(rs.args.Ptr(out).Ptr(a).Ptr(dp.scale[k]).Ptr(dp.shift[k]).Int64(s.n).Int(s.channels).Int(s.inner).
			Int(s.rowLen).Int(int(s.oRow)).Int(int(s.aRow)).Int(s.op), s.p0), s.p1)
		return
	}
	res := i.ptr(p, s.res)
	if vn := int64(16 / p.elem); s.inner == 1 && int64(s.channels)%vn == 0 && s.n%vn == 0 && (out|a|res)%16 == 0 {
		rs.fn = kern.affineVec
		rs.grid, rs.block = gridFor(s.n / vn)
		f32arg(f32arg(rs.args.Ptr(out).Ptr(a).Ptr(dp.scale[k]).Ptr(dp.shift[k]).Ptr(res).Int(int(s.n/vn)).
			Int(s.channels).Int(s.op), s.p0), s.p1)
		return
	}
	rs.fn = kern.affine
	rs.grid, rs.block = gridFor(s.n)
	f32arg(f32arg(rs.args.Ptr(out).Ptr(a).Ptr(dp.scale[k]).Ptr(dp.shift[k]).Ptr(res).Int64(s.n).
		Int(s.channels).Int(s.inner).Int(s.op), s.p0), s.p1)
}

// buildLt plans a fused product's cuBLASLt call; rs.lt stays nil where
// cuBLASLt is missing or refuses it.
func (i *graphInstance) buildLt(rs *runStep, dp *devPlan, k int) {
	s, lt := dp.p.steps[k], i.m.libs.BLASLt
	if i.lt == 0 || lt == nil || !i.m.fused.lt || s.scale != nil {
		// A per-column scale (a folded layer scale) is no cuBLASLt
		// epilogue: the affine kernel after cuBLAS runs it.
		return
	}
	g := s.gemm
	epi := cu.LtEpilogueDefault
	switch s.op {
	case ewRelu:
		epi = cu.LtEpilogueReLU
	case ewGELU, ewGELUTanh:
		epi = cu.LtEpilogueGELU
	}
	var bias cu.DevPtr
	if s.shift != nil {
		bias = dp.bias[k]
		// The *_BIAS epilogues are their plain ones with the BIAS bit;
		// DEFAULT has no bit of its own.
		if epi == cu.LtEpilogueDefault {
			epi = cu.LtEpilogueBias
		} else {
			epi |= cu.LtEpilogueBias
		}
	}
	prob := cu.LtProblem{TransA: rs.opA == opT, TransB: rs.opB == opT, M: g.n, N: g.m, K: g.k,
		LdA: rs.ldA, LdB: rs.ldB, LdC: g.n, Type: rs.blasType, Compute: i.m.prec.blasComp, Epilogue: epi, Bias: bias,
		Workspace: blasWorkspace}
	mm, err := lt.NewMatmul(i.lt, prob)
	if err != nil {
		return
	}
	rs.lt, rs.alpha, rs.z = mm, g.alpha, i.ptr(dp.p, s.out)
	if s.res >= 0 {
		rs.beta, rs.z = 1, i.ptr(dp.p, s.res)
	}
	if i.m.opts.Compile && !hasExperiment(i.m.opts.GraphExperiments, "noltune") {
		i.tuneLt(rs, prob)
	}
}

func (i *graphInstance) buildConv(rs *runStep, p *gplan, s *gstep, x, y cu.DevPtr) error {
	m, dnn, g := i.m, i.m.libs.DNN, s.conv
	var err error
	format := cu.TensorNCHW
	if g.nhwc {
		format = cu.TensorNHWC
	}
	c := g.c
	if g.cpad > 0 {
		c = g.cpad
	}
	if rs.xd, err = dnn.NewTensor4d(format, m.prec.dnnType, g.n, c, g.h, g.w); err != nil {
		return err
	}
	if rs.yd, err = dnn.NewTensor4d(format, m.prec.dnnType, g.n, g.k, g.oh, g.ow); err != nil {
		return err
	}
	if rs.wd, err = dnn.NewFilter4d(m.prec.dnnType, format, g.k, c/g.groups, g.kh, g.kw); err != nil {
		return err
	}
	if rs.cd, err = dnn.NewConv2dGeneral(g.padH, g.padW, g.strH, g.strW, g.dilH, g.dilW, g.groups, cu.DataFloat, m.prec.mathType); err != nil {
		return err
	}
	if err = i.planChunks(rs, g, format, c); err != nil {
		return err
	}
	m.mu.Lock()
	rs.x, rs.y, rs.w = x, y, m.consts[constKey{t: p.vals[g.weight].cnst, krsc: g.nhwc, cpad: g.cpad}]
	m.mu.Unlock()
	key := fmt.Sprintf("%+v/%d", *g, m.opts.Precision)
	if rs.chunks != nil {
		key += fmt.Sprintf("/per%d", rs.chunks.per)
	}
	m.mu.Lock()
	pick, ok := m.algos[key]
	m.mu.Unlock()
	if !ok {
		var perf []cu.ConvFwdPerf
		if m.opts.Compile {
			perf, err = dnn.FindConvForward(i.h, rs.xd, rs.x, rs.wd, rs.w, rs.cd, rs.yd, rs.y, i.ws, graphWorkspace)
		} else {
			perf, err = dnn.ConvForwardAlgorithms(i.h, rs.xd, rs.wd, rs.cd, rs.yd)
		}
		if err != nil {
			return err
		}
		algo := pickConvAlgo(perf, g.n, func(a int) bool {
			need, err := dnn.ConvForwardWorkspace(i.h, rs.xd, rs.wd, rs.cd, rs.yd, a)
			return err == nil && need <= graphWorkspace
		})
		if m.opts.Progress != nil && hasExperiment(m.opts.GraphExperiments, "findlog") {
			m.opts.Progress("%s", findLog(s.node, g, perf, algo))
		}
		if algo < 0 {
			return fmt.Errorf("no convolution algorithm fits a %d MiB workspace", graphWorkspace>>20)
		}
		pick = convPick{algo: algo, math: pickedMath(perf, algo)}
		m.mu.Lock()
		m.algos[key] = pick
		m.mu.Unlock()
	}
	rs.algo = pick.algo
	if p.findMath && !s.fused && m.prec.p != engine.FP32 && pick.math >= 0 && pick.math != m.prec.mathType {
		// Run under the math type Find measured the algorithm with, as
		// the ResNet path does (instance.go); where the workspace that
		// needs does not fit, the descriptor's.
		if err := dnn.SetConvMath(rs.cd, pick.math); err != nil {
			return err
		}
		if need, err := dnn.ConvForwardWorkspace(i.h, rs.xd, rs.wd, rs.cd, rs.yd, pick.algo); err != nil || need > graphWorkspace {
			return dnn.SetConvMath(rs.cd, m.prec.mathType)
		}
	}
	return nil
}

// run enqueues one step.
func (i *graphInstance) run(rs *runStep) error {
	m := i.m
	switch rs.s.kind {
	case stConv:
		if rs.fused {
			err := i.runConv(rs, true)
			if err == nil || !(errors.Is(err, cu.ErrNotSupported) || isBadParam(err)) {
				return err
			}
			// Refused (this runs outside capture first): convolution and
			// epilogue kernel from now on.
			rs.fused = false
		}
		if err := i.runConv(rs, false); err != nil {
			return err
		}
		if rs.s.fused {
			return i.launch(rs.fn, rs.grid, rs.block, rs.args)
		}
		return nil
	case stGemm:
		g := rs.s.gemm
		if rs.lt != nil {
			err := m.libs.BLASLt.Matmul(i.lt, rs.lt, &rs.alpha, &rs.beta, rs.a, rs.b, rs.z, rs.c, i.blasWs, blasWorkspace, i.stream)
			if err == nil {
				return nil
			}
			// Refused (the first run is outside capture): cuBLAS and the
			// epilogue kernel from now on.
			m.libs.BLASLt.DestroyMatmul(rs.lt)
			rs.lt = nil
		}
		if err := m.libs.BLAS.GemmStridedBatchedEx(i.blas, rs.opA, rs.opB, g.n, g.m, g.k, &g.alpha,
			rs.a, rs.blasType, rs.ldA, rs.strideAcol, rs.b, rs.blasType, rs.ldB, rs.strideBcol,
			rs.c, rs.blasType, g.n, rs.strideC, g.batch, m.prec.blasComp); err != nil {
			return err
		}
		if rs.s.fused {
			return i.launch(rs.fn, rs.grid, rs.block, rs.args)
		}
		return nil
	}
	return i.launch(rs.fn, rs.grid, rs.block, rs.args)
}

func (i *graphInstance) runSteps(pr *prepared) error {
	for _, rs := range pr.steps {
		if err := i.run(rs); err != nil {
			return fmt.Errorf("cuda engine: %s: %w", rs.s.node, err)
		}
	}
	return nil
}

// capture runs a batch size's steps once (library set-up that capture
// would not allow) and records them as a CUDA graph.
func (i *graphInstance) capture(pr *prepared) error {
	rt := i.d.rt
	if err := i.runSteps(pr); err != nil {
		return err
	}
	if err := rt.StreamSynchronize(i.stream); err != nil {
		return err
	}
	if err := rt.StreamBeginCapture(i.stream, cu.CaptureModeThreadLocal); err != nil {
		return fmt.Errorf("cuda engine: capturing batch %d: %w", pr.dp.p.batch, err)
	}
	runErr := i.runSteps(pr)
	g, endErr := rt.StreamEndCapture(i.stream)
	if runErr != nil || endErr != nil {
		if g != 0 {
			rt.GraphDestroy(g)
		}
		return fmt.Errorf("cuda engine: capturing batch %d: %w", pr.dp.p.batch, errors.Join(runErr, endErr))
	}
	exec, err := rt.GraphInstantiate(g)
	if err != nil {
		rt.GraphDestroy(g)
		return fmt.Errorf("cuda engine: instantiating the graph of batch %d: %w", pr.dp.p.batch, err)
	}
	pr.graph, pr.exec = g, exec
	if err := rt.GraphUpload(exec, i.stream); err != nil {
		return err
	}
	return rt.StreamSynchronize(i.stream)
}

func (pr *prepared) destroy(i *graphInstance) {
	rt, dnn := i.d.rt, i.m.libs.DNN
	if pr.exec != 0 {
		rt.GraphExecDestroy(pr.exec)
		pr.exec = 0
	}
	if pr.graph != 0 {
		rt.GraphDestroy(pr.graph)
		pr.graph = 0
	}
	for _, rs := range pr.steps {
		if rs.lt != nil {
			i.m.libs.BLASLt.DestroyMatmul(rs.lt)
			rs.lt = nil
		}
		dnn.DestroyTensor(rs.xd)
		dnn.DestroyTensor(rs.yd)
		dnn.DestroyTensor(rs.bd)
		dnn.DestroyFilter(rs.wd)
		dnn.DestroyConv(rs.cd)
		rs.chunks.destroy(dnn)
	}
	pr.steps = nil
}

func (i *graphInstance) Stream() engine.Stream { return i.streamW }

// Forward implements engine.Instance: the input is converted to the
// storage dtype into its arena slot, the batch's graph (or steps) runs,
// and the first output is converted to float32 into out.
func (i *graphInstance) Forward(in, out engine.Buffer, n int) error {
	if err := i.checkBatch(n); err != nil {
		return err
	}
	inB, err := asBuffer(in, 0, n*i.m.info.Input().Elems()*4)
	if err != nil {
		return fmt.Errorf("cuda engine: input: %w", err)
	}
	outB, err := asBuffer(out, 0, n*i.m.info.Output().Elems()*4)
	if err != nil {
		return fmt.Errorf("cuda engine: output: %w", err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := i.d.rt.SetDevice(i.d.ordinal); err != nil {
		return err
	}
	return i.forward(inB.ptr, outB.ptr, n)
}

// ForwardHost implements engine.HostIO: Forward with the input read by its
// conversion kernel, and the output written by its own, in page-locked
// host memory.
func (i *graphInstance) ForwardHost(in, out []byte, n int) error {
	if err := i.checkBatch(n); err != nil {
		return err
	}
	inN, outN := n*i.m.info.Input().Elems()*4, n*i.m.info.Output().Elems()*4
	return i.d.forwardHost(in, inN, out, outN, func(in, out cu.DevPtr) error { return i.forward(in, out, n) })
}

func (i *graphInstance) checkBatch(n int) error { return checkBatch(i.closed, n, i.m.info.MaxBatch) }

// forward enqueues batch n from in to out; the device is current.
func (i *graphInstance) forward(in, out cu.DevPtr, n int) error {
	m := i.m
	inElems, outElems := n*m.info.Input().Elems(), n*m.info.Output().Elems()
	pr, err := i.prepare(n)
	if err != nil {
		return err
	}
	p := pr.dp.p
	grid, block := gridFor(int64(inElems))
	if err := i.d.libs.Driver.Launch(m.kern.castIn, grid, block, i.stream,
		pr.inArg.Reset().Ptr(i.ptr(p, p.input)).Ptr(in).Int64(int64(inElems))); err != nil {
		return err
	}
	if pr.exec != 0 {
		if err := i.d.rt.GraphLaunch(pr.exec, i.stream); err != nil {
			return err
		}
	} else if err := i.runSteps(pr); err != nil {
		return err
	}
	grid, block = gridFor(int64(outElems))
	return i.d.libs.Driver.Launch(m.kern.castOut, grid, block, i.stream,
		pr.out.Reset().Ptr(out).Ptr(i.ptr(p, p.outputs[0])).Int64(int64(outElems)))
}

// MemoryBytes implements engine.Instance.
func (i *graphInstance) MemoryBytes() int64 { return i.arenaSz + graphWorkspace + blasWorkspace }

// Memory splits the instance's device memory.
func (i *graphInstance) Memory() MemoryStats {
	return MemoryStats{Weights: i.m.weightBytes, Workspace: graphWorkspace + blasWorkspace, Activations: i.arenaSz}
}

// ProfileLayers times each step of batch n's forward on its own, as a CUDA
// graph of repeated calls, named by the IR node it computes.
func (i *graphInstance) ProfileLayers(n, iters int) ([]LayerTime, error) {
	if n < 1 || n > i.m.info.MaxBatch || iters < 1 {
		return nil, fmt.Errorf("cuda engine: profile batch %d, %d iterations: out of range", n, iters)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rt := i.d.rt
	if err := rt.SetDevice(i.d.ordinal); err != nil {
		return nil, err
	}
	pr, err := i.prepare(n)
	if err != nil {
		return nil, err
	}
	var start, end cu.Event
	if start, err = rt.EventCreate(true); err != nil {
		return nil, err
	}
	defer rt.EventDestroy(start)
	if end, err = rt.EventCreate(true); err != nil {
		return nil, err
	}
	defer rt.EventDestroy(end)
	reps := min(iters, 50)
	var res []LayerTime
	for _, rs := range pr.steps {
		ms, err := timeCaptured(rt, i.stream, start, end, func() error { return i.run(rs) }, reps)
		if err != nil {
			return nil, err
		}
		lt := LayerTime{Name: rs.s.node, Kind: rs.s.kind.String(), Time: time.Duration(float64(ms) * float64(time.Millisecond))}
		switch rs.s.kind {
		case stGemm:
			if rs.s.fused {
				lt.Algo = "+ epilogue"
				if rs.lt != nil {
					lt.Algo = "cublasLt fused"
				}
			}
		case stConv:
			lt.Algo = cu.ConvFwdAlgoName(rs.algo)
			if rs.fused {
				lt.Algo = cu.ConvFwdAlgoName(rs.algoF) + " fused"
			} else if rs.s.fused {
				lt.Algo += " + epilogue"
			}
			if rs.s.conv.isDepthwise() {
				// Which depthwise lowering ran: cuDNN here, else ours.
				lt.Kind, lt.Algo = stDW.String(), "cuDNN "+lt.Algo
			}
		case stDW:
			lt.Algo = dwAlgoName(rs.s)
		case stFC:
			lt.Algo = "goinfer warp per output"
		}
		res = append(res, lt)
	}
	return res, nil
}

func (i *graphInstance) Close() error {
	if i.closed {
		return nil
	}
	defer runtime.UnlockOSThread()
	if err := i.d.enter(); err != nil {
		return err
	}
	var err error
	if i.stream != 0 {
		err = i.d.rt.StreamSynchronize(i.stream)
	}
	i.release()
	i.closed = true
	i.m.mu.Lock()
	i.m.instances--
	i.m.mu.Unlock()
	return err
}

func (i *graphInstance) release() {
	rt := i.d.rt
	for _, pr := range i.preps {
		pr.destroy(i)
	}
	i.preps = nil
	i.m.libs.DNN.DestroyActivation(i.relu)
	i.m.libs.DNN.DestroyActivation(i.ident)
	if i.h != 0 {
		i.m.libs.DNN.Destroy(i.h)
		i.h = 0
	}
	if i.blas != 0 {
		i.m.libs.BLAS.Destroy(i.blas)
		i.blas = 0
	}
	if i.lt != 0 {
		i.m.libs.BLASLt.Destroy(i.lt)
		i.lt = 0
	}
	for _, p := range []cu.DevPtr{i.arena, i.ws, i.blasWs} {
		if p != 0 {
			rt.Free(p)
		}
	}
	i.arena, i.ws, i.blasWs = 0, 0, 0
	if i.stream != 0 {
		rt.StreamDestroy(i.stream)
		i.stream = 0
	}
}

// useSplitAttention reports whether an attention whose tensor-core kernel
// would take tiles blocks of 64 query rows (heads of hd) runs the key-split
// kernel instead: where those blocks leave SMs idle, as at batch 1, four
// times the blocks, each with a quarter of the keys per warp, finish
// sooner; with more blocks than SMs the plain kernel reads each key tile
// once for 64 queries, not 16, and keeps the GPU busy by itself.
func useSplitAttention(fp fusedPaths, hd, tiles int) bool {
	return fp.split && hd <= 64 && tiles < fp.sms
}
