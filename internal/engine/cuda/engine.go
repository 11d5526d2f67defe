// Package cuda is goinfer's GPU engine ("--engine cuda"): convolutions by
// cuDNN, the linear layer by cuBLAS, memory, streams, events and CUDA graphs
// by the CUDA runtime, and a few custom kernels (input conversion, the eager
// path's elementwise ops, pooling) from embedded PTX. The libraries are
// loaded at run time (package goinfer/internal/cuda), so importing this
// package costs nothing on machines without a GPU: the engine then reports
// itself unavailable.
//
// Eager (Options.Compile false) runs one library call or kernel per graph
// node, with cuDNN's heuristic algorithm choice, as eager PyTorch does.
// Compiled folds batch norms into the convolutions, runs each convolution
// with its bias, residual add and ReLU as one
// cudnnConvolutionBiasActivationForward, picks each layer's algorithm by
// measuring (cudnnFindConvolutionForwardAlgorithmEx, then timing the fused
// call itself where it is long enough to time; both cached per layer shape
// and batch size, so later instances reuse them), and captures the forward
// of each prepared batch size as one CUDA graph per instance.
//
// fp16 and bf16 run channels-last (NHWC) so that tensor cores are used. The
// input (float32, float16 or uint8 NCHW) is converted on the GPU by one
// kernel, which for a stride-2 stem (ResNet's 7x7) also rearranges it
// space-to-depth: 2x2 pixel blocks become 12 channels (padded to 16), and the
// stem runs as a stride-1 4x4 convolution that tensor cores handle well,
// with the same arithmetic. The linear layer runs in float32 and logits
// always come back as float32.
//
// General graphs (ONNX models, torchvision architectures; Engine.LoadGraph)
// are lowered from the IR per batch size (graphplan.go, pure and tested
// without a GPU): convolutions through cuDNN (grouped ones included) with
// bias, residual and ReLU fused into cudnnConvolutionBiasActivationForward
// where cuDNN allows, depthwise convolutions, products (cuBLAS, strided
// batched) and every other op through the kernels of tools/kernels/graph.cu;
// values share arena slots by liveness; fp16 and bf16 keep the 4-d values
// around convolutions channels-last.
//
// Engine.Prepare (engine.Preparer) creates a device's context and its first
// library handles, and lets cuBLAS set itself up, while the caller is still
// building the model: Load then starts from a ready device.
//
// Every call that touches CUDA pins its goroutine to the OS thread for the
// call and makes the model's device current first, so callers need not lock
// threads.
package cuda

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
	"goinfer/internal/hugepage"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
)

func init() { engine.Register(Engine{}) }

// Engine is the cuda engine. Its zero value is ready to use.
type Engine struct{}

// Name is "cuda".
func (Engine) Name() string { return "cuda" }

// Available says whether the libraries load and a GPU is visible.
func (Engine) Available() error { return cu.Usable() }

// stemOptions returns the stem mode and pad channel count opts asks for
// (engine.Options.Stem, StemChannels), with their defaults.
func stemOptions(opts engine.Options) (mode string, channels int, err error) {
	mode, channels = opts.Stem, opts.StemChannels
	switch mode {
	case "":
		mode = stemS2D
	case stemS2D, stemPad, stemNone:
	default:
		return "", 0, fmt.Errorf("cuda engine: stem %q is not one of %s, %s, %s", mode, stemS2D, stemPad, stemNone)
	}
	switch {
	case channels == 0:
		channels = 8
	case channels < 1 || channels > 16:
		return "", 0, fmt.Errorf("cuda engine: stem channel count %d is not between 1 and 16", channels)
	}
	return mode, channels, nil
}

// layer is a lowered op with its shapes and device weights, shared by the
// model's instances.
type layer struct {
	spec opSpec
	node *model.Node
	name string
	in   model.Dims // per image, of in[0] as stored
	out  model.Dims
	// k, stride, pad are a convolution's geometry as run (the stem's
	// differs from the graph's in space-to-depth form).
	k, stride, pad int
	w              cu.DevPtr // conv filter or linear weights, in the precision's type
	bias           cu.DevPtr // conv bias in the precision's type (fused call)
	biasF32        cu.DevPtr // conv or linear bias as float32 (kernels)
	scale          cu.DevPtr // batch norm: C scales then C shifts, float32
}

