package cpu

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"goinfer/internal/engine"
	"goinfer/internal/engine/cpu/irexec"
	"goinfer/internal/engine/cpu/parallel"
	"goinfer/internal/engine/cpu/winograd"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

var _ engine.GraphLoader = Engine{}

// LoadGraph prepares a general graph (any ops irexec runs) on the cpu
// engine; see Engine.LoadGraph.
func LoadGraph(ctx context.Context, g *ir.Graph, opts engine.Options) (engine.Model, error) {
	return Engine{}.LoadGraph(ctx, g, opts)
}

// LoadGraph implements engine.GraphLoader. The graph must have one input
// and at least one output, all batched along a leading Dynamic dimension
// with every other dimension static; Forward takes the input as float32
// and writes the first output (the others are computed and dropped). The
// graph is bound and compiled for each batch size as it is first used
// (opts.BatchSizes, or MaxBatch, at load); all batch sizes share one copy
// of the packed weights. With opts.Compile the graph is optimized first
// (ir.Optimize: batch norms folded, epilogues fused). A graph whose inputs
// and outputs all have a fixed leading 1 and no dynamic dimension runs one
// sample per forward (Info.MaxBatch 1, whatever opts.MaxBatch asks).
func (Engine) LoadGraph(ctx context.Context, g *ir.Graph, opts engine.Options) (engine.Model, error) {
	if g == nil {
		return nil, errors.New("cpu: LoadGraph of a nil graph")
	}
	start := time.Now()
	inSpecs, outSpecs, err := engine.GraphSpecs(g, &opts)
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	if opts.Precision != engine.FP32 {
		return nil, fmt.Errorf("cpu: precision %s is not supported: the cpu engine runs fp32 only", opts.Precision)
	}
	if opts.MaxBatch < 1 {
		return nil, fmt.Errorf("cpu: MaxBatch %d: must be at least 1", opts.MaxBatch)
	}
	if opts.Threads < 0 {
		return nil, fmt.Errorf("cpu: Threads %d: must be 0 (GOMAXPROCS) or positive", opts.Threads)
	}
	if opts.Threads == 0 {
		opts.Threads = runtime.GOMAXPROCS(0)
	}
	switch opts.InputDType {
	case tensor.Invalid, tensor.Float32:
		opts.InputDType = tensor.Float32
	default:
		return nil, fmt.Errorf("cpu: input dtype %s: a general graph takes its input as float32", opts.InputDType)
	}
	if c, h, w, ok := (engine.Info{Inputs: inSpecs}).ImageInput(); ok {
		if (opts.Height != 0 && opts.Height != h) || (opts.Width != 0 && opts.Width != w) {
			return nil, fmt.Errorf("cpu: graph %q takes %dx%dx%d images, not the %dx%d asked for", g.Name, c, h, w, opts.Height, opts.Width)
		}
	}
	if opts.SplitBatch < engine.SplitAuto {
		return nil, fmt.Errorf("cpu: SplitBatch %d: must be 0 (off), positive or SplitAuto", opts.SplitBatch)
	}
	m := &graphModel{g: g, opts: opts, weights: irexec.NewWeightCache(), plans: map[int]*irexec.Plan{}, chunkPlans: map[int]*irexec.Plan{}, tailPlans: map[int]*irexec.Plan{}}
	switch {
	case opts.SplitBatch > 0:
		// Chunks give the whole batch's answer only when no op mixes
		// images: refuse the option for a graph where one does.
		if err := ir.BatchIndependent(g); err != nil {
			return nil, fmt.Errorf("cpu: --cpu_split_batch needs a model whose images are independent: %w", err)
		}
	case opts.SplitBatch == engine.SplitAuto && irexec.SplitPossible(opts.MaxBatch, opts.Threads) && ir.BatchIndependent(g) == nil:
		if m.autoSplit, err = irexec.SplitPays(g); err != nil {
			return nil, fmt.Errorf("cpu: %w", err)
		}
	}
	if opts.SplitBatch > 0 || m.autoSplit {
		b, err := m.bind(1)
		if err != nil {
			return nil, err
		}
		m.tailCut = irexec.TailCut(b)
	}
	sizes := opts.BatchSizes
	if len(sizes) == 0 {
		sizes = []int{opts.MaxBatch}
	}
	for _, n := range sizes {
		if n < 1 || n > opts.MaxBatch {
			return nil, fmt.Errorf("cpu: batch size %d is outside [1, MaxBatch=%d]", n, opts.MaxBatch)
		}
		if c := m.chunk(n); c > 0 {
			if _, err := m.splitPlan(ctx, c); err != nil {
				return nil, err
			}
			if m.tailCut != "" {
				if _, err := m.tailPlan(ctx, n); err != nil {
					return nil, err
				}
			}
		} else if _, err := m.plan(ctx, n); err != nil {
			return nil, err
		}
	}
	arch := g.Name
	if a := g.Meta["arch"]; a != "" {
		arch = a
	}
	m.info = engine.Info{
		Engine: "cpu", Device: fmt.Sprintf("cpu (%d threads)", opts.Threads),
		Arch: arch, Inputs: inSpecs, Outputs: outSpecs,
		Precision: engine.FP32, Compiled: opts.Compile,
		MaxBatch: opts.MaxBatch, WeightBytes: m.weights.Bytes(),
	}
	if opts.Compile {
		m.info.CompileTime = time.Since(start)
	}
	return m, nil
}

