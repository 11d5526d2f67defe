package cuda

import (
	"bytes"
	"compress/gzip"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"time"

	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// graphFatbinGz (graphfatbin.go) and graphPTX are tools/kernels/graph.cu,
// the general-graph executor's kernels, compiled by tools/kernels/build.sh:
// nvcc's machine code (no JIT compile at load), gzipped because the machine
// code for six GPU generations is 4-5 times its compressed size in the
// repository and the binary, and clang's PTX. graphSums records the
// source each was built from; the fatbin is loaded only when it was built
// from the same source as the PTX (a kernel edited where only clang is
// installed leaves the fatbin behind until nvcc rebuilds it).
var (
	//go:embed kernels/graph.ptx
	graphPTX []byte
	//go:embed kernels/graph.sha256
	graphSums string
)

// graphImage picks the kernels to load: the fatbin when it is current.
func graphImage() []byte {
	if img := currentImage(graphSums, "graph", graphFatbinGz, nil); img != nil {
		if fat, err := graphFatbin(); err == nil {
			return fat
		}
	}
	return graphPTX
}

// graphFatbin is the embedded fatbin, decompressed once per process.
var graphFatbin = sync.OnceValues(func() ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(graphFatbinGz))
	if err != nil {
		return nil, fmt.Errorf("cuda engine: kernels/graph.fatbin.gz: %w", err)
	}
	fat, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("cuda engine: kernels/graph.fatbin.gz: %w", err)
	}
	return fat, nil
})

var _ engine.GraphLoader = Engine{}

// graphKernels are graph.cu's kernels for one storage dtype.
type graphKernels struct {
	mod                                             cu.Module
	ew, ewFlat, affine, pool, reduce, softmax, norm cu.Function
	castIn, castOut, reduceCL                       cu.Function
	softmaxWarp, normWarp, dw, dwVec, affineVec     cu.Function
	scaleCL, padCL, normVec, normGroup              cu.Function
	// dwTile: the tiled depthwise kernels by name less the dtype suffix
	// (dwTileName); 16-bit dtypes only.
	dwTile                             map[string]cu.Function
	affineRows, affineRowsVec, ewChain cu.Function
	attn                               cu.Function
	fc                                 cu.Function
	// attnMMA64, attnMMA128: the tensor-core attention for heads of up to
	// 64 and 128 (16-bit types only; 0 for float32); attnLdm64 and
	// attnLdm128 the same with ldmatrix fragment loads.
	attnMMA64, attnMMA128, attnLdm64, attnLdm128 cu.Function
	// attnSplit64: the key-split tensor-core attention for heads of up to
	// 64, 16 query rows per block (few query tiles: batch 1).
	attnSplit64 cu.Function
}

// loadGraphKernels loads graph.cu's kernels for one dtype suffix: from
// file (engine.Options.GraphKernelFile) when it is not empty, else the
// embedded fatbin or PTX.
func loadGraphKernels(d *cu.Driver, suffix, file string) (*graphKernels, error) {
	if file != "" {
		img, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("cuda engine: graph kernels: %w", err)
		}
		mod, err := d.ModuleLoad(img)
		if err != nil {
			return nil, fmt.Errorf("cuda engine: loading the graph kernels from %s: %w", file, err)
		}
		return graphFunctions(d, mod, suffix)
	}
	mod, err := d.ModuleLoad(graphImage())
	if err != nil {
		var perr error
		if mod, perr = d.ModuleLoad(graphPTX); perr != nil {
			return nil, fmt.Errorf("cuda engine: loading the graph kernels: %w (and their PTX: %w)", err, perr)
		}
	}
	return graphFunctions(d, mod, suffix)
}