// cudaModel is a graph loaded on a GPU.
type cudaModel struct {
	dev    *device
	libs   *cu.Libs
	opts   engine.Options
	prec   precision
	graph  *model.Graph
	layers []*layer
	shapes []model.Dims // per value; value 0 as stored (see stem)
	stem   stemSpec
	slots  slotPlan
	kern   *kernels
	affine cu.DevPtr // uint8 input normalization, or 0

	weights     cu.DevPtr
	weightBytes int64

	mu          sync.Mutex
	info        engine.Info
	algos       map[algoKey][]cu.ConvFwdPerf // cudnnFind results, shared by instances
	fused       map[fusedKey]tuned           // tuning results, shared by instances
	tuneAll     bool                         // time every candidate (Options.TuneAll)
	tuneDirty   bool                         // results added since the tuning cache was read or written
	tuneDevice  string                       // what the tuning cache is keyed by (Options.TuningCache)
	saveMu      sync.Mutex                   // orders writes of the tuning cache
	instances   int
	fallbackLog map[string]bool
}

// Load uploads g's weights (folded and fused first with opts.Compile) and
// prepares kernels; autotuning and graph capture happen per instance.
func (Engine) Load(ctx context.Context, g *model.Graph, opts engine.Options) (engine.Model, error) {
	ph := engine.StartPhases("cuda load")
	waitPrepared(opts.Device)
	ph.Done("waiting for Prepare")
	libs, err := cu.Load()
	if err != nil {
		return nil, fmt.Errorf("cuda engine: %w", err)
	}
	if err := cu.Usable(); err != nil {
		return nil, fmt.Errorf("cuda engine: %w", err)
	}
	if err := checkOptions(&opts); err != nil {
		return nil, err
	}
	prec, err := precisionOf(opts.Precision)
	if err != nil {
		return nil, err
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("cuda engine: %w", err)
	}
	ph.Done("libraries")
	dev, err := newDevice(libs, opts.Device)
	if err != nil {
		return nil, err
	}
	defer runtime.UnlockOSThread()
	if err := dev.enter(); err != nil {
		return nil, err
	}
	ph.Done("device")

	m := &cudaModel{dev: dev, libs: libs, opts: opts, prec: prec, algos: map[algoKey][]cu.ConvFwdPerf{}, fused: map[fusedKey]tuned{}, fallbackLog: map[string]bool{}}
	m.tuneAll = opts.TuneAll
	if opts.Compile {
		m.loadTuning()
	}
	var compile time.Duration
	m.graph = g
	if opts.Compile {
		t0 := time.Now()
		if m.graph, err = model.Fuse(g); err != nil {
			return nil, fmt.Errorf("cuda engine: %w", err)
		}
		compile += time.Since(t0)
		ph.Done("fuse")
	}
	ops, err := lower(m.graph)
	if err != nil {
		return nil, err
	}
	if m.shapes, err = m.graph.Shapes(opts.Height, opts.Width); err != nil {
		return nil, fmt.Errorf("cuda engine: %w", err)
	}
	mode, channels, err := stemOptions(opts)
	if err != nil {
		return nil, err
	}
	m.stem = planStem(m.graph, m.shapes, prec.nhwc, mode, channels)
	m.shapes[0] = m.stem.in
	if m.stem.in.C > 16 {
		return nil, fmt.Errorf("cuda engine: %d input channels are more than the input conversion handles (16)", m.stem.in.C)
	}
	for v, d := range m.shapes {
		if int64(opts.MaxBatch)*int64(d.Elements()) > maxElements {
			return nil, fmt.Errorf("cuda engine: batch %d at %dx%d makes value %d hold %d elements, more than the kernels index (2^31); use a smaller MaxBatch",
				opts.MaxBatch, opts.Height, opts.Width, v, int64(opts.MaxBatch)*int64(d.Elements()))
		}
	}
	m.slots = planSlots(m.graph, ops, func(v model.Value) int64 { return m.valueBytes(v) })

	// A runtime call that needs the context makes sure the primary
	// context exists before the driver API loads modules into it.
	ph.Done("plan")
	if _, _, err := dev.rt.MemGetInfo(); err != nil {
		return nil, fmt.Errorf("cuda engine: initializing device %d: %w", opts.Device, err)
	}
	ph.Done("context")
	if m.kern, err = loadKernels(libs.Driver, opts.KernelFile, opts.InputDType, prec); err != nil {
		return nil, err
	}
	ph.Done("kernels")
	if err := m.upload(ops, ph); err != nil {
		m.Close()
		return nil, err
	}
	m.info = engine.Info{
		Engine:      "cuda",
		Device:      dev.name,
		Arch:        m.graph.Arch.Name(),
		Precision:   opts.Precision,
		Compiled:    opts.Compile,
		MaxBatch:    opts.MaxBatch,
		CompileTime: compile,
		WeightBytes: m.weightBytes,
	}
	m.info.Inputs, m.info.Outputs = engine.ClassifierSpecs(opts.InputDType, m.graph.InChannels, opts.Height, opts.Width, m.graph.Classes)
	return m, ctx.Err()
}

