package cpu

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"goinfer/internal/engine"
	"goinfer/internal/engine/cpu/gemm"
	"goinfer/internal/engine/cpu/vec"
	"goinfer/internal/engine/cpu/winograd"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
)

// plan is everything instances share: per-node steps with packed weights,
// value shapes, and the assignment of values to recycled activation slots.
type plan struct {
	steps []step
	// names and ops are each step's graph node and its op (the profile's
	// names).
	names, ops []string
	dims       []model.Dims
	output     model.Value
	classes    int
	inDType    tensor.DType
	inC, h, w  int
	maxBatch   int
	// chunk is the images one pass through the network takes; Forward
	// splits bigger batches, so activations are sized for chunk images.
	chunk       int
	weightBytes int64

	// slotOf maps a value to its activation slot (-1: none; value 0 has
	// none when the input is float32 and is read from the input buffer).
	slotOf []int
	// slotElems is each slot's size in floats per image.
	slotElems []int
	// linScratch is the floats per image a linear step needs for its
	// transposed product.
	linScratch int
	// phaseElems is the largest phase split of a strided convolution's
	// input, in floats per image; maxKK the largest kernel area.
	phaseElems, maxKK int
	// maxRow is the largest scratch row of a max pooling.
	maxRow int
	// sharedElems sizes the buffer of B packed once for several tasks.
	sharedElems int
	// winoElems and winoWorker size the Winograd workspaces, shared and
	// per worker.
	winoElems, winoWorker int

	// input converts a float16 or uint8 input to float32 (nil for float32).
	input *eltStep
}

// microBatch bounds the images one pass through the network takes. Eight
// images fill the GEMM's panels even at 7x7 pixels and give every worker
// tasks, while activations stay a few cache-friendly megabytes per image
// instead of growing with the batch (a batch of 256 250x250 images would
// need gigabytes).
const microBatch = 8

// maxSharedB bounds the floats of B a convolution packs once for all its
// tasks (8 MiB). Sharing matters when N is small (late stages, small
// batches), which is also when B is small.
const maxSharedB = 2 << 20

// step is one node's prepared computation.
type step interface {
	run(in *instance, n int)
	// describe names the kernel and the shape that decides its path, for
	// the profile: "convStep 3x3/2 64->128 28x28 phases +relu".
	describe() string
}

func newPlan(ctx context.Context, g *model.Graph, o engine.Options) (*plan, error) {
	dims, err := g.Shapes(o.Height, o.Width)
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	p := &plan{
		dims: dims, output: g.Output, classes: g.Classes, inDType: o.InputDType,
		inC: g.InChannels, h: o.Height, w: o.Width, maxBatch: o.MaxBatch,
		chunk: min(o.MaxBatch, microBatch),
	}
	if out := dims[g.Output]; out.Elements() != g.Classes {
		return nil, fmt.Errorf("cpu: graph output has shape %v, want %d logits", out, g.Classes)
	}
	if o.InputDType != tensor.Float32 {
		p.input = &eltStep{kind: eltInput, dtype: o.InputDType, c: g.InChannels, hw: o.Height * o.Width}
		if o.InputDType == tensor.Uint8 {
			// x/255 normalized: (x/255 - mean)/std = x*scale + shift.
			p.input.scale, p.input.shift = make([]float32, 3), make([]float32, 3)
			for c := range 3 {
				p.input.scale[c] = 1 / (255 * engine.ImageNetStd[c])
				p.input.shift[c] = -engine.ImageNetMean[c] / engine.ImageNetStd[c]
			}
		}
	}
	mode := winograd.Auto
	if o.NoWinograd {
		mode = winograd.Off
	}
	convs, winos, errs := packConvs(ctx, g, dims, p.chunk, mode)
	for i, nd := range g.Nodes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var s step
		var err error
		switch {
		case nd.Op == model.OpConv && winos[i] != nil:
			l := winos[i].l
			p.weightBytes += l.W.Bytes() + int64(4*len(l.Bias))
			p.winoElems = max(p.winoElems, l.BufferFloats(p.chunk))
			p.winoWorker = max(p.winoWorker, l.WorkerFloats())
			s = winos[i]
		case nd.Op == model.OpConv:
			if err = errs[i]; err == nil {
				p.addConv(convs[i])
				s = convs[i]
			}
		default:
			s, err = p.newStep(nd)
		}
		if err != nil {
			return nil, fmt.Errorf("cpu: node %s (%s): %w", nd.Name, nd.Op, err)
		}
		p.steps = append(p.steps, s)
		p.names = append(p.names, nd.Name)
		p.ops = append(p.ops, nd.Op.String())
	}
	p.sharePhases()
	p.planSlots(g)
	return p, nil
}

// sharePhases lets a strided convolution read the phases of its input
// that the last phase-splitting convolution before it left in the phase
// buffer, where that one split the same input into every phase it reads:
// a ResNet block's downsample reads the input of the block's first
// convolution, and the steps between them (Winograd, elementwise) leave
// the buffer alone. Splitting it again read the whole input once more.
func (p *plan) sharePhases() {
	var last *convStep
	for _, st := range p.steps {
		s, ok := st.(*convStep)
		if !ok || s.layout != layoutPhases {
			continue
		}
		if last != nil && last.src == s.src && last.stride == s.stride && last.inC == s.inC &&
			last.ih == s.ih && last.iw == s.iw && coversPhases(last.usedPhase, s.usedPhase) {
			s.reusePhases = true
			continue // the buffer still holds last's split
		}
		last = s
	}
}

// coversPhases reports whether every phase used reads is among have.
func coversPhases(have, used []bool) bool {
	for i, u := range used {
		if u && !have[i] {
			return false
		}
	}
	return true
}

