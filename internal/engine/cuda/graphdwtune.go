package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	cu "goinfer/internal/cuda"
	"goinfer/internal/tensor"
)

// dwTimed is one depthwise shape's measurement: each lowering's best time
// per call (milliseconds) and the choice.
type dwTimed struct {
	CuDNN bool    `json:"cudnn"`    // cuDNN's convolution was faster
	Own   float32 `json:"own_ms"`   // graph.cu's chosen kernel (pickOwn), epilogue fused
	Tile  int     `json:"tile"`     // its tile width (0: the untiled kernel)
	Lib   float32 `json:"cudnn_ms"` // cuDNN's fastest algorithm and the bias kernel; 0: none ran
	Algo  int     `json:"algo"`     // that algorithm (cudnnConvolutionFwdAlgo_t), -1 if none
	// ownTimes lists every own kernel's time, for the progress line; not
	// cached.
	ownTimes string
}

// dwEntry is a tuning-cache line of a depthwise measurement.
type dwEntry struct {
	Shape     dwShape `json:"shape"`
	Precision string  `json:"precision"`
	dwTimed
}

// depthwiseChoice returns the measured lowerings of shapes (missing ones
// take the planner's default). Shapes not measured yet are timed when the
// model is compiled (eager models take the engine's kernel untimed, as
// they take cuDNN's heuristic algorithms) and the tuning cache, if any, is
// updated. The caller holds m.mu and has entered the device.
func (m *graphModel) depthwiseChoice(shapes []dwShape) map[dwShape]dwTimed {
	var missing []dwShape
	for _, s := range shapes {
		if _, ok := m.dwTimes[s]; !ok {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 && m.opts.Compile {
		// A failed measurement (the scratch buffers not fitting, say)
		// costs speed, not the model: the shapes it did not reach keep
		// the default lowering.
		if err := m.timeDepthwise(missing); err != nil && m.opts.Progress != nil {
			m.opts.Progress("cuda: depthwise timing stopped, defaults kept: %v", err)
		}
		m.saveDWTuning()
	}
	out := map[dwShape]dwTimed{}
	for _, s := range shapes {
		if t, ok := m.dwTimes[s]; ok {
			out[s] = t
		}
	}
	return out
}

// dwBench is the scratch state of depthwise timing: a stream, a cuDNN
// handle and buffers for the largest shape.
type dwBench struct {
	m          *graphModel
	stream     cu.Stream
	h          cu.DNNHandle
	start, end cu.Event
	x, y, ws   cu.DevPtr
	wLib       cu.DevPtr // the filter in the storage dtype (cuDNN)
	params     cu.DevPtr // meta, float32 filter and bias (our kernel)
	bufs       []cu.DevPtr
}

// timeDepthwise measures both lowerings of each shape into m.dwTimes.
func (m *graphModel) timeDepthwise(shapes []dwShape) (err error) {
	b := &dwBench{m: m}
	defer func() { err = errors.Join(err, b.close()) }()
	if err := b.open(shapes); err != nil {
		return err
	}
	// The first shape once untimed: the GPU leaves its idle clock before
	// the measurements count.
	if _, err := b.time(shapes[0]); err != nil {
		return fmt.Errorf("cuda engine: timing the depthwise convolution %s: %w", shapes[0], err)
	}
	for _, s := range shapes {
		t, err := b.time(s)
		if err != nil {
			return fmt.Errorf("cuda engine: timing the depthwise convolution %s: %w", s, err)
		}
		m.dwTimes[s] = t
		if m.opts.Progress != nil {
			m.opts.Progress("cuda: depthwise %s: goinfer %.3f ms (%s; %s), cuDNN %.3f ms (%s): %s", s, t.Own, dwTileLabel(t.Tile), t.ownTimes, t.Lib,
				cu.ConvFwdAlgoName(t.Algo), map[bool]string{true: "cuDNN", false: "goinfer"}[t.CuDNN])
		}
	}
	return nil
}

// dwMetaBytes is the room for a depthwise step's description (its first
// dwMetaPre+3 entries) before the filter in the timing parameters, a
// multiple of 16 as the kernels' vector loads of the filter need.
const dwMetaBytes = 80

// dwTimingSlack is the zeroed room after each depthwise timing buffer.
const dwTimingSlack = 4 << 20

func (b *dwBench) open(shapes []dwShape) error {
	m, rt := b.m, b.m.dev.rt
	var xb, yb, wb, pb int64
	for _, s := range shapes {
		xb = max(xb, int64(s.N*s.C*s.H*s.W))
		yb = max(yb, int64(s.N*s.C*s.OH*s.OW))
		wb = max(wb, int64(s.C*s.KH*s.KW))
		pb = max(pb, dwMetaBytes+4*int64(s.C*s.KH*s.KW+s.C))
	}
	el := int64(m.prec.elem)
	var err error
	if b.stream, err = rt.StreamCreate(); err != nil {
		return err
	}
	if b.h, err = m.libs.DNN.Create(); err != nil {
		return err
	}
	if err := m.libs.DNN.SetStream(b.h, b.stream); err != nil {
		return err
	}
	if b.start, err = rt.EventCreate(true); err != nil {
		return err
	}
	if b.end, err = rt.EventCreate(true); err != nil {
		return err
	}
	for _, a := range []struct {
		p *cu.DevPtr
		n int64
	}{{&b.x, xb * el}, {&b.y, yb * el}, {&b.ws, graphWorkspace}, {&b.wLib, wb * el}, {&b.params, pb}} {
		// dwTimingSlack past each buffer: compute-sanitizer found the
		// vector kernel reading past the exact-size timing buffers, which
		// a zeroed shape description explains (see the synchronization
		// below); kept as a margin because a fault here poisons the device
		// context.
		size := max(a.n, 256) + dwTimingSlack
		if *a.p, err = m.dev.alloc(size, "depthwise timing"); err != nil {
			return err
		}
		b.bufs = append(b.bufs, *a.p)
		// Zeros: the kernels' speed does not depend on the values.
		if err := rt.MemsetAsync(*a.p, 0, size, b.stream); err != nil {
			return err
		}
	}
	// The zeroing runs on b.stream, which does not wait for, nor is waited
	// for by, the legacy-stream copies that time() makes of each shape's
	// description: without this wait a zeroing could land after the first
	// copy and leave the kernel a zero channel count.
	return rt.StreamSynchronize(b.stream)
}

func (b *dwBench) close() error {
	rt := b.m.dev.rt
	var errs []error
	if b.stream != 0 {
		errs = append(errs, rt.StreamSynchronize(b.stream))
	}
	for _, p := range b.bufs {
		errs = append(errs, rt.Free(p))
	}
	for _, e := range []cu.Event{b.start, b.end} {
		if e != 0 {
			rt.EventDestroy(e)
		}
	}
	if b.h != 0 {
		errs = append(errs, b.m.libs.DNN.Destroy(b.h))
	}
	if b.stream != 0 {
		errs = append(errs, rt.StreamDestroy(b.stream))
	}
	return errors.Join(errs...)
}

// dwRounds is the timed rounds of dwReps calls each candidate gets.
const (
	dwRounds = 5
	dwReps   = 5
)

// bestOf is the shortest time per call of each of runs, over dwRounds
// timed rounds of dwReps calls after two untimed ones. The rounds
// interleave the candidates: the GPU's clock still rises during the first
// milliseconds of timing, which made whichever ran last look faster when
// each candidate was timed in one go (the same shape's choice changed
// between processes). A run that fails (an algorithm cuDNN refuses for
// the problem) has its error and no time.
func (b *dwBench) bestOf(runs []func() error) ([]float32, []error) {
	best := make([]float32, len(runs))
	errs := make([]error, len(runs))
	for i, run := range runs {
		best[i] = math.MaxFloat32
		for k := 0; k < 2 && errs[i] == nil; k++ {
			errs[i] = run()
		}
	}
	for r := 0; r < dwRounds; r++ {
		for i, run := range runs {
			if errs[i] != nil {
				continue
			}
			ms, err := b.round(run)
			if err != nil {
				errs[i] = err
				continue
			}
			best[i] = min(best[i], ms)
		}
	}
	return best, errs
}

// round is one timed round of run: milliseconds per call.
func (b *dwBench) round(run func() error) (float32, error) {
	rt := b.m.dev.rt
	if err := rt.EventRecord(b.start, b.stream); err != nil {
		return 0, err
	}
	for k := 0; k < dwReps; k++ {
		if err := run(); err != nil {
			return 0, err
		}
	}
	if err := rt.EventRecord(b.end, b.stream); err != nil {
		return 0, err
	}
	if err := rt.EventSynchronize(b.end); err != nil {
		return 0, err
	}
	ms, err := rt.EventElapsed(b.start, b.end)
	if err != nil {
		return 0, err
	}
	return ms / dwReps, nil
}

// time measures shape s both ways: our kernels as the plan would launch
// them (bias fused; the untiled kernel and each tile width), and cuDNN's
// implicit precomputed GEMM and heuristic first choice, each followed by
// the bias kernel the plan would add. cudnnFind is not used: it tries
// every algorithm, and on the shapes where cuDNN is slow (7x7 filters,
// about 10 ms a call at batch 256) that alone took seconds.
func (b *dwBench) time(s dwShape) (dwTimed, error) {
	m, dnn, drv := b.m, b.m.libs.DNN, b.m.libs.Driver
	g := s.geom()
	el := m.prec.elem
	st := dwStep(g, -1, -1, make([]float32, s.C*s.KH*s.KW), make([]float32, s.C), int64(s.N*s.C*s.OH*s.OW), el, ewCopy, 0, 0)
	st.setPre(g.pre)
	// meta, then the filter, then the bias, as plan() lays them out.
	host := make([]byte, dwMetaBytes, dwMetaBytes+4*(len(st.scale)+len(st.shift)))
	for k, v := range st.meta[:dwMetaPre+3] {
		binary.LittleEndian.PutUint32(host[4*k:], uint32(v))
	}
	host = append(host, tensor.F32Bytes(st.scale)...)
	host = append(host, tensor.F32Bytes(st.shift)...)
	// Nothing of the last shape may still read the parameters: the copy
	// below is not ordered with b.stream.
	if err := m.dev.rt.StreamSynchronize(b.stream); err != nil {
		return dwTimed{}, err
	}
	if err := m.dev.rt.MemcpyHtoD(b.params, host); err != nil {
		return dwTimed{}, err
	}
	meta, w, bias := b.params, b.params+dwMetaBytes, b.params+dwMetaBytes+cu.DevPtr(4*len(st.scale))
	t := dwTimed{Algo: -1, Own: math.MaxFloat32}
	tiles := []int{0}
	if st.vec {
		for _, tw := range dwTiles(g, el) {
			if (tw != dwRows || !hasExperiment(m.opts.GraphExperiments, "nodwrows")) &&
				!(isSlide(tw) && hasExperiment(m.opts.GraphExperiments, "nodwslide")) &&
				!(isBlock(tw) && hasExperiment(m.opts.GraphExperiments, "nodwsmem")) {
				tiles = append(tiles, tw)
			}
		}
	}
	var runs []func() error
	for _, tile := range tiles {
		st.tile = tile
		fn, n, err := m.kern.dwKernel(st, el)
		if err != nil {
			return t, err
		}
		grid, block := dwLaunch(st, n)
		args := f32arg(f32arg(new(cu.KernelArgs).Ptr(b.y).Ptr(b.x).Ptr(w).Ptr(bias).Ptr(0).Ptr(meta).Int(int(n)).Int(ewCopy), 0), 0)
		runs = append(runs, func() error { return drv.Launch(fn, grid, block, b.stream, args) })
	}
	xd, yd, wd, cd, algos, err := b.candidates(g)
	defer func() {
		dnn.DestroyTensor(xd)
		dnn.DestroyTensor(yd)
		dnn.DestroyFilter(wd)
		dnn.DestroyConv(cd)
	}()
	if err != nil {
		algos = nil // cuDNN cannot run it: ours.
	}
	vn := 16 / el
	ewArgs := f32arg(f32arg(new(cu.KernelArgs).Ptr(b.y).Ptr(b.y).Ptr(0).Ptr(bias).Ptr(0).Int(int(st.n)/vn).Int(s.C).Int(ewCopy), 0), 0)
	ewFn, ewN := m.kern.affineVec, st.n/int64(vn)
	if s.C%vn != 0 {
		ewArgs = f32arg(f32arg(new(cu.KernelArgs).Ptr(b.y).Ptr(b.y).Ptr(0).Ptr(bias).Ptr(0).Int64(st.n).Int(s.C).Int(1).Int(ewCopy), 0), 0)
		ewFn, ewN = m.kern.affine, st.n
	}
	eg, eb := gridFor(ewN)
	// With a prologue, cuDNN's lowering leaves the activation to the
	// producer's epilogue: a pass over the input, timed with it (in place
	// on the zeros, which it keeps: preOK).
	preFn, pg, pb := cu.Function(0), 0, 0
	var preArgs *cu.KernelArgs
	if pre := g.pre; pre.op != ewCopy {
		nx := int64(s.N * s.C * s.H * s.W)
		if s.C%vn == 0 {
			preFn, preArgs = m.kern.affineVec, f32arg(f32arg(new(cu.KernelArgs).Ptr(b.x).Ptr(b.x).Ptr(0).Ptr(0).Ptr(0).Int(int(nx)/vn).Int(s.C).Int(pre.op), pre.p0), pre.p1)
			nx /= int64(vn)
		} else {
			preFn, preArgs = m.kern.affine, f32arg(f32arg(new(cu.KernelArgs).Ptr(b.x).Ptr(b.x).Ptr(0).Ptr(0).Ptr(0).Int64(nx).Int(s.C).Int(1).Int(pre.op), pre.p0), pre.p1)
		}
		pg, pb = gridFor(nx)
	}
	for _, algo := range algos {
		runs = append(runs, func() error {
			if preArgs != nil {
				if err := drv.Launch(preFn, pg, pb, b.stream, preArgs); err != nil {
					return err
				}
			}
			if err := dnn.ConvForward(b.h, xd, b.x, wd, b.wLib, cd, algo, b.ws, graphWorkspace, yd, b.y); err != nil {
				return err
			}
			return drv.Launch(ewFn, eg, eb, b.stream, ewArgs)
		})
	}
	times, errs := b.bestOf(runs)
	own := map[int]float32{}
	for i, tile := range tiles {
		if errs[i] != nil {
			return t, errs[i]
		}
		own[tile] = times[i]
	}
	t.Tile, t.Own = pickOwn(own, dwTileWidth(g, el))
	labels := make([]string, len(tiles))
	for i, tile := range tiles {
		labels[i] = fmt.Sprintf("%s %.4f", dwTileLabel(tile), own[tile])
	}
	t.ownTimes = strings.Join(labels, ", ")
	for j, algo := range algos {
		if errs[len(tiles)+j] != nil {
			continue // an algorithm cuDNN refuses for this problem
		}
		if lib := times[len(tiles)+j]; t.Algo < 0 || lib < t.Lib {
			t.Lib, t.Algo = lib, algo
		}
	}
	t.CuDNN = t.Algo >= 0 && beats(t.Lib, t.Own)
	return t, nil
}

// dwMargin is how much faster than the default a depthwise lowering must
// time to be chosen when the default takes under dwShortMS. Such kernels
// (batch 1: 5-20 us) are close to the launch interval, and one kernel
// timed in a loop ranks candidates a few percent apart by noise: a near
// tie keeps the default. Longer kernels (large batches) time reliably and
// the faster wins.
const (
	dwMargin  = 0.10
	dwShortMS = 0.05
)

// beats reports whether a time of ms is faster than that of the default,
// def: by more than dwMargin for short kernels.
func beats(ms, def float32) bool {
	if def < dwShortMS {
		return ms < def*(1-dwMargin)
	}
	return ms < def
}

// pickOwn is the tile width (0: untiled) to run among the measured times
// of our kernels: the default tile unless another beats it.
func pickOwn(times map[int]float32, def int) (tile int, ms float32) {
	tile, ms = def, math.MaxFloat32
	if d, ok := times[def]; ok {
		ms = d
	}
	best, bestMS := def, ms
	for w, t := range times {
		if t < bestMS || (t == bestMS && w < best) {
			best, bestMS = w, t
		}
	}
	if best != def && beats(bestMS, ms) {
		return best, bestMS
	}
	if ms == math.MaxFloat32 {
		return best, bestMS
	}
	return def, ms
}

// candidates are the descriptors of g and the cuDNN algorithms to time
// for it: implicit precomputed GEMM (the fastest on every depthwise shape
// cudnnFind was tried on, H200, cuDNN 9.19) and the heuristic's first
// choice, those that fit the workspace.
func (b *dwBench) candidates(g *convGeom) (xd, yd cu.TensorDesc, wd cu.FilterDesc, cd cu.ConvDesc, algos []int, err error) {
	m, dnn := b.m, b.m.libs.DNN
	if xd, err = dnn.NewTensor4d(cu.TensorNHWC, m.prec.dnnType, g.n, g.c, g.h, g.w); err != nil {
		return
	}
	if yd, err = dnn.NewTensor4d(cu.TensorNHWC, m.prec.dnnType, g.n, g.k, g.oh, g.ow); err != nil {
		return
	}
	if wd, err = dnn.NewFilter4d(m.prec.dnnType, cu.TensorNHWC, g.k, 1, g.kh, g.kw); err != nil {
		return
	}
	if cd, err = dnn.NewConv2dGeneral(g.padH, g.padW, g.strH, g.strW, g.dilH, g.dilW, g.groups, cu.DataFloat, m.prec.mathType); err != nil {
		return
	}
	try := []int{cu.ConvFwdAlgoImplicitPrecompGemm}
	if perf, herr := dnn.ConvForwardAlgorithms(b.h, xd, wd, cd, yd); herr == nil {
		for _, pf := range perf {
			if pf.Status == 0 {
				if int(pf.Algo) != cu.ConvFwdAlgoImplicitPrecompGemm {
					try = append(try, int(pf.Algo))
				}
				break
			}
		}
	}
	for _, a := range try {
		need, werr := dnn.ConvForwardWorkspace(b.h, xd, wd, cd, yd, a)
		if werr == nil && need <= graphWorkspace {
			algos = append(algos, a)
		}
	}
	if len(algos) == 0 {
		err = fmt.Errorf("no cuDNN algorithm fits a %d MiB workspace", graphWorkspace>>20)
	}
	return
}

// loadDWTuning reads the depthwise measurements of m's precision from the
// tuning cache, if there is one for this device.
func (m *graphModel) loadDWTuning() {
	if m.opts.TuningCache == "" {
		return
	}
	var f *tuneFile
	m.tuneDevice, _, f = openTuning(m.opts.TuningCache, m.libs, m.dev.ordinal, m.progress)
	if f == nil {
		return
	}
	for s, t := range f.depthwise(m.opts.Precision.String()) {
		m.dwTimes[s] = t
	}
}

func (m *graphModel) progress(format string, args ...any) {
	if m.opts.Progress != nil {
		m.opts.Progress(format, args...)
	}
}

// saveDWTuning writes m's depthwise measurements into the tuning cache,
// keeping what the file holds for other problems and precisions.
func (m *graphModel) saveDWTuning() {
	if m.opts.TuningCache == "" {
		return
	}
	if m.tuneDevice == "" {
		m.tuneDevice = tuneDevice(m.libs, m.dev.ordinal)
	}
	path := tunePath(m.opts.TuningCache, m.tuneDevice)
	tuneSaveMu.Lock()
	defer tuneSaveMu.Unlock()
	f, err := readTuneFile(path, m.tuneDevice)
	if err != nil || f == nil {
		f = &tuneFile{Format: tuneFormat, Device: m.tuneDevice}
	}
	f.setDepthwise(m.opts.Precision.String(), m.dwTimes)
	if err := writeAtomic(path, f); err != nil && m.opts.Progress != nil {
		m.opts.Progress("cuda: saving the tuning cache: %v", err)
	}
}

// dwTileLabel names a depthwise kernel choice (dwTimed.Tile) in progress
// lines.
func dwTileLabel(tile int) string {
	switch {
	case tile == dwRows:
		return "row split"
	case isSlide(tile):
		w, _ := dwSlideWidth(tile)
		return fmt.Sprintf("sliding %d", w)
	case isBlock(tile):
		side, _, _ := dwBlockShape(tile)
		return fmt.Sprintf("shared %dx%d", side, side)
	case tile > 0:
		return fmt.Sprintf("tile %d", tile)
	}
	return "vector"
}
