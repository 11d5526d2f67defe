package model

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"

	"goinfer/internal/hugepage"
)

// Reference runs the graph in float64 with direct loops: slow, obviously
// correct, and the yardstick the engines are tested against in CI. x is n
// images of InChannels x h x w in NCHW order; the result is n x Classes
// logits.
func (g *Graph) Reference(ctx context.Context, x []float32, n, h, w int) ([]float64, error) {
	return g.reference(ctx, x, n, h, w, nil)
}

// bnHook lets Init calibrate batch norm statistics from the activations
// reaching each batch norm.
type bnHook func(node *Node, act []float64, d Dims, n int)

func (g *Graph) reference(ctx context.Context, x []float32, n, h, w int, hook bnHook) ([]float64, error) {
	dims, err := g.Shapes(h, w)
	if err != nil {
		return nil, err
	}
	if want := n * dims[0].Elements(); len(x) != want {
		return nil, fmt.Errorf("input has %d values, want %d for %d images of %v", len(x), want, n, dims[0])
	}
	// The activations and the convolutions' transposed weights come from
	// blocks made once, in huge pages where the platform has them: a fresh
	// page costs a fault at its first touch, and a calibration's
	// activations would otherwise be paged in node by node. A value's
	// memory is reused, once its last reader has run, by a later value of
	// the same size; the block holds what that leaves to allocate.
	last := g.LastUse()
	size := func(v Value) int {
		if v == 0 {
			return len(x)
		}
		return n * dims[v].Elements()
	}
	fresh, wmax, spare := len(x), 0, map[int]int{}
	for i, nd := range g.Nodes {
		if m := size(nd.Output); spare[m] > 0 {
			spare[m]--
		} else {
			fresh += m
		}
		for j, v := range nd.Inputs {
			if last[v] == i && !slices.Contains(nd.Inputs[:j], v) {
				spare[size(v)]++
			}
		}
		if c := nd.Conv; nd.Op == OpConv {
			wmax = max(wmax, c.OutC*c.InC/c.Groups*c.K*c.K)
		}
	}
	var arena []float64
	if 8*fresh <= maxRefArena {
		arena = hugepage.Float64s(fresh)
	}
	free := map[int][][]float64{}
	newVal := func(m int) []float64 {
		if l := free[m]; len(l) > 0 {
			v := l[len(l)-1]
			free[m] = l[:len(l)-1]
			clear(v)
			return v
		}
		if len(arena) < m {
			return make([]float64, m)
		}
		v := arena[:m:m]
		arena = arena[m:]
		return v
	}
	wbuf := hugepage.Float32s(wmax)
	vals := make([][]float64, g.NumValues)
	vals[0] = newVal(len(x))
	for i, v := range x {
		vals[0][i] = float64(v)
	}
	for i, nd := range g.Nodes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		in := vals[nd.Inputs[0]]
		id, od := dims[nd.Inputs[0]], dims[nd.Output]
		out := newVal(n * od.Elements())
		switch nd.Op {
		case OpConv:
			var res []float64
			if nd.Conv.Residual {
				res = vals[nd.Inputs[1]]
			}
			refConv(nd.Conv, in, res, out, wbuf, n, id, od)
		case OpBatchNorm:
			if hook != nil {
				hook(nd, in, id, n)
			}
			scale, shift := nd.BN.ScaleShift()
			hw := id.H * id.W
			for b := 0; b < n; b++ {
				for c := 0; c < id.C; c++ {
					base := (b*id.C + c) * hw
					for j := 0; j < hw; j++ {
						out[base+j] = in[base+j]*scale[c] + shift[c]
					}
				}
			}
		case OpReLU:
			for j, v := range in {
				out[j] = math.Max(v, 0)
			}
		case OpAdd:
			o := vals[nd.Inputs[1]]
			for j, v := range in {
				out[j] = v + o[j]
			}
		case OpMaxPool:
			refMaxPool(nd.Pool, in, out, n, id, od)
		case OpGlobalAvgPool:
			hw := id.H * id.W
			for j := range out {
				s := 0.0
				for _, v := range in[j*hw : (j+1)*hw] {
					s += v
				}
				out[j] = s / float64(hw)
			}
		case OpLinear:
			l := nd.Linear
			for b := 0; b < n; b++ {
				xs := in[b*l.In : (b+1)*l.In]
				for o := 0; o < l.Out; o++ {
					s := 0.0
					if l.Bias != nil {
						s = float64(l.Bias[o])
					}
					wr := l.Weight[o*l.In : (o+1)*l.In]
					for k, v := range xs {
						s += v * float64(wr[k])
					}
					out[b*l.Out+o] = s
				}
			}
		default:
			return nil, fmt.Errorf("%s: unknown op %v", nd.Name, nd.Op)
		}
		vals[nd.Output] = out
		for _, v := range nd.Inputs {
			if last[v] == i && vals[v] != nil {
				free[len(vals[v])] = append(free[len(vals[v])], vals[v])
				vals[v] = nil
			}
		}
	}
	return vals[g.Output], nil
}