// graphFunctions looks up the kernels of one storage dtype in mod,
// unloading it if one is missing.
func graphFunctions(d *cu.Driver, mod cu.Module, suffix string) (*graphKernels, error) {
	var err error
	k := &graphKernels{mod: mod}
	for _, f := range []struct {
		dst  *cu.Function
		name string
	}{
		{&k.ew, "g_ew_"}, {&k.ewFlat, "g_ew_flat_"}, {&k.affine, "g_affine_"}, {&k.pool, "g_pool_"},
		{&k.reduce, "g_reduce_"}, {&k.softmax, "g_softmax_"}, {&k.norm, "g_layernorm_"},
		{&k.castIn, "g_cast_in_"}, {&k.castOut, "g_cast_out_"}, {&k.reduceCL, "g_reduce_cl_"},
		{&k.softmaxWarp, "g_softmax_warp_"}, {&k.normWarp, "g_layernorm_warp_"}, {&k.dw, "g_dwconv_"},
		{&k.dwVec, "g_dwconv_vec_"}, {&k.affineVec, "g_affine_vec_"}, {&k.scaleCL, "g_scale_cl_"},
		{&k.padCL, "g_pad_cl_"}, {&k.normVec, "g_layernorm_vec_"}, {&k.normGroup, "g_layernorm_group_"}, {&k.affineRows, "g_affine_rows_"}, {&k.affineRowsVec, "g_affine_rows_vec_"},
		{&k.ewChain, "g_ew_chain_"}, {&k.attn, "g_attn_"}, {&k.fc, "g_fc_"},
	} {
		if *f.dst, err = d.ModuleFunction(mod, f.name+suffix); err != nil {
			d.ModuleUnload(mod)
			return nil, err
		}
	}
	if suffix != "f32" {
		k.dwTile = map[string]cu.Function{}
		for _, kk := range []int{3, 5, 7} {
			for _, st := range []int{1, 2} {
				g := &convGeom{c: 8, kh: kk, kw: kk, strH: st, strW: st, dilH: 1, dilW: 1}
				for _, tw := range dwTiles(g, 2) {
					name := dwTileName(g, tw)
					if k.dwTile[name], err = d.ModuleFunction(mod, name+suffix); err != nil {
						d.ModuleUnload(mod)
						return nil, err
					}
				}
			}
		}
	}
	if suffix != "f32" {
		for _, f := range []struct {
			dst  *cu.Function
			name string
		}{{&k.attnMMA64, "g_attn_mma64_"}, {&k.attnMMA128, "g_attn_mma128_"}, {&k.attnLdm64, "g_attn_ldm64_"}, {&k.attnLdm128, "g_attn_ldm128_"},
			{&k.attnSplit64, "g_attn_split64_"}} {
			if *f.dst, err = d.ModuleFunction(mod, f.name+suffix); err != nil {
				d.ModuleUnload(mod)
				return nil, err
			}
		}
	}
	return k, nil
}

// dwKernel is the kernel that runs depthwise step s and the number of
// threads it takes.
func (k *graphKernels) dwKernel(s *gstep, elem int) (cu.Function, int64, error) {
	n := dwWork(s, elem)
	switch {
	case s.tile != 0:
		f, ok := k.dwTile[dwTileName(s.conv, s.tile)]
		if !ok {
			return 0, 0, fmt.Errorf("no tiled depthwise kernel %s", dwTileName(s.conv, s.tile))
		}
		return f, n, nil
	case s.vec:
		return k.dwVec, n, nil
	}
	return k.dw, n, nil
}

