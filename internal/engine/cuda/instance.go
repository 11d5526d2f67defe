package cuda

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"time"

	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
	"goinfer/internal/model"
)

// workspaceCap bounds the workspace an algorithm may use, during
// autotuning and after: algorithms that need more are skipped. Half
// precision keeps a worker within 2 GiB at batch 256; float32 (NCHW, twice
// the bytes) gets more, since its fastest algorithms for the wide early
// layers at large batches need it.
func workspaceCap(p precision) int64 {
	if p.elem == 4 {
		return 1 << 30
	}
	return 256 << 20
}

// tuneGraphMs is the device time one timing graph aims for: long enough
// that its launch and the events around it are noise, short enough that
// tuning a few dozen candidates per layer stays within a second.
const tuneGraphMs = 0.3

// tuneRepsFor is how many calls a timing graph holds for a convolution that
// cudnnFind timed at ms (0 when unknown).
func tuneRepsFor(ms float32) int {
	if ms <= 0 {
		return 20
	}
	return max(2, min(20, int(tuneGraphMs/ms)))
}

// findTime is Find's time for algo, or 0.
func findTime(perf []cu.ConvFwdPerf, algo int) float32 {
	for _, pf := range perf {
		if int(pf.Algo) == algo && pf.Status == 0 {
			return pf.Time
		}
	}
	return 0
}

// fusedKey identifies one fused-call tuning problem.
type fusedKey struct {
	algoKey
	relu, residual bool
}

// blasWorkspace is cuBLAS's own workspace per handle (its recommendation
// for Hopper), set explicitly so that it never allocates during capture.
const blasWorkspace = 32 << 20

// algoKey identifies one autotuning problem: a layer's shapes, the batch
// size and the precision. Identical layers (and other instances) share it.
type algoKey struct {
	n, c, h, w, k, r, stride, pad, groups int
	prec                                  engine.Precision
}

// planOp is one op of a plan: descriptors, algorithm and prepared kernel
// arguments for one batch size.
type planOp struct {
	l        *layer
	k        int       // layer index
	x, z, y  cu.DevPtr // input, residual, output activations
	xd, zd   cu.TensorDesc
	yd       cu.TensorDesc
	conv     cu.ConvDesc
	algo     int   // algorithm of the unfused call
	algoF    int   // algorithm of the fused call
	math     int   // the convolution's math type, or -1 when left at its default
	fused    bool  // cudnnConvolutionBiasActivationForward
	ws       int64 // workspace the chosen algorithm needs
	epilogue bool  // unfused conv followed by the epilogue kernel
	fn       cu.Function
	grid     int
	block    int
	args     *cu.KernelArgs
	n        int
	// mma, when set, runs the convolution and its epilogue as conv_mma
	// (convmma.go) with mmaArgs instead of cuDNN.
	mma     *mmaGeom
	mmaArgs *cu.KernelArgs
}

// plan is a forward pass lowered for one batch size.
type plan struct {
	n     int
	descs []cu.TensorDesc // per value
	ops   []*planOp
	exec  cu.GraphExec // captured graph, when compiled and prepared
	graph cu.Graph
	ws    int64
}

// instance is one worker's state: stream, handles, workspace, activations
// and plans. It is not safe for concurrent use.
type instance struct {
	m      *cudaModel
	d      *device
	dnn    *cu.DNN
	drv    *cu.Driver
	stream cu.Stream
	h      cu.DNNHandle
	blas   cu.BLASHandle

	acts     cu.DevPtr // all activation slots, one allocation
	actBytes int64
	slotPtr  []cu.DevPtr
	logits   cu.DevPtr // float32 [MaxBatch, classes]
	ws       cu.DevPtr
	wsSize   int64
	blasWs   cu.DevPtr
	// mmaScratch: conv_mma's tile counters then the float32 sums of its
	// split launches, both zero between launches; 0 where the precision
	// or an eager model has no conv_mma. sms: the GPU's multiprocessors.
	mmaScratch cu.DevPtr
	sms        int

	filters  []cu.FilterDesc // per layer (convs)
	biasDesc []cu.TensorDesc // per layer (convs with bias)
	relu     cu.ActivationDesc
	identity cu.ActivationDesc

	plans map[int]*plan
	tune  [2]cu.Event // timing the fused calls while tuning

	convArgs *cu.KernelArgs // input conversion, per Forward
	biasArgs *cu.KernelArgs // logits bias, per Forward
	inBytes  int            // bytes of one input image
	streamW  *stream        // the engine.Stream view of stream
	closed   bool

	ph *engine.Phases // cold-start phase timing (engine.PhasesEnv), or nil
}