// graphModel is a general graph loaded on the cpu engine.
type graphModel struct {
	g       *ir.Graph
	opts    engine.Options
	info    engine.Info
	weights *irexec.WeightCache
	mu      sync.Mutex
	plans   map[int]*irexec.Plan
	// chunkPlans are the single-threaded plans of the chunks batches are
	// split in, by chunk size; autoSplit says whether SplitAuto splits.
	chunkPlans map[int]*irexec.Plan
	autoSplit  bool
	// tailCut, when not "", is the value after which a split batch's
	// weight-heavy tail runs once over the whole batch (irexec.TailCut):
	// chunkPlans then compute the graph up to it, tailPlans the rest, by
	// batch size.
	tailCut   string
	tailPlans map[int]*irexec.Plan
	instances int
	closed    bool
	// cores counts the workers of the instances' pools (parallel.Cores).
	cores parallel.Cores
}

// plan returns the plan for batch n, compiling it on first use.
func (m *graphModel) plan(ctx context.Context, n int) (*irexec.Plan, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.plans[n]; ok {
		return p, nil
	}
	p, err := m.compile(ctx, n, m.opts.Threads)
	if err != nil {
		return nil, err
	}
	m.plans[n] = p
	return p, nil
}

// chunk returns the chunk size a forward of n images is split in, 0 for
// the whole batch as one.
func (m *graphModel) chunk(n int) int {
	if c := m.opts.SplitBatch; c > 0 {
		if n > c && n%c == 0 {
			return c
		}
		return 0
	}
	if m.autoSplit {
		return irexec.SplitChunk(n, m.opts.Threads)
	}
	return 0
}

// splitPlan returns the single-threaded plan of c images that a Split
// runs (up to tailCut where there is one), compiling it on first use.
func (m *graphModel) splitPlan(ctx context.Context, c int) (*irexec.Plan, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.chunkPlans[c]; ok {
		return p, nil
	}
	b, err := m.bind(c)
	if err != nil {
		return nil, err
	}
	if m.tailCut != "" {
		if b, _, err = irexec.CutAt(b, m.tailCut); err != nil {
			return nil, fmt.Errorf("cpu: %w", err)
		}
	}
	p, err := m.compileBound(ctx, b, 1)
	if err != nil {
		return nil, err
	}
	m.chunkPlans[c] = p
	return p, nil
}

// tailPlan returns the plan of the graph after tailCut for n images on
// the model's threads, compiling it on first use.
func (m *graphModel) tailPlan(ctx context.Context, n int) (*irexec.Plan, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.tailPlans[n]; ok {
		return p, nil
	}
	b, err := m.bind(n)
	if err != nil {
		return nil, err
	}
	_, tail, err := irexec.CutAt(b, m.tailCut)
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	p, err := m.compileBound(ctx, tail, m.opts.Threads)
	if err != nil {
		return nil, err
	}
	m.tailPlans[n] = p
	return p, nil
}

// compile binds the graph to batch n and compiles it for threads.
func (m *graphModel) compile(ctx context.Context, n, threads int) (*irexec.Plan, error) {
	b, err := m.bind(n)
	if err != nil {
		return nil, err
	}
	return m.compileBound(ctx, b, threads)
}