// LoadGraph implements engine.GraphLoader: a general graph (one input,
// batched along a leading dynamic dimension) on the GPU. Each batch size
// is bound and optimized (ir.Optimize: batch norms folded, epilogues fused
// into convolutions and products) and planned as it is first used; the
// prepared sizes (opts.BatchSizes, or MaxBatch) at load. Activations are
// stored in the precision's dtype (float32 for fp32 and tf32), NCHW.
// With opts.Compile, convolution algorithms are chosen by measurement and
// each prepared batch size is captured as a CUDA graph per instance.
func (Engine) LoadGraph(ctx context.Context, g *ir.Graph, opts engine.Options) (engine.Model, error) {
	if g == nil {
		return nil, errors.New("cuda engine: LoadGraph of a nil graph")
	}
	waitPrepared(opts.Device)
	libs, err := cu.Load()
	if err != nil {
		return nil, fmt.Errorf("cuda engine: %w", err)
	}
	if err := cu.Usable(); err != nil {
		return nil, fmt.Errorf("cuda engine: %w", err)
	}
	prec, err := precisionOf(opts.Precision)
	if err != nil {
		return nil, err
	}
	inSpecs, outSpecs, err := engine.GraphSpecs(g, &opts)
	if err != nil {
		return nil, fmt.Errorf("cuda engine: %w", err)
	}
	switch opts.InputDType {
	case tensor.Invalid, tensor.Float32:
		opts.InputDType = tensor.Float32
	default:
		return nil, fmt.Errorf("cuda engine: input dtype %s: a general graph takes its input as float32", opts.InputDType)
	}
	if opts.MaxBatch < 1 {
		return nil, fmt.Errorf("cuda engine: MaxBatch %d must be at least 1", opts.MaxBatch)
	}
	if c, h, w, ok := (engine.Info{Inputs: inSpecs}).ImageInput(); ok {
		if (opts.Height != 0 && opts.Height != h) || (opts.Width != 0 && opts.Width != w) {
			return nil, fmt.Errorf("cuda engine: graph %q takes %dx%dx%d images, not the %dx%d asked for", g.Name, c, h, w, opts.Height, opts.Width)
		}
	}
	for _, n := range opts.BatchSizes {
		if n < 1 || n > opts.MaxBatch {
			return nil, fmt.Errorf("cuda engine: batch size %d to prepare is outside 1..MaxBatch (%d)", n, opts.MaxBatch)
		}
	}
	if len(opts.BatchSizes) == 0 {
		opts.BatchSizes = []int{opts.MaxBatch}
	}
	dev, err := newDevice(libs, opts.Device)
	if err != nil {
		return nil, err
	}
	defer runtime.UnlockOSThread()
	if err := dev.enter(); err != nil {
		return nil, err
	}
	if _, _, err := dev.rt.MemGetInfo(); err != nil {
		return nil, fmt.Errorf("cuda engine: initializing device %d: %w", opts.Device, err)
	}
	start := time.Now()
	m := &graphModel{g: g, dev: dev, libs: libs, opts: opts, prec: prec, plans: map[int]*devPlan{},
		consts: map[constKey]cu.DevPtr{}, algos: map[string]convPick{}, dwTimes: map[dwShape]dwTimed{},
		ltAlgos: map[cu.LtProblem]cu.LtAlgo{}}
	if m.kern, err = loadGraphKernels(libs.Driver, prec.suffix, opts.GraphKernelFile); err != nil {
		return nil, err
	}
	if prec.nhwc {
		m.loadDWTuning()
	}
	m.fused = m.checkFused()
	for _, w := range m.fused.why {
		if opts.Progress != nil {
			opts.Progress("cuda engine: %s", w)
		}
	}
	for _, n := range opts.BatchSizes {
		if _, err := m.plan(ctx, n); err != nil {
			m.Close()
			return nil, err
		}
	}
	arch := g.Name
	if a := g.Meta["arch"]; a != "" {
		arch = a
	}
	m.info = engine.Info{
		Engine: "cuda", Device: dev.name, Arch: arch, Inputs: inSpecs, Outputs: outSpecs,
		Precision: opts.Precision, Compiled: opts.Compile, MaxBatch: opts.MaxBatch,
	}
	m.info.WeightBytes = m.weightBytes
	if opts.Compile {
		m.info.CompileTime = time.Since(start)
	}
	return m, ctx.Err()
}

// constKey is one uploaded constant: a tensor as stored, row-major or (a
// channels-last convolution's filter) KRSC.
type constKey struct {
	t    *tensor.Tensor
	krsc bool
	cpad int // KRSC with C padded to cpad with zeros
}

// devPlan is a plan with its device-side constants: the strided kernel's
// index descriptions and the float32 epilogue vectors, uploaded once per
// model and shared by its instances.
type devPlan struct {
	p     *gplan
	meta  []cu.DevPtr // per step: its ewMeta (stEW)
	bias  []cu.DevPtr // per step: a fused convolution's bias in the storage dtype
	scale []cu.DevPtr // per step: scale or layer-norm gain (float32)
	shift []cu.DevPtr // per step: shift, bias or layer-norm bias (float32)
	bufs  []cu.DevPtr // allocations to free
}