// MemoryStats splits an instance's device memory, for reports.
type MemoryStats struct {
	Weights     int64 // shared by all instances of the model
	Workspace   int64 // cuDNN workspace plus cuBLAS workspace
	Activations int64 // activation slots plus the float32 logits buffer
}

// NewInstance allocates one worker's stream, handles, workspace and
// activations; with Compile it autotunes (once per layer shape and batch
// size across instances) and captures one CUDA graph per prepared batch size.
func (m *cudaModel) NewInstance(ctx context.Context) (engine.Instance, error) {
	defer runtime.UnlockOSThread()
	if err := m.dev.enter(); err != nil {
		return nil, err
	}
	i := &instance{m: m, d: m.dev, dnn: m.libs.DNN, drv: m.libs.Driver, plans: map[int]*plan{},
		convArgs: new(cu.KernelArgs), biasArgs: new(cu.KernelArgs), inBytes: m.info.InputBytes()}
	if err := i.init(ctx); err != nil {
		i.release()
		return nil, err
	}
	m.mu.Lock()
	m.instances++
	m.mu.Unlock()
	return i, nil
}

func (i *instance) init(ctx context.Context) error {
	m, rt := i.m, i.d.rt
	i.ph = engine.StartPhases("cuda instance")
	var err error
	if i.stream, err = rt.StreamCreate(); err != nil {
		return err
	}
	i.ph.Done("stream")
	i.streamW = &stream{d: i.d, s: i.stream, borrowed: true}
	if i.h, i.blas, err = newHandles(m.libs, i.d.ordinal); err != nil {
		return err
	}
	i.ph.Done("cuDNN and cuBLAS handles")
	if err := i.dnn.SetStream(i.h, i.stream); err != nil {
		return err
	}
	blas := m.libs.BLAS
	if err := blas.SetStream(i.blas, i.stream); err != nil {
		return err
	}
	if err := blas.SetMathMode(i.blas, m.prec.blasMath); err != nil {
		return err
	}
	if i.blasWs, err = i.d.alloc(blasWorkspace, "the cuBLAS workspace"); err != nil {
		return err
	}
	if err := blas.SetWorkspace(i.blas, i.blasWs, blasWorkspace); err != nil {
		return err
	}
	i.ph.Done("cuBLAS workspace")

	// Activations: every slot in one allocation, zeroed once so that no
	// stale bit pattern (a NaN) is ever read by a scaled-by-zero operand.
	const align = 256
	offs := make([]int64, len(m.slots.sizes))
	for s, size := range m.slots.sizes {
		offs[s] = i.actBytes
		i.actBytes += (size + align - 1) / align * align
	}
	if i.acts, err = i.d.alloc(i.actBytes, fmt.Sprintf("activations for batch %d (%d buffers)", m.opts.MaxBatch, len(offs))); err != nil {
		return err
	}
	i.slotPtr = make([]cu.DevPtr, len(offs))
	for s := range offs {
		i.slotPtr[s] = i.acts + cu.DevPtr(offs[s])
	}
	logitBytes := int64(m.opts.MaxBatch) * int64(m.graph.Classes) * 4
	if i.logits, err = i.d.alloc(logitBytes, "the logits buffer"); err != nil {
		return err
	}
	if err := rt.MemsetAsync(i.acts, 0, i.actBytes, i.stream); err != nil {
		return err
	}
	if m.kern.convMMA != 0 && m.opts.Compile {
		if err := i.initMMA(); err != nil {
			return err
		}
	}

	// Per-layer descriptors that do not depend on the batch size.
	i.filters = make([]cu.FilterDesc, len(m.layers))
	i.biasDesc = make([]cu.TensorDesc, len(m.layers))
	for k, l := range m.layers {
		if l.spec.kind != opConv {
			continue
		}
		c := l.node.Conv
		if i.filters[k], err = i.dnn.NewFilter4d(m.prec.dnnType, m.prec.format, c.OutC, l.in.C/c.Groups, l.k, l.k); err != nil {
			return fmt.Errorf("cuda engine: %s: %w", l.name, err)
		}
		if l.bias != 0 {
			if i.biasDesc[k], err = i.dnn.NewTensor4d(m.prec.format, m.prec.dnnType, 1, c.OutC, 1, 1); err != nil {
				return fmt.Errorf("cuda engine: %s: %w", l.name, err)
			}
		}
	}
	for k := range i.tune {
		if i.tune[k], err = rt.EventCreate(true); err != nil {
			return err
		}
	}
	if i.relu, err = i.dnn.NewActivation(cu.ActivationRelu); err != nil {
		return err
	}
	if i.identity, err = i.dnn.NewActivation(cu.ActivationIdentity); err != nil {
		return err
	}

	i.ph.Done("activations and descriptors")

	// Plans for the prepared batch sizes; with Compile, measured.
	t0 := time.Now()
	var findWs cu.DevPtr
	var findWsSize int64
	if m.opts.Compile {
		free, _, err := rt.MemGetInfo()
		if err != nil {
			return err
		}
		findWsSize = min(workspaceCap(m.prec), int64(free)/4)
		if findWs, err = i.d.alloc(findWsSize, "the autotuning workspace"); err != nil {
			return err
		}
		defer func() {
			if findWs != 0 {
				rt.Free(findWs)
			}
		}()
	}
	i.ph.Done("tuning workspace")
	sizes := append([]int(nil), m.opts.BatchSizes...)
	sort.Ints(sizes)
	for _, n := range sizes {
		if err := ctx.Err(); err != nil {
			return err
		}
		if i.plans[n] != nil {
			continue
		}
		wsCap := workspaceCap(m.prec)
		if findWs != 0 {
			wsCap = findWsSize
		}
		p, err := i.buildPlan(n, findWs, wsCap)
		if err != nil {
			return err
		}
		i.plans[n] = p
	}
	i.ph.Add("plan: the rest")
	i.ph.Flush()
	m.saveTuning()
	var need int64 = 1
	for _, p := range i.plans {
		need = max(need, p.ws)
	}
	if i.ws, err = i.d.alloc(need, "the cuDNN workspace"); err != nil {
		return err
	}
	i.wsSize = need
	if findWs != 0 {
		if err := rt.StreamSynchronize(i.stream); err != nil {
			return err
		}
		rt.Free(findWs)
		findWs = 0
	}
	i.ph.Done("workspace")
	if !m.opts.Compile {
		return rt.StreamSynchronize(i.stream)
	}
	for _, n := range sizes {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := i.capture(i.plans[n]); err != nil {
			return err
		}
	}
	i.ph.Done("capture and instantiate")
	m.addCompileTime(time.Since(t0))
	return nil
}