// maxRefArena bounds the bytes of activations reference takes from one
// block (which it cannot free node by node); a bigger run allocates each.
const maxRefArena = 64 << 20

// refConv runs convolution c; wbuf holds at least its weights' count of
// float32s, for refConvRange's transposed weights.
func refConv(c *Conv, in, res, out []float64, wbuf []float32, n int, id, od Dims) {
	// Output channels are split across the cores: each output value is
	// still one sum in one order, so the result is the same bits as on one
	// core.
	macs := n * c.OutC * od.H * od.W * (c.InC / c.Groups) * c.K * c.K
	workers := min(runtime.GOMAXPROCS(0), c.OutC, max(1, macs/refConvMinMACs))
	if workers <= 1 {
		refConvRange(c, in, res, out, wbuf, n, id, od, 0, c.OutC)
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*c.OutC/workers, (w+1)*c.OutC/workers
		wg.Go(func() { refConvRange(c, in, res, out, wbuf, n, id, od, lo, hi) })
	}
	wg.Wait()
}

// refConvMinMACs is the work below which splitting a convolution across
// goroutines costs more than it saves.
const refConvMinMACs = 1 << 18

// refConvRange computes output channels [lo, hi) of refConv. Each output
// is one sum in the order of the plain seven-deep loop (bias, then input
// channel, ky, kx), skipping the taps that fall in the padding, so the bits
// are those of that loop. The taps of one output pixel are gathered once
// into a patch (values and their weight offsets) and then summed for
// several output channels at a time: independent sums, each in its own
// order, that the core overlaps, where one row of outputs per tap spent
// more on bounds than on arithmetic for the small maps of deep layers.
// wbuf's float32s [lo*taps, hi*taps), taps being a channel's weights, take
// the range's transposed weights.
func refConvRange(c *Conv, in, res, out []float64, wbuf []float32, n int, id, od Dims, lo, hi int) {
	icg, ocg := c.InC/c.Groups, c.OutC/c.Groups
	k, kk, hw, st, pad := c.K, c.K*c.K, id.H*id.W, c.Stride, c.Pad
	taps := icg * kk
	bias := make([]float64, hi-lo)
	if c.Bias != nil {
		for o := range bias {
			bias[o] = float64(c.Bias[lo+o])
		}
	}
	segs := refSegments(c.Weight, wbuf[lo*taps:hi*taps], lo, hi, ocg, taps)
	pv := make([]float64, taps) // the patch's values
	pw := make([]int32, taps)   // their offsets in an output channel's weights
	var acc [refLanes]float64
	for b := 0; b < n; b++ {
		for _, sg := range segs {
			g0, g1 := sg.lo, sg.hi
			planes := in[(b*id.C+sg.group*icg)*hw:]
			for oy := 0; oy < od.H; oy++ {
				iy0 := oy*st - pad
				kyLo, kyHi := max(0, -iy0), min(k, id.H-iy0)
				for ox := 0; ox < od.W; ox++ {
					ix0 := ox*st - pad
					kxLo, kxHi := max(0, -ix0), min(k, id.W-ix0)
					m := 0
					for ci := 0; ci < icg; ci++ {
						plane := planes[ci*hw : (ci+1)*hw]
						for ky := kyLo; ky < kyHi; ky++ {
							row := plane[(iy0+ky)*id.W : (iy0+ky+1)*id.W]
							for kx := kxLo; kx < kxHi; kx++ {
								pv[m], pw[m] = row[ix0+kx], int32((ci*k+ky)*k+kx)
								m++
							}
						}
					}
					vs, ws := pv[:m], pw[:m]
					j := (b*od.C)*od.H*od.W + oy*od.W + ox
					o := g0
					for bi, wt := range sg.blocks {
						copy(acc[:], bias[o-lo:])
						refDot32(&acc, vs, ws, wt)
						for l, s := range acc {
							refConvStore(c, res, out, j+(o+l)*od.H*od.W, s)
						}
						o = g0 + (bi+1)*refLanes
					}
					wf := sg.tail[:len(sg.tail):len(sg.tail)]
					for ; o+4 <= g1; o, wf = o+4, wf[4*taps:] {
						w0 := wf[:taps]
						w1 := wf[taps:][:taps]
						w2 := wf[2*taps:][:taps]
						w3 := wf[3*taps:][:taps]
						s0, s1, s2, s3 := bias[o-lo], bias[o+1-lo], bias[o+2-lo], bias[o+3-lo]
						for t, v := range vs {
							q := ws[t]
							s0 += v * w0[q]
							s1 += v * w1[q]
							s2 += v * w2[q]
							s3 += v * w3[q]
						}
						refConvStore(c, res, out, j+o*od.H*od.W, s0)
						refConvStore(c, res, out, j+(o+1)*od.H*od.W, s1)
						refConvStore(c, res, out, j+(o+2)*od.H*od.W, s2)
						refConvStore(c, res, out, j+(o+3)*od.H*od.W, s3)
					}
					for ; o < g1; o, wf = o+1, wf[taps:] {
						w := wf[:taps]
						s := bias[o-lo]
						for t, v := range vs {
							s += v * w[ws[t]]
						}
						refConvStore(c, res, out, j+o*od.H*od.W, s)
					}
				}
			}
		}
	}
}