// bind returns the graph bound to batch n, optimized (batch norms folded
// into convolutions, epilogues fused) where the model is compiled.
func (m *graphModel) bind(n int) (*ir.Graph, error) {
	var b *ir.Graph
	var err error
	if m.opts.Compile {
		b, _, err = ir.Optimize(m.g, n)
	} else {
		b, err = ir.Bind(m.g, n)
	}
	if err != nil {
		return nil, fmt.Errorf("cpu: graph %q at batch %d: %w", m.g.Name, n, err)
	}
	return b, nil
}

// compileBound compiles a bound graph for threads.
func (m *graphModel) compileBound(ctx context.Context, b *ir.Graph, threads int) (*irexec.Plan, error) {
	wm := winograd.Auto
	if m.opts.NoWinograd {
		wm = winograd.Off
	}
	em, err := irexec.ParseExpandMode(m.opts.ExpandFusion)
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	p, err := irexec.Compile(ctx, b, irexec.Options{Threads: threads, Weights: m.weights, Winograd: wm, ExpandFusion: em})
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	return p, nil
}

// Info implements engine.Model.
func (m *graphModel) Info() engine.Info { return m.info }

// Device implements engine.Model.
func (m *graphModel) Device() engine.Device { return device{} }

// NewInstance implements engine.Model.
func (m *graphModel) NewInstance(ctx context.Context) (engine.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("cpu: NewInstance on a closed model")
	}
	var arena int64
	for _, p := range m.plans {
		arena = max(arena, p.ArenaBytes())
	}
	m.instances++
	return &graphInstance{m: m, pool: parallel.NewIn(&m.cores, m.opts.Threads), arena: irexec.NewArena(arena),
		execs: map[int]*irexec.Exec{}, splits: map[int]*irexec.Split{}, tails: map[int]*irexec.Exec{}, mid: map[int][][]byte{}, out: map[int][][]byte{}}, nil
}

// Close implements engine.Model.
func (m *graphModel) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("cpu: model closed twice")
	}
	if m.instances > 0 {
		return fmt.Errorf("cpu: closing a model with %d open instances: close them first", m.instances)
	}
	m.closed, m.plans, m.chunkPlans, m.tailPlans = true, nil, nil, nil
	return nil
}

// graphInstance runs forwards with one Exec per batch size it has seen,
// all on one worker pool and one arena (they never run at once), so that
// memory follows the largest batch, not the number of batch sizes.
type graphInstance struct {
	m      *graphModel
	stream stream
	pool   *parallel.Pool
	arena  []byte
	execs  map[int]*irexec.Exec
	// splits run the batches that are split, by chunk size; where the
	// model has a tail, tails run it by batch size, on the pool after
	// the chunks, from mid (the chunks' output, n images).
	splits map[int]*irexec.Split
	tails  map[int]*irexec.Exec
	mid    map[int][][]byte
	in     [1][]byte
	// out holds the output buffers: Forward's, then, per batch size, the
	// graph's other outputs, which are computed and dropped.
	out    map[int][][]byte
	closed bool
}

// Stream implements engine.Instance.
func (in *graphInstance) Stream() engine.Stream { return &in.stream }

// MemoryBytes implements engine.Instance.
func (in *graphInstance) MemoryBytes() int64 {
	n := int64(len(in.arena))
	for _, x := range in.execs {
		n += x.MemoryBytes() - x.Plan().ArenaBytes()
	}
	for _, s := range in.splits {
		n += s.MemoryBytes()
	}
	for k, x := range in.tails {
		n += x.MemoryBytes() + int64(len(in.mid[k][0]))
	}
	return n
}

// Forward implements engine.Instance.
func (in *graphInstance) Forward(src, dst engine.Buffer, n int) error {
	if in.closed {
		return errors.New("cpu: Forward on a closed instance")
	}
	if err := in.stream.check(); err != nil {
		return err
	}
	info := in.m.info
	if n < 1 || n > info.MaxBatch {
		return fmt.Errorf("cpu: Forward of %d images: batch must be in [1, MaxBatch=%d]", n, info.MaxBatch)
	}
	if c := in.m.chunk(n); c > 0 {
		return in.forwardSplit(src, dst, n, c)
	}
	x, err := in.exec(n)
	if err != nil {
		return err
	}
	return in.bind(src, dst, n, func(ins, outs [][]byte) error {
		return x.Run(context.Background(), ins, outs)
	})
}