// buildPlan lowers the model for batch n: descriptors for every value,
// an algorithm per convolution (measured when findWs is set, else cuDNN's
// heuristics within the current workspace) and kernel arguments.
func (i *instance) buildPlan(n int, findWs cu.DevPtr, wsCap int64) (*plan, error) {
	m := i.m
	p := &plan{n: n, descs: make([]cu.TensorDesc, len(m.shapes))}
	for v, sl := range m.slots.valSlot {
		if sl < 0 || m.isPooled(model.Value(v)) {
			continue
		}
		d := m.shapes[v]
		td, err := i.dnn.NewTensor4d(m.prec.format, m.prec.dnnType, n, d.C, d.H, d.W)
		if err != nil {
			p.destroy(i)
			return nil, fmt.Errorf("cuda engine: value %d: %w", v, err)
		}
		p.descs[v] = td
	}
	for k, l := range m.layers {
		o, err := i.lowerOp(p, k, l, findWs, wsCap)
		if err != nil {
			p.destroy(i)
			return nil, fmt.Errorf("cuda engine: %s (batch %d): %w", l.name, n, err)
		}
		p.ops = append(p.ops, o)
		p.ws = max(p.ws, o.ws)
	}
	return p, nil
}

func (i *instance) ptr(v model.Value) cu.DevPtr {
	s := i.m.slots.valSlot[v]
	if s < 0 {
		return 0
	}
	return i.slotPtr[s]
}