// refLanes is the output channels refDot32 sums at once.
const refLanes = 32

// refSegment is the part of refConvRange's output channels [lo, hi) in one
// group: channels [lo, hi) of the segment. blocks holds, where refDot32
// runs, the weights of its first len(blocks)*refLanes channels, each block
// tap-major (tap q's refLanes weights at q*refLanes) as refDot32 reads
// them; tail the float64 weights of the channels after them,
// channel-major.
type refSegment struct {
	lo, hi, group int
	blocks        [][]float32
	tail          []float64
}

// refSegments splits output channels [lo, hi) at group boundaries (ocg
// channels a group) and lays out their weights w (taps a channel) for
// refConvRange: the blocks in b, which has (hi-lo)*taps float32s.
func refSegments(w, b []float32, lo, hi, ocg, taps int) []refSegment {
	var segs []refSegment
	for g0 := lo; g0 < hi; g0 = (g0/ocg + 1) * ocg {
		sg := refSegment{lo: g0, hi: min(hi, (g0/ocg+1)*ocg), group: g0 / ocg}
		o := sg.lo
		for ; useRefDot32 && o+refLanes <= sg.hi; o += refLanes {
			wt := b[:taps*refLanes]
			b = b[taps*refLanes:]
			src := w[o*taps : (o+refLanes)*taps]
			// A cache line of each channel's weights at a time: the
			// channels lie taps*4 bytes apart, often a multiple of 2 KiB,
			// where reading all 32 a tap at a time evicts lines before
			// their next tap is read.
			for q0 := 0; q0 < taps; q0 += 16 {
				q1 := min(q0+16, taps)
				for l := range refLanes {
					for q, v := range src[l*taps+q0 : l*taps+q1] {
						wt[(q0+q)*refLanes+l] = v
					}
				}
			}
			sg.blocks = append(sg.blocks, wt)
		}
		sg.tail = make([]float64, (sg.hi-o)*taps)
		for i, v := range w[o*taps : sg.hi*taps] {
			sg.tail[i] = float64(v)
		}
		segs = append(segs, sg)
	}
	return segs
}

// refDot32Go is refDot32 in Go: for each tap t in order,
// acc[l] += vals[t] * w[offs[t]*refLanes+l].
func refDot32Go(acc *[refLanes]float64, vals []float64, offs []int32, w []float32) {
	for t, v := range vals {
		row := w[int(offs[t])*refLanes:][:refLanes]
		for l := range acc {
			acc[l] += v * float64(row[l])
		}
	}
}

// refConvStore adds the residual to a convolution's sum, applies its ReLU
// and stores it at out[j].
func refConvStore(c *Conv, res, out []float64, j int, s float64) {
	if res != nil {
		s += res[j]
	}
	if c.ReLU && s < 0 {
		s = 0
	}
	out[j] = s
}

func refMaxPool(p *Pool, in, out []float64, n int, id, od Dims) {
	for bc := 0; bc < n*id.C; bc++ {
		plane := in[bc*id.H*id.W:]
		for oy := 0; oy < od.H; oy++ {
			for ox := 0; ox < od.W; ox++ {
				m := math.Inf(-1)
				for ky := 0; ky < p.K; ky++ {
					iy := oy*p.Stride - p.Pad + ky
					if iy < 0 || iy >= id.H {
						continue
					}
					for kx := 0; kx < p.K; kx++ {
						ix := ox*p.Stride - p.Pad + kx
						if ix < 0 || ix >= id.W {
							continue
						}
						m = math.Max(m, plane[iy*id.W+ix])
					}
				}
				out[(bc*od.H+oy)*od.W+ox] = m
			}
		}
	}
}