// exec returns the instance's Exec for batch n, making it on first use.
func (in *graphInstance) exec(n int) (*irexec.Exec, error) {
	if x, ok := in.execs[n]; ok {
		return x, nil
	}
	p, err := in.m.plan(context.Background(), n)
	if err != nil {
		return nil, err
	}
	if p.ArenaBytes() > int64(len(in.arena)) {
		// A batch size compiled after this instance was made needs a
		// larger arena: move every Exec to a new one.
		in.arena = irexec.NewArena(p.ArenaBytes())
		for bn, old := range in.execs {
			old.Close()
			if in.execs[bn], err = old.Plan().NewExecShared(in.pool, in.arena); err != nil {
				return nil, err
			}
		}
	}
	x, err := p.NewExecShared(in.pool, in.arena)
	if err != nil {
		return nil, err
	}
	in.execs[n] = x
	return x, nil
}

// bind runs run with src as input 0 and dst as output 0 of n images, the
// other outputs in the instance's buffers for n.
func (in *graphInstance) bind(src, dst engine.Buffer, n int, run func(ins, outs [][]byte) error) error {
	info := in.m.info
	outs, ok := in.out[n]
	if !ok {
		outs = make([][]byte, len(info.Outputs))
		for i, o := range info.Outputs[1:] {
			outs[i+1] = make([]byte, n*o.Bytes())
		}
		in.out[n] = outs
	}
	xb, err := bufferBytes(src, 0, n*info.InputBytes(), "input")
	if err != nil {
		return err
	}
	yb, err := bufferBytes(dst, 0, n*info.OutputBytes(), "output")
	if err != nil {
		return err
	}
	in.in[0], outs[0] = xb, yb
	err = run(in.in[:], outs)
	in.in[0], outs[0] = nil, nil
	return err
}

// forwardSplit runs n images, a multiple of c, on the instance's Split
// of c-image chunks, then the model's tail where it has one.
func (in *graphInstance) forwardSplit(src, dst engine.Buffer, n, c int) error {
	s, err := in.split(c)
	if err != nil {
		return err
	}
	tail, mid, err := in.tail(n)
	if err != nil {
		return err
	}
	ctx := context.Background()
	return in.bind(src, dst, n, func(ins, outs [][]byte) error {
		if tail == nil {
			return s.Run(ctx, ins, outs, n)
		}
		if err := s.Run(ctx, ins, mid, n); err != nil {
			return err
		}
		return tail.Run(ctx, mid, outs)
	})
}

// tail returns the instance's Exec of the model's tail for n images and
// the buffer of its input, nil where the model has no tail.
func (in *graphInstance) tail(n int) (*irexec.Exec, [][]byte, error) {
	if in.m.tailCut == "" {
		return nil, nil, nil
	}
	if x, ok := in.tails[n]; ok {
		return x, in.mid[n], nil
	}
	p, err := in.m.tailPlan(context.Background(), n)
	if err != nil {
		return nil, nil, err
	}
	// The tail runs on the instance's pool, after the chunks; its arena
	// is its own (the whole-batch Execs' may be smaller).
	x, err := p.NewExecShared(in.pool, irexec.NewArena(p.ArenaBytes()))
	if err != nil {
		return nil, nil, fmt.Errorf("cpu: %w", err)
	}
	in.tails[n] = x
	in.mid[n] = [][]byte{make([]byte, p.Inputs()[0].Type.Shape.NumElements()*p.Inputs()[0].Type.DType.Size())}
	return x, in.mid[n], nil
}

// split returns the instance's Split of c-image chunks, making it on
// first use.
func (in *graphInstance) split(c int) (*irexec.Split, error) {
	if s, ok := in.splits[c]; ok {
		return s, nil
	}
	p, err := in.m.splitPlan(context.Background(), c)
	if err != nil {
		return nil, err
	}
	// The instance's pool runs the chunks: its workers count against the
	// model's cores like the whole-batch plans'.
	s, err := irexec.NewSplitShared(p, c, in.pool)
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	in.splits[c] = s
	return s, nil
}

// Close implements engine.Instance.
func (in *graphInstance) Close() error {
	if in.closed {
		return errors.New("cpu: instance closed twice")
	}
	in.closed = true
	for _, x := range in.execs {
		x.Close()
	}
	for _, s := range in.splits {
		s.Close()
	}
	for _, x := range in.tails {
		x.Close()
	}
	in.pool.Close()
	in.execs, in.arena = nil, nil
	in.m.mu.Lock()
	in.m.instances--
	in.m.mu.Unlock()
	return nil
}