func (i *instance) lowerOp(p *plan, k int, l *layer, findWs cu.DevPtr, wsCap int64) (*planOp, error) {
	m := i.m
	s := l.spec
	o := &planOp{l: l, k: k, n: p.n, x: i.ptr(s.in[0]), y: i.ptr(s.out), xd: p.descs[s.in[0]], yd: p.descs[s.out]}
	if len(s.in) > 1 {
		o.z, o.zd = i.ptr(s.in[1]), p.descs[s.in[1]]
	}
	n := int64(p.n)
	div := 1
	if !m.prec.nhwc {
		div = l.out.H * l.out.W
	}
	kernel := func(fn cu.Function, elems int64) {
		o.fn = fn
		o.grid, o.block = launchDims(elems)
		o.args = new(cu.KernelArgs)
	}
	switch s.kind {
	case opConv:
		c := l.node.Conv
		var err error
		if o.conv, err = i.dnn.NewConv2d(l.pad, l.stride, c.Groups, cu.DataFloat, m.prec.mathType); err != nil {
			return nil, err
		}
		perf, key, err := i.chooseAlgo(o, k, findWs, wsCap)
		if err != nil {
			return nil, err
		}
		if s.bias || s.residual || s.relu {
			o.fused = m.opts.Compile && l.bias != 0 && o.algoF >= 0
			o.epilogue = !o.fused
			elems := n * int64(l.out.Elements())
			kernel(m.kern.epilogue, elems)
			relu := 0
			if s.relu {
				relu = 1
			}
			o.args.Ptr(o.y).Ptr(o.y).Ptr(l.biasF32).Ptr(o.z).Int(int(elems)).Int(l.out.C).Int(div).Int(relu).Int(vecOK(elems, l.out.C, div, m.prec))
			if m.opts.Compile && l.bias != 0 && findWs != 0 {
				i.ph.Add("plan: the rest")
				if err := i.tuneFused(o, key, perf, findWs, wsCap); err != nil {
					return nil, err
				}
				i.ph.Add("plan: timing fused and unfused calls")
			}
		}
	case opScale:
		elems := n * int64(l.out.Elements())
		kernel(m.kern.scaleShift, elems)
		o.args.Ptr(o.y).Ptr(o.x).Ptr(l.scale).Ptr(l.scale + cu.DevPtr(4*l.out.C)).Int(int(elems)).Int(l.out.C).Int(div).Int(vecOK(elems, l.out.C, div, m.prec))
	case opReLU:
		elems := n * int64(l.out.Elements())
		kernel(m.kern.relu, elems)
		o.args.Ptr(o.y).Ptr(o.x).Int(int(elems)).Int(vecOK(elems, l.out.C, div, m.prec))
	case opAdd:
		elems := n * int64(l.out.Elements())
		kernel(m.kern.add, elems)
		o.args.Ptr(o.y).Ptr(o.x).Ptr(o.z).Int(int(elems)).Int(vecOK(elems, l.out.C, div, m.prec))
	case opMaxPool:
		pl := l.node.Pool
		kernel(m.kern.maxpool, n*int64(l.out.Elements()))
		o.args.Ptr(o.y).Ptr(o.x).Int(p.n).Int(l.in.C).Int(l.in.H).Int(l.in.W).Int(l.out.H).Int(l.out.W).
			Int(pl.K).Int(pl.Stride).Int(pl.Pad).Int(b2i(m.prec.nhwc))
	case opAvgPool:
		kernel(m.kern.avgpool, n*int64(l.out.C))
		o.args.Ptr(o.y).Ptr(o.x).Int(p.n).Int(l.in.C).Int(l.in.H * l.in.W).Int(b2i(m.prec.nhwc))
	case opLinear:
		o.y = i.logits
	}
	return o, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// chooseAlgo picks a convolution's algorithm: by measurement (cached per
// problem) when findWs is set, else by cuDNN's heuristics.
func (i *instance) chooseAlgo(o *planOp, k int, findWs cu.DevPtr, wsCap int64) ([]cu.ConvFwdPerf, algoKey, error) {
	m, l := i.m, o.l
	c := l.node.Conv
	key := algoKey{n: o.n, c: l.in.C, h: l.in.H, w: l.in.W, k: c.OutC, r: l.k, stride: l.stride, pad: l.pad, groups: c.Groups, prec: m.prec.p}
	var perf []cu.ConvFwdPerf
	var err error
	if findWs != 0 {
		m.mu.Lock()
		perf = m.algos[key]
		m.mu.Unlock()
		if perf == nil {
			i.ph.Add("plan: the rest")
			perf, err = i.dnn.FindConvForward(i.h, o.xd, o.x, i.filters[k], l.w, o.conv, o.yd, o.y, findWs, wsCap)
			if err != nil {
				return nil, key, err
			}
			i.ph.Add("plan: cudnnFind")
			m.mu.Lock()
			m.algos[key] = perf
			m.tuneDirty = true
			m.mu.Unlock()
		}
	} else {
		if perf, err = i.dnn.ConvForwardAlgorithms(i.h, o.xd, i.filters[k], o.conv, o.yd); err != nil {
			return nil, key, err
		}
	}
	best := -1
	for j, pf := range perf {
		if pf.Status != 0 {
			continue
		}
		ws, err := i.dnn.ConvForwardWorkspace(i.h, o.xd, i.filters[k], o.conv, o.yd, int(pf.Algo))
		if err != nil || ws > wsCap {
			continue
		}
		best = j
		o.algo, o.ws = int(pf.Algo), ws
		break
	}
	if best < 0 {
		return nil, key, fmt.Errorf("no cuDNN algorithm runs this convolution within a %s workspace", cu.FormatBytes(wsCap))
	}
	o.math = -1
	if m.prec.p != engine.FP32 {
		// Run with the math type the measurement (or heuristic) used.
		o.math = int(perf[best].MathType)
		if err := i.dnn.SetConvMath(o.conv, o.math); err != nil {
			return nil, key, err
		}
		// The workspace an algorithm needs depends on the math type: ask
		// again under the one it will run with, or the call can fail with
		// "workSpaceSizeInBytes < requiredWorkspace".
		ws, err := i.dnn.ConvForwardWorkspace(i.h, o.xd, i.filters[k], o.conv, o.yd, o.algo)
		if err != nil {
			return nil, key, err
		}
		o.ws = max(o.ws, ws)
	}
	o.algoF = o.algo
	if !l.spec.relu {
		// Legacy cuDNN fuses an identity activation only with
		// IMPLICIT_PRECOMP_GEMM; use it when it fits, else the epilogue.
		o.algoF = -1
		for _, pf := range perf {
			if pf.Status == 0 && int(pf.Algo) == cu.ConvFwdAlgoImplicitPrecompGemm {
				if ws, err := i.dnn.ConvForwardWorkspace(i.h, o.xd, i.filters[k], o.conv, o.yd, int(pf.Algo)); err == nil && ws <= wsCap {
					o.algoF = int(pf.Algo)
					o.ws = max(o.ws, ws)
				}
			}
		}
	}
	return perf, key, nil
}

// tuned is what tuneFused chose for one problem.
type tuned struct {
	fused int // algorithm of the fused call, or -1: convolution + epilogue
	plain int // algorithm of the convolution when not fused
	math  int // math type of the plain convolution (-1: the default)
	// splits and chunks, when splits > 0: conv_mma runs the convolution
	// and its epilogue instead of cuDNN (convmma.go).
	splits, chunks int
}

// tuneFused picks how a convolution with an epilogue runs, by timing the
// calls themselves: the fused call with each algorithm (cudnnFind times
// plain convolutions; with the bias, residual and activation fused the
// ranking can differ), and the plain convolution with each algorithm and
// math type Find offers followed by the epilogue kernel, both limited to
// what Find ranks within reach (tuneCandidates; Find's own ranking
// of small problems is unreliable: at batch 1 it put a 59 us algorithm
// first for a layer another runs in a fraction of that). Results are cached
// per problem for the model's other instances.
func (i *instance) tuneFused(o *planOp, key algoKey, perf []cu.ConvFwdPerf, ws cu.DevPtr, wsCap int64) error {
	m, s := i.m, o.l.spec
	fk := fusedKey{key, s.relu, s.residual}
	m.mu.Lock()
	choice, ok := m.fused[fk]
	m.mu.Unlock()
	wsOf := func(a int) int64 {
		w, err := i.dnn.ConvForwardWorkspace(i.h, o.xd, i.filters[o.k], o.conv, o.yd, a)
		if err != nil {
			return -1
		}
		return w
	}
	setMath := func(mt int) error {
		if mt < 0 || mt == o.math {
			return nil
		}
		if err := i.dnn.SetConvMath(o.conv, mt); err != nil {
			return err
		}
		o.math = mt
		return nil
	}
	apply := func(c tuned) error {
		if c.splits > 0 {
			return i.applyMMA(o, c)
		}
		if c.fused >= 0 {
			o.fused, o.epilogue, o.algoF = true, false, c.fused
			o.ws = max(o.ws, wsOf(c.fused))
			return nil
		}
		if err := setMath(c.math); err != nil {
			return err
		}
		o.fused, o.epilogue, o.algo = false, true, c.plain
		o.ws = max(o.ws, wsOf(c.plain))
		return nil
	}
	if ok {
		// A choice from the tuning cache was made under another process's
		// workspace limit: re-tune if it does not fit this one.
		a := choice.plain
		if choice.fused >= 0 {
			a = choice.fused
		}
		if w := wsOf(a); w >= 0 && w <= wsCap {
			// A split convolution that does not fit this problem (a cache
			// file edited or from another build) is re-tuned, not fatal.
			if err := apply(choice); err == nil || choice.splits == 0 {
				return err
			}
		}
	}
	act, zd := i.relu, o.zd
	if !s.relu {
		act = i.identity
	}
	if o.z == 0 {
		zd = o.yd
	}
	plainCall := func(algo int) func() error {
		return func() error {
			if err := i.dnn.ConvForward(i.h, o.xd, o.x, i.filters[o.k], o.l.w, o.conv, algo, ws, wsCap, o.yd, o.y); err != nil {
				return err
			}
			return i.drv.Launch(o.fn, o.grid, o.block, i.stream, o.args)
		}
	}
	reps := tuneRepsFor(findTime(perf, o.algo))
	fusedMath := o.math
	chosen := variant{o.algo, -1}
	if m.prec.p != engine.FP32 {
		chosen.math = o.math
	}
	cands := tuneCandidates(perf, chosen, m.prec.p != engine.FP32, exhaustiveTuning(key.n, m.tuneAll))
	best, bestT := -1, float32(0)
	var log []string
	for _, a := range cands.fused {
		if w := wsOf(a); w < 0 || w > wsCap {
			continue
		}
		t, err := i.timeCalls(func() error {
			return i.dnn.ConvBiasActForward(i.h, o.xd, o.x, i.filters[o.k], o.l.w, o.conv, a, ws, wsCap,
				zd, o.z, i.biasDesc[o.k], o.l.bias, act, o.yd, o.y)
		}, reps)
		if err != nil {
			log = append(log, fmt.Sprintf("%s: %v", cu.ConvFwdAlgoName(a), err))
			continue // this algorithm does not fuse this configuration
		}
		log = append(log, fmt.Sprintf("%s %.4f ms", cu.ConvFwdAlgoName(a), t))
		if best < 0 || t < bestT {
			best, bestT = a, t
		}
	}
	plain := tuned{fused: -1, plain: -1, math: -1}
	var plainT float32
	for _, v := range cands.plain {
		if err := setMath(v.math); err != nil {
			return err
		}
		if w := wsOf(v.algo); w < 0 || w > wsCap {
			continue
		}
		t, err := i.timeCalls(plainCall(v.algo), reps)
		if err != nil {
			log = append(log, fmt.Sprintf("unfused %s: %v", cu.ConvFwdAlgoName(v.algo), err))
			continue
		}
		log = append(log, fmt.Sprintf("unfused %s (math %d) + epilogue %.4f ms", cu.ConvFwdAlgoName(v.algo), v.math, t))
		if plain.plain < 0 || t < plainT {
			plain, plainT = tuned{fused: -1, plain: v.algo, math: v.math}, t
		}
	}
	if plain.plain < 0 {
		return fmt.Errorf("cuda engine: %s (batch %d): no cuDNN algorithm ran: %s", o.l.name, o.n, strings.Join(log, ", "))
	}
	// Fused wins ties: a separate epilogue pass costs memory traffic that
	// short timings understate.
	choice = plain
	cudnnT := plainT
	if best >= 0 && plainT >= 0.8*bestT {
		choice = tuned{fused: best, plain: o.algo, math: fusedMath}
		cudnnT = bestT
		if err := setMath(fusedMath); err != nil {
			return err
		}
	}
	// conv_mma must win clearly: cuDNN's kernels are the tested default.
	force := hasExperiment(m.opts.GraphExperiments, "forcemma")
	if g, t, ok := i.tuneMMA(o, reps, &log); ok && (force || t < 0.9*cudnnT) {
		choice = tuned{fused: -1, plain: o.algo, math: o.math, splits: g.splits, chunks: g.chunks}
	}
	m.progress("cuda: tuning %s (batch %d): %s", o.l.name, o.n, strings.Join(log, ", "))
	m.mu.Lock()
	m.fused[fk] = choice
	m.tuneDirty = true
	m.mu.Unlock()
	return apply(choice)
}

// timeCalls returns the device time of one call of run on the instance's
// stream (timeCaptured): batch 1's choices came out differently from one
// process to the next when its calls were timed one by one.
func (i *instance) timeCalls(run func() error, reps int) (float32, error) {
	return timeCaptured(i.d.rt, i.stream, i.tune[0], i.tune[1], run, reps)
}

// isPooled reports whether v is global average pooling's float32 output,
// which only the linear layer (cuBLAS) reads: it needs no descriptor.
func (m *cudaModel) isPooled(v model.Value) bool {
	for _, n := range m.graph.Nodes {
		if n.Output == v && n.Op == model.OpGlobalAvgPool {
			return true
		}
	}
	return false
}

// runOps enqueues a plan's ops on the stream.
func (i *instance) runOps(p *plan) error {
	for _, o := range p.ops {
		if err := i.runOp(o); err != nil {
			return fmt.Errorf("cuda engine: %s (batch %d): %w", o.l.name, p.n, err)
		}
	}
	return nil
}

func (i *instance) runOp(o *planOp) error {
	m := i.m
	switch o.l.spec.kind {
	case opConv:
		if o.mma != nil {
			return i.drv.Launch2D(m.kern.convMMA, o.mma.tiles, o.mma.splits, mmaThreads, i.stream, o.mmaArgs)
		}
		if o.fused {
			act := i.relu
			if !o.l.spec.relu {
				act = i.identity
			}
			zd := o.zd
			if o.z == 0 {
				zd = o.yd
			}
			return i.dnn.ConvBiasActForward(i.h, o.xd, o.x, i.filters[o.k], o.l.w, o.conv, o.algoF, i.ws, i.wsSize,
				zd, o.z, i.biasDesc[o.k], o.l.bias, act, o.yd, o.y)
		}
		if err := i.dnn.ConvForward(i.h, o.xd, o.x, i.filters[o.k], o.l.w, o.conv, o.algo, i.ws, i.wsSize, o.yd, o.y); err != nil {
			return err
		}
		if o.epilogue {
			return i.drv.Launch(o.fn, o.grid, o.block, i.stream, o.args)
		}
		return nil
	case opLinear:
		lin := o.l.node.Linear
		return m.libs.BLAS.GemmEx(i.blas, cu.OpT, cu.OpN, lin.Out, o.n, lin.In, o.l.w, m.prec.blasType, lin.In,
			o.x, m.prec.blasType, lin.In, o.y, cu.CudaR32F, lin.Out, m.prec.blasComp)
	}
	return i.drv.Launch(o.fn, o.grid, o.block, i.stream, o.args)
}

// settle runs a plan once outside capture, turning fused convolutions that
// cuDNN refuses into convolution + epilogue, and lets the libraries finish
// any lazy set-up (kernel loading) that capture would not allow.
func (i *instance) settle(p *plan) error {
	for _, o := range p.ops {
		err := i.runOp(o)
		if err != nil && o.fused && (errors.Is(err, cu.ErrNotSupported) || isBadParam(err)) {
			i.m.noteFallback(o.l.name, err)
			o.fused, o.epilogue = false, true
			err = i.runOp(o)
		}
		if err != nil {
			return fmt.Errorf("cuda engine: %s (batch %d): %w", o.l.name, p.n, err)
		}
	}
	return i.d.rt.StreamSynchronize(i.stream)
}

func isBadParam(err error) bool {
	var e *cu.Error
	return errors.As(err, &e) && e.Lib == cu.LibDNN && e.Code/1000 == 2
}

func (m *cudaModel) noteFallback(name string, err error) {
	m.mu.Lock()
	seen := m.fallbackLog[name]
	m.fallbackLog[name] = true
	m.mu.Unlock()
	if !seen {
		m.progress("cuda: %s: fused convolution refused (%v); running convolution + epilogue kernel", name, err)
	}
}

// capture records a plan's ops as a CUDA graph on the instance's stream.
func (i *instance) capture(p *plan) error {
	rt := i.d.rt
	if err := i.settle(p); err != nil {
		return err
	}
	i.ph.Done(fmt.Sprintf("batch %d: first run", p.n))
	if err := rt.StreamBeginCapture(i.stream, cu.CaptureModeThreadLocal); err != nil {
		return fmt.Errorf("cuda engine: capturing batch %d: %w", p.n, err)
	}
	runErr := i.runOps(p)
	g, endErr := rt.StreamEndCapture(i.stream)
	if runErr != nil || endErr != nil {
		if g != 0 {
			rt.GraphDestroy(g)
		}
		return fmt.Errorf("cuda engine: capturing batch %d: %w", p.n, errors.Join(runErr, endErr))
	}
	exec, err := rt.GraphInstantiate(g)
	if err != nil {
		rt.GraphDestroy(g)
		return fmt.Errorf("cuda engine: instantiating the graph of batch %d: %w", p.n, err)
	}
	p.graph, p.exec = g, exec
	if err := rt.GraphUpload(exec, i.stream); err != nil {
		return err
	}
	return rt.StreamSynchronize(i.stream)
}

func (i *instance) Stream() engine.Stream { return i.streamW }

// Forward enqueues: the input conversion kernel (reading in), the batch's
// graph (or its ops), and the bias kernel writing float32 logits to out.
// It pins the goroutine to its OS thread for the duration and makes the
// device current, so callers need not. It neither allocates device memory
// nor waits for the device; the first Forward of a batch size that was not
// prepared builds its plan (descriptors and heuristic algorithms) first and,
// compiled, runs it once to check its fused calls (a one-time wait).
func (i *instance) Forward(in, out engine.Buffer, n int) error {
	if err := i.checkBatch(n); err != nil {
		return err
	}
	inB, err := asBuffer(in, 0, n*i.inBytes)
	if err != nil {
		return fmt.Errorf("cuda engine: input: %w", err)
	}
	outB, err := asBuffer(out, 0, n*i.m.graph.Classes*4)
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
// conversion kernel, and the logits written by the bias kernel, in
// page-locked host memory.
func (i *instance) ForwardHost(in, out []byte, n int) error {
	if err := i.checkBatch(n); err != nil {
		return err
	}
	return i.d.forwardHost(in, n*i.inBytes, out, n*i.m.graph.Classes*4, func(in, out cu.DevPtr) error { return i.forward(in, out, n) })
}

func (i *instance) checkBatch(n int) error { return checkBatch(i.closed, n, i.m.opts.MaxBatch) }

// forward enqueues batch n from in to out; the device is current.
func (i *instance) forward(in, out cu.DevPtr, n int) error {
	p := i.plans[n]
	if p == nil {
		var err error
		if p, err = i.lazyPlan(n); err != nil {
			return err
		}
	}
	if err := i.enqueueInput(in, n); err != nil {
		return err
	}
	if p.exec != 0 {
		if err := i.d.rt.GraphLaunch(p.exec, i.stream); err != nil {
			return err
		}
	} else if err := i.runOps(p); err != nil {
		return err
	}
	return i.enqueueLogits(out, n)
}

func (i *instance) enqueueInput(in cu.DevPtr, n int) error {
	m := i.m
	st := m.stem.in
	grid, block := launchDims(int64(n) * int64(st.H*st.W))
	a := i.convArgs.Reset().Ptr(in).Ptr(i.ptr(0)).Int(n).Int(m.graph.InChannels).Int(m.opts.Height).Int(m.opts.Width).
		Int(st.H).Int(st.W).Int(st.C).Int(b2i(m.stem.s2d)).Int(m.stem.s2dPad).Int(b2i(m.prec.nhwc)).Ptr(m.affine)
	return i.drv.Launch(m.kern.convert, grid, block, i.stream, a)
}

func (i *instance) enqueueLogits(out cu.DevPtr, n int) error {
	m := i.m
	last := m.layers[len(m.layers)-1]
	elems := int64(n) * int64(m.graph.Classes)
	grid, block := launchDims(elems)
	a := i.biasArgs.Reset().Ptr(out).Ptr(i.logits).Ptr(last.biasF32).Int(int(elems)).Int(m.graph.Classes)
	return i.drv.Launch(m.kern.addBias, grid, block, i.stream, a)
}

// lazyPlan builds (once) the plan of a batch size that was not prepared:
// heuristic algorithms within the existing workspace, run without a graph.
func (i *instance) lazyPlan(n int) (*plan, error) {
	p, err := i.buildPlan(n, 0, i.wsSize)
	if err != nil {
		return nil, err
	}
	if i.m.opts.Compile {
		// Check the fused calls outside of any capture, as capture does.
		if err := i.settle(p); err != nil {
			p.destroy(i)
			return nil, err
		}
	}
	i.plans[n] = p
	return p, nil
}

func (i *instance) MemoryBytes() int64 {
	s := i.Memory()
	return s.Workspace + s.Activations
}

// Memory splits the device memory the instance and its model hold.
func (i *instance) Memory() MemoryStats {
	return MemoryStats{
		Weights:     i.m.weightBytes,
		Workspace:   i.wsSize + blasWorkspace,
		Activations: i.actBytes + int64(i.m.opts.MaxBatch)*int64(i.m.graph.Classes)*4,
	}
}

func (p *plan) destroy(i *instance) {
	rt := i.d.rt
	if p.exec != 0 {
		rt.GraphExecDestroy(p.exec)
		p.exec = 0
	}
	if p.graph != 0 {
		rt.GraphDestroy(p.graph)
		p.graph = 0
	}
	for _, o := range p.ops {
		i.dnn.DestroyConv(o.conv)
	}
	for _, d := range p.descs {
		i.dnn.DestroyTensor(d)
	}
	p.ops, p.descs = nil, nil
}

func (i *instance) Close() error {
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

// release frees whatever init managed to create.
func (i *instance) release() {
	rt := i.d.rt
	for _, p := range i.plans {
		p.destroy(i)
	}
	i.plans = nil
	for k := range i.filters {
		i.dnn.DestroyFilter(i.filters[k])
		i.dnn.DestroyTensor(i.biasDesc[k])
	}
	for k, e := range i.tune {
		if e != 0 {
			rt.EventDestroy(e)
			i.tune[k] = 0
		}
	}
	i.dnn.DestroyActivation(i.relu)
	i.dnn.DestroyActivation(i.identity)
	if i.h != 0 {
		i.dnn.Destroy(i.h)
	}
	if i.blas != 0 {
		i.m.libs.BLAS.Destroy(i.blas)
	}
	for _, p := range []cu.DevPtr{i.acts, i.logits, i.ws, i.blasWs, i.mmaScratch} {
		rt.Free(p)
	}
	i.acts, i.logits, i.ws, i.blasWs, i.mmaScratch = 0, 0, 0, 0, 0
	if i.stream != 0 {
		rt.StreamDestroy(i.stream)
		i.stream = 0
	}
}