func checkOptions(o *engine.Options) error {
	if o.MaxBatch < 1 {
		return fmt.Errorf("cuda engine: MaxBatch %d must be at least 1", o.MaxBatch)
	}
	if o.Height < 1 || o.Width < 1 {
		return fmt.Errorf("cuda engine: image size %dx%d must be positive (set Options.Height and Width)", o.Height, o.Width)
	}
	if o.InputDType == tensor.Invalid {
		o.InputDType = tensor.Float32
	}
	for _, n := range o.BatchSizes {
		if n < 1 || n > o.MaxBatch {
			return fmt.Errorf("cuda engine: batch size %d to prepare is outside 1..MaxBatch (%d)", n, o.MaxBatch)
		}
	}
	if len(o.BatchSizes) == 0 {
		o.BatchSizes = []int{o.MaxBatch}
	}
	return nil
}

// upload lays out every weight for the device (hostWeights) and copies
// them all in one allocation.
func (m *cudaModel) upload(ops []opSpec, ph *engine.Phases) error {
	host, blobs, err := m.hostWeights(ops)
	if err != nil {
		return err
	}
	ph.Done("weights on the host")
	p, err := m.dev.alloc(int64(len(host)), "model weights")
	if err != nil {
		return err
	}
	m.weights, m.weightBytes = p, int64(len(host))
	if err := m.dev.rt.MemcpyHtoD(p, host); err != nil {
		return fmt.Errorf("cuda engine: uploading weights: %w", err)
	}
	ph.Done("weights upload")
	for _, b := range blobs {
		*b.dst = p + cu.DevPtr(b.off)
	}
	return nil
}

// weightBlob is where one tensor of the weight image goes: its offset in
// the image, and the layer field that gets its device address.
type weightBlob struct {
	dst *cu.DevPtr
	off int64
}

// hostWeights builds m.layers and the weight image: every tensor in the
// device's layout and precision, each 256-byte aligned (as cuDNN likes), in
// one host buffer. The tensors are converted concurrently, in pieces of
// about weightPiece bytes, straight into the image: converted one after
// another into buffers of their own, then copied, ResNet-18's took 0.23 s
// of a cold start on an H200 machine.
func (m *cudaModel) hostWeights(ops []opSpec) ([]byte, []weightBlob, error) {
	// A job is one tensor: size bytes made of parts independent pieces
	// (output channels, elements), fill writes parts [lo, hi) into out,
	// which is zero and size bytes long.
	type job struct {
		dst   *cu.DevPtr
		size  int
		parts int
		fill  func(out []byte, lo, hi int)
	}
	var jobs []job
	add := func(dst *cu.DevPtr, size, parts int, fill func([]byte, int, int)) {
		jobs = append(jobs, job{dst, size, parts, fill})
	}
	addF32 := func(dst *cu.DevPtr, v []float32, dt tensor.DType) {
		add(dst, len(v)*dt.Size(), len(v), func(out []byte, lo, hi int) { encodeInto(out, v, dt, lo, hi) })
	}
	for _, s := range ops {
		n := m.graph.Nodes[s.node]
		l := &layer{spec: s, node: n, name: n.Name, in: m.shapes[s.in[0]], out: m.shapes[s.out]}
		switch s.kind {
		case opConv:
			c := n.Conv
			l.k, l.stride, l.pad = c.K, c.Stride, c.Pad
			if s.node == m.stem.node {
				l.k, l.stride, l.pad = m.stem.k, m.stem.stride, m.stem.pad
			}
			if s.node == m.stem.node && m.stem.s2d {
				add(&l.w, s2dBytes(c, l.in.C, m.prec), c.OutC, func(out []byte, lo, hi int) { s2dWeightsInto(out, c, l.in.C, m.prec, lo, hi) })
			} else {
				cPad := l.in.C / c.Groups
				add(&l.w, convBytes(c, cPad, m.prec), c.OutC, func(out []byte, lo, hi int) { convWeightsInto(out, c, cPad, m.prec, lo, hi) })
			}
			b := c.Bias
			if b == nil && m.opts.Compile && (c.ReLU || c.Residual) {
				// The fused call needs a bias operand.
				b = make([]float32, c.OutC)
			}
			if b != nil {
				addF32(&l.bias, b, m.prec.tensorDType)
				addF32(&l.biasF32, b, tensor.Float32)
			}
		case opScale:
			addF32(&l.scale, bnScaleShift(n.BN), tensor.Float32)
		case opLinear:
			lin := n.Linear
			addF32(&l.w, linearWeights(lin, l.in, m.prec), tensor.Float32)
			b := lin.Bias
			if b == nil {
				b = make([]float32, lin.Out)
			}
			addF32(&l.biasF32, b, tensor.Float32)
		}
		m.layers = append(m.layers, l)
	}
	if m.opts.InputDType == tensor.Uint8 {
		a, err := inputAffine(m.graph.InChannels)
		if err != nil {
			return nil, nil, err
		}
		addF32(&m.affine, a, tensor.Float32)
	}

	const align = 256
	var total int64
	blobs := make([]weightBlob, len(jobs))
	type piece struct{ job, lo, hi int }
	var pieces []piece
	for k, j := range jobs {
		blobs[k] = weightBlob{dst: j.dst, off: total}
		total += (int64(j.size) + align - 1) / align * align
		n := min(j.parts, max(1, j.size/weightPiece))
		for q := range n {
			pieces = append(pieces, piece{k, q * j.parts / n, (q + 1) * j.parts / n})
		}
	}
	host := hugepage.Bytes(int(total))
	parallelFor(len(pieces), func(k int) {
		pc := pieces[k]
		off := blobs[pc.job].off
		jobs[pc.job].fill(host[off:off+int64(jobs[pc.job].size)], pc.lo, pc.hi)
	})
	return host, blobs, nil
}