// addConv accounts for a convolution step's weights and scratch.
func (p *plan) addConv(s *convStep) {
	p.weightBytes += s.weightBytes()
	p.phaseElems = max(p.phaseElems, s.phaseElems())
	p.maxKK = max(p.maxKK, s.k*s.k)
	p.sharedElems = max(p.sharedElems, min(s.sharedElems(p.chunk), maxSharedB))
}

// packConvs makes the convolution steps of g, whose weight packing is most
// of a compiled load, on all cores: node i's is winos[i] where mode runs
// it as Winograd, else convs[i]; errs[i] is its error (all nil for other
// nodes).
func packConvs(ctx context.Context, g *model.Graph, dims []model.Dims, chunk int, mode winograd.Mode) (convs []*convStep, winos []*winoStep, errs []error) {
	convs, winos, errs = make([]*convStep, len(g.Nodes)), make([]*winoStep, len(g.Nodes)), make([]error, len(g.Nodes))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(g.Nodes) || ctx.Err() != nil {
					return
				}
				if nd := g.Nodes[i]; nd.Op == model.OpConv {
					in, out := dims[nd.Inputs[0]], dims[nd.Output]
					if winos[i], errs[i] = newWinoStep(nd, in, out, chunk, mode); winos[i] == nil && errs[i] == nil {
						convs[i], errs[i] = newConvStep(nd, in, out, chunk)
					}
				}
			}
		})
	}
	wg.Wait()
	return convs, winos, errs
}

func (p *plan) newStep(nd *model.Node) (step, error) {
	in, out := p.dims[nd.Inputs[0]], p.dims[nd.Output]
	src, dst := int(nd.Inputs[0]), int(nd.Output)
	switch nd.Op {
	case model.OpConv:
		s, err := newConvStep(nd, in, out, p.chunk)
		if err != nil {
			return nil, err
		}
		p.addConv(s)
		return s, nil
	case model.OpBatchNorm:
		scale, shift := nd.BN.ScaleShift()
		s := &eltStep{kind: eltBN, src: src, dst: dst, c: in.C, hw: in.H * in.W,
			scale: make([]float32, in.C), shift: make([]float32, in.C)}
		for c := range scale {
			s.scale[c], s.shift[c] = float32(scale[c]), float32(shift[c])
		}
		p.weightBytes += int64(8 * in.C)
		return s, nil
	case model.OpReLU:
		return &eltStep{kind: eltReLU, src: src, dst: dst, c: in.C, hw: in.H * in.W}, nil
	case model.OpAdd:
		return &eltStep{kind: eltAdd, src: src, src2: int(nd.Inputs[1]), dst: dst, c: in.C, hw: in.H * in.W}, nil
	case model.OpMaxPool:
		// PyTorch's max pooling: square windows, symmetric padding, floor
		// rounding (out says how far the windows go).
		k, st, pad := nd.Pool.K, nd.Pool.Stride, nd.Pool.Pad
		mp := vec.MaxPool2D{InH: in.H, InW: in.W, OutH: out.H, OutW: out.W,
			KH: k, KW: k, SH: st, SW: st, DH: 1, DW: 1, PadT: pad, PadL: pad}
		p.maxRow = max(p.maxRow, mp.ScratchLen())
		return &eltStep{kind: eltMaxPool, src: src, dst: dst, c: in.C, hw: in.H * in.W, mp: mp}, nil
	case model.OpGlobalAvgPool:
		return &eltStep{kind: eltAvgPool, src: src, dst: dst, c: in.C, hw: in.H * in.W}, nil
	case model.OpLinear:
		l := nd.Linear
		a, err := gemm.PackA(l.Weight, l.Out, l.In, l.In, gemm.BlockDepth(l.In))
		if err != nil {
			return nil, err
		}
		s := &linearStep{src: src, dst: dst, in: l.In, out: l.Out, a: a, bias: slices.Clone(l.Bias)}
		p.weightBytes += int64(4 * (len(a.Data) + len(l.Bias)))
		p.linScratch = max(p.linScratch, l.Out)
		return s, nil
	}
	return nil, fmt.Errorf("op %s is not supported by the cpu engine", nd.Op)
}

// planSlots assigns values to activation slots greedily in execution order:
// a value takes the best-fitting free slot (growing the largest free one if
// none fits) and gives it back after its last reader. A node's output never
// shares a slot with its inputs, so no op needs to work in place.
func (p *plan) planSlots(g *model.Graph) {
	last := g.LastUse()
	p.slotOf = make([]int, g.NumValues)
	for i := range p.slotOf {
		p.slotOf[i] = -1
	}
	var free []int
	take := func(v model.Value) {
		need := p.dims[v].Elements()
		best := -1
		for i, s := range free {
			fits, bestFits := p.slotElems[s] >= need, best >= 0 && p.slotElems[free[best]] >= need
			switch {
			case best < 0,
				fits && !bestFits,
				fits && bestFits && p.slotElems[s] < p.slotElems[free[best]],
				!fits && !bestFits && p.slotElems[s] > p.slotElems[free[best]]:
				best = i
			}
		}
		if best < 0 {
			p.slotOf[v] = len(p.slotElems)
			p.slotElems = append(p.slotElems, need)
			return
		}
		s := free[best]
		free = append(free[:best], free[best+1:]...)
		p.slotElems[s] = max(p.slotElems[s], need)
		p.slotOf[v] = s
	}
	if p.inDType != tensor.Float32 {
		take(0)
	}
	for i, nd := range g.Nodes {
		take(nd.Output)
		for j, v := range nd.Inputs {
			dup := false
			for _, u := range nd.Inputs[:j] {
				dup = dup || u == v
			}
			if !dup && last[v] == i && p.slotOf[v] >= 0 {
				free = append(free, p.slotOf[v])
			}
		}
	}
}
