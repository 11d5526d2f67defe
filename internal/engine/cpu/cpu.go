// Package cpu is goinfer's pure-Go engine: the numerical reference that runs
// everywhere (CI included) and the fallback when no GPU is usable.
//
// Convolutions are GEMMs (package gemm: 6x16 AVX2/FMA micro-kernel with a
// portable Go fallback) over an implicit im2col matrix that is never built:
// B's panels are packed straight from the activations with masked loads,
// because for "same" stride-1 convolutions a kernel position is a constant
// shift of the flattened image, and strided ones become the same after a
// cheap split of their input into phase planes. The GEMM's N dimension runs
// over the output pixels of all images of a pass, so small late-stage
// feature maps still fill the kernel's panels. Weights are packed once at
// load. With Compile, batch norms are folded (model.Fuse) and bias,
// residual add and ReLU run in the micro-kernel before the tile is stored;
// without it, each node runs on its own as in eager PyTorch.
//
// Each instance has a persistent pool of worker goroutines
// (Options.Threads, default GOMAXPROCS) that split every op into tasks
// taken dynamically. Batches run in passes of at most eight images, and
// activation buffers are allocated once per instance and recycled by
// liveness, so Forward allocates nothing and its memory does not grow with
// MaxBatch.
//
// The "device" is the host: buffers are Go memory, streams run work
// synchronously at enqueue time, events are complete when recorded and
// their Since is wall time.
package cpu

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"goinfer/internal/engine"
	"goinfer/internal/engine/cpu/parallel"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
)

func init() { engine.Register(Engine{}) }

// Engine is the cpu engine, registered as "cpu".
type Engine struct{}

// Name implements engine.Engine.
func (Engine) Name() string { return "cpu" }

// Available implements engine.Engine: the cpu engine runs everywhere.
func (Engine) Available() error { return nil }

// Load implements engine.Engine. It runs fp32 only. With opts.Compile it
// fuses the graph (model.Fuse) before packing weights; Info.CompileTime is
// the time spent fusing and packing the fused weights.
func (Engine) Load(ctx context.Context, g *model.Graph, opts engine.Options) (engine.Model, error) {
	if g == nil {
		return nil, errors.New("cpu: Load of a nil graph")
	}
	if err := checkOptions(g, &opts); err != nil {
		return nil, err
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("cpu: invalid graph: %w", err)
	}
	start := time.Now()
	if opts.Compile {
		fg, err := model.Fuse(g)
		if err != nil {
			return nil, fmt.Errorf("cpu: compiling %s: %w", g.Arch.Name(), err)
		}
		g = fg
	}
	p, err := newPlan(ctx, g, opts)
	if err != nil {
		return nil, err
	}
	info := engine.Info{
		Engine:      "cpu",
		Device:      fmt.Sprintf("cpu (%d threads)", opts.Threads),
		Arch:        g.Arch.Name(),
		Precision:   engine.FP32,
		Compiled:    opts.Compile,
		MaxBatch:    opts.MaxBatch,
		WeightBytes: p.weightBytes,
	}
	info.Inputs, info.Outputs = engine.ClassifierSpecs(opts.InputDType, g.InChannels, opts.Height, opts.Width, g.Classes)
	if opts.Compile {
		info.CompileTime = time.Since(start)
	}
	return &cpuModel{info: info, plan: p, threads: opts.Threads}, nil
}

// checkOptions validates opts against g and fills in defaults.
func checkOptions(g *model.Graph, o *engine.Options) error {
	if o.Precision != engine.FP32 {
		return fmt.Errorf("cpu: precision %s is not supported: the cpu engine runs fp32 only (use --precision fp32, or the cuda engine)", o.Precision)
	}
	if o.MaxBatch < 1 {
		return fmt.Errorf("cpu: MaxBatch %d: must be at least 1", o.MaxBatch)
	}
	if o.Height < 1 || o.Width < 1 {
		return fmt.Errorf("cpu: image size %dx%d: height and width must be positive", o.Height, o.Width)
	}
	if o.Threads < 0 {
		return fmt.Errorf("cpu: Threads %d: must be 0 (GOMAXPROCS) or positive", o.Threads)
	}
	if o.Threads == 0 {
		o.Threads = runtime.GOMAXPROCS(0)
	}
	switch o.InputDType {
	case tensor.Invalid:
		o.InputDType = tensor.Float32
	case tensor.Float32, tensor.Float16:
	case tensor.Uint8:
		if g.InChannels != 3 {
			return fmt.Errorf("cpu: uint8 input is normalized with the 3-channel ImageNet mean and std, but the model takes %d channels", g.InChannels)
		}
	default:
		return fmt.Errorf("cpu: input dtype %s is not supported (want float32, float16 or uint8)", o.InputDType)
	}
	for _, bs := range o.BatchSizes {
		if bs < 1 || bs > o.MaxBatch {
			return fmt.Errorf("cpu: batch size %d is outside [1, MaxBatch=%d]", bs, o.MaxBatch)
		}
	}
	return nil
}

// cpuModel is a loaded graph; instances share its packed weights.
type cpuModel struct {
	info    engine.Info
	plan    *plan
	threads int

	mu        sync.Mutex
	instances int
	closed    bool
	// cores counts the workers of the instances' pools: they poll for work
	// only while all fit the processors (parallel.Cores).
	cores parallel.Cores
}

// Info implements engine.Model.
func (m *cpuModel) Info() engine.Info { return m.info }

// Device implements engine.Model.
func (m *cpuModel) Device() engine.Device { return device{} }

// NewInstance implements engine.Model.
func (m *cpuModel) NewInstance(ctx context.Context) (engine.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("cpu: NewInstance on a closed model")
	}
	in := newInstance(m, m.plan, m.threads)
	m.instances++
	return in, nil
}

func (m *cpuModel) release() {
	m.mu.Lock()
	m.instances--
	m.mu.Unlock()
}

// Close implements engine.Model.
func (m *cpuModel) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("cpu: model closed twice")
	}
	if m.instances > 0 {
		return fmt.Errorf("cpu: closing a model with %d open instances: close them first", m.instances)
	}
	m.closed, m.plan = true, nil
	return nil
}