// weightPiece is about how many bytes of weights hostWeights converts per
// task: enough to make a task's overhead noise, small enough that the
// largest tensors (ResNet-18's last convolutions, 4.5 MiB in half
// precision) spread over every core.
const weightPiece = 256 << 10

// parallelFor runs f(0..n-1) on up to GOMAXPROCS goroutines.
func parallelFor(n int, f func(k int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := int(next.Add(1)) - 1; k < n; k = int(next.Add(1)) - 1 {
				f(k)
			}
		}()
	}
	wg.Wait()
}

// valueBytes is the size of value v for MaxBatch images: the precision's
// element size, except global average pooling's float32 output (the linear
// layer runs in float32).
func (m *cudaModel) valueBytes(v model.Value) int64 {
	elem := int64(m.prec.elem)
	for _, n := range m.graph.Nodes {
		if n.Output == v && n.Op == model.OpGlobalAvgPool {
			elem = 4
		}
	}
	return int64(m.opts.MaxBatch) * int64(m.shapes[v].Elements()) * elem
}

func (m *cudaModel) Info() engine.Info {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.info
}

func (m *cudaModel) Device() engine.Device { return m.dev }

func (m *cudaModel) addCompileTime(d time.Duration) {
	m.mu.Lock()
	m.info.CompileTime += d
	m.mu.Unlock()
}

func (m *cudaModel) progress(format string, args ...any) {
	if m.opts.Progress != nil {
		m.opts.Progress(format, args...)
	}
}

func (m *cudaModel) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.instances > 0 {
		return fmt.Errorf("cuda engine: Close with %d instances still open", m.instances)
	}
	defer runtime.UnlockOSThread()
	if err := m.dev.enter(); err != nil {
		return err
	}
	var errs []error
	if m.weights != 0 {
		errs = append(errs, m.dev.rt.Free(m.weights))
		m.weights = 0
	}
	if m.kern != nil {
		errs = append(errs, m.libs.Driver.ModuleUnload(m.kern.mod))
		m.kern = nil
	}
	return errors.Join(errs...)
}

// checkBatch is both instance kinds' check of a forward's batch n against
// their state and largest batch.
func checkBatch(closed bool, n, maxBatch int) error {
	if closed {
		return errors.New("cuda engine: Forward on a closed instance")
	}
	if n < 1 || n > maxBatch {
		return fmt.Errorf("cuda engine: batch of %d images is outside 1..%d", n, maxBatch)
	}
	return nil
}