// graphModel is a general graph loaded on a GPU.
type graphModel struct {
	g    *ir.Graph
	dev  *device
	libs *cu.Libs
	opts engine.Options
	prec precision
	kern *graphKernels
	info engine.Info
	// fused: the fused paths that passed their check at load.
	fused fusedPaths

	mu          sync.Mutex
	plans       map[int]*devPlan
	consts      map[constKey]cu.DevPtr // weights in the storage dtype
	weightBytes int64
	algos       map[string]convPick        // convolution algorithm per problem (compiled: measured)
	dwTimes     map[dwShape]dwTimed        // depthwise lowerings measured (graphdwtune.go)
	ltAlgos     map[cu.LtProblem]cu.LtAlgo // cuBLASLt algorithm per fused product (compiled: measured, graphlt.go)
	tuneDevice  string                     // the tuning cache's device line
	instances   int
	closed      bool
}

// plan returns batch n's plan, lowering and uploading it on first use.
// The caller must have entered the device.
func (m *graphModel) plan(ctx context.Context, n int) (*devPlan, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if dp, ok := m.plans[n]; ok {
		return dp, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, _, err := ir.Optimize(m.g, n)
	if err != nil {
		return nil, fmt.Errorf("cuda engine: graph %q at batch %d: %w", m.g.Name, n, err)
	}
	opts := fuseOptions(planOptions{chains: m.opts.FuseChains, noAttention: !m.fused.attn}, m.opts.GraphExperiments)
	if m.prec.nhwc {
		var cands map[*ir.Node]prologue
		if opts.dwPrologue {
			cands = prologueCandidates(b, true)
		}
		opts.dw = m.depthwiseChoice(depthwiseShapes(b, cands))
	}
	p, err := planGraphWith(b, n, m.prec.elem, m.prec.nhwc, opts)
	if err != nil {
		return nil, err
	}
	for _, v := range p.vals {
		if v.elems >= 1<<31 {
			return nil, fmt.Errorf("cuda engine: value %q of batch %d holds %d elements, more than the kernels index; use a smaller batch", v.name, n, v.elems)
		}
	}
	dp := &devPlan{p: p, meta: make([]cu.DevPtr, len(p.steps)), bias: make([]cu.DevPtr, len(p.steps)), scale: make([]cu.DevPtr, len(p.steps)), shift: make([]cu.DevPtr, len(p.steps))}
	rt := m.dev.rt
	upload := func(b []byte, what string) (cu.DevPtr, error) {
		ptr, err := m.dev.alloc(int64(len(b)), what)
		if err != nil {
			return 0, err
		}
		dp.bufs = append(dp.bufs, ptr)
		if err := rt.MemcpyHtoD(ptr, b); err != nil {
			return 0, fmt.Errorf("cuda engine: uploading %s: %w", what, err)
		}
		return ptr, nil
	}
	// Small per-step vectors go into one buffer.
	var host []byte
	type fix struct {
		dst *cu.DevPtr
		off int
	}
	var fixes []fix
	put := func(dst *cu.DevPtr, b []byte) {
		for len(host)%16 != 0 {
			host = append(host, 0)
		}
		fixes = append(fixes, fix{dst, len(host)})
		host = append(host, b...)
	}
	for k, s := range p.steps {
		if (s.kind == stEW && !s.flat && !s.chanScale) || s.kind == stDW || s.kind == stAttn {
			b := make([]byte, 4*len(s.meta))
			for i, v := range s.meta {
				u := uint32(v)
				b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
			}
			put(&dp.meta[k], b)
		}
		if s.kind == stChain {
			b := make([]byte, 4*len(s.cmeta))
			for i, v := range s.cmeta {
				u := uint32(v)
				b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
			}
			put(&dp.meta[k], b)
		}
		if s.scale != nil {
			put(&dp.scale[k], tensor.F32Bytes(s.scale))
		}
		if s.fused {
			put(&dp.bias[k], encode(s.shift, m.prec.tensorDType))
		}
		if s.shift != nil {
			put(&dp.shift[k], tensor.F32Bytes(s.shift))
		}
	}
	if len(host) > 0 {
		base, err := upload(host, "step parameters")
		if err != nil {
			dp.free(rt)
			return nil, err
		}
		for _, f := range fixes {
			*f.dst = base + cu.DevPtr(f.off)
		}
	}
	for i := range p.vals {
		v := &p.vals[i]
		if v.kind != gConst {
			continue
		}
		for _, k := range constUses(p, i) {
			if _, done := m.consts[k]; done {
				continue
			}
			f, err := v.cnst.ToFloat32()
			if err != nil {
				dp.free(rt)
				return nil, fmt.Errorf("cuda engine: constant %q: %w", v.name, err)
			}
			if k.krsc {
				f = toKRSC(f, v.shape, k.cpad)
			}
			b := encode(f, m.prec.tensorDType)
			ptr, err := m.dev.alloc(int64(max(len(b), 1)), "weights")
			if err != nil {
				dp.free(rt)
				return nil, err
			}
			if err := rt.MemcpyHtoD(ptr, b); err != nil {
				rt.Free(ptr)
				dp.free(rt)
				return nil, fmt.Errorf("cuda engine: uploading %q: %w", v.name, err)
			}
			m.consts[k] = ptr
			m.weightBytes += int64(len(b))
		}
	}
	m.plans[n] = dp
	return dp, nil
}

// constUses lists how steps read constant value i: as stored, or as a
// channels-last convolution's filter (KRSC, maybe channel-padded).
func constUses(p *gplan, i int) []constKey {
	seen := map[constKey]bool{}
	var keys []constKey
	use := func(k constKey) {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	t := p.vals[i].cnst
	for _, s := range p.steps {
		operands := []int{s.a, s.b, s.res}
		for _, c := range s.chain {
			operands = append(operands, c.b)
		}
		for _, v := range operands {
			if v >= 0 && p.root(v) == i {
				use(constKey{t: t})
			}
		}
		if s.kind == stConv && s.conv.weight == i {
			use(constKey{t: t, krsc: s.conv.nhwc, cpad: s.conv.cpad})
		}
	}
	return keys
}

// toKRSC reorders a [K, C, R, S] filter as [K, R, S, C'], the layout of
// cuDNN's channels-last filters, with C' = cpad (> C: zeros) or C.
func toKRSC(f []float32, s []int, cpad int) []float32 {
	if len(s) != 4 {
		return f
	}
	k, c, r, q := s[0], s[1], s[2], s[3]
	cp := max(cpad, c)
	out := make([]float32, k*r*q*cp)
	for o := 0; o < k; o++ {
		for ch := 0; ch < c; ch++ {
			for y := 0; y < r; y++ {
				for x := 0; x < q; x++ {
					out[((o*r+y)*q+x)*cp+ch] = f[((o*c+ch)*r+y)*q+x]
				}
			}
		}
	}
	return out
}

func (dp *devPlan) free(rt *cu.Runtime) {
	for _, b := range dp.bufs {
		rt.Free(b)
	}
	dp.bufs = nil
}

func (m *graphModel) Info() engine.Info { return m.info }

func (m *graphModel) Device() engine.Device { return m.dev }

func (m *graphModel) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("cuda engine: model closed twice")
	}
	if m.instances > 0 {
		return fmt.Errorf("cuda engine: Close with %d instances still open", m.instances)
	}
	defer runtime.UnlockOSThread()
	if err := m.dev.enter(); err != nil {
		return err
	}
	m.closed = true
	rt := m.dev.rt
	for _, dp := range m.plans {
		dp.free(rt)
	}
	for _, p := range m.consts {
		rt.Free(p)
	}
	m.plans, m.consts = nil, nil
	if m.kern != nil {
		m.libs.Driver.ModuleUnload(m.kern.mod)
		m.kern = nil
	}
	return nil
}
