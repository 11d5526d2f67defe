package irexec

import (
	"fmt"
	"math"

	"goinfer/internal/engine/cpu/vec"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// poolStep is MaxPool or AveragePool over 1-D or 2-D windows, one plane
// per task unit. Max pooling runs vec's kernel (padding is -inf); an
// average takes the taps inside the input and divides by their count, or
// with count_include_pad by those inside the padded input.
type poolStep struct {
	convGeom
	pb, pr          int // bottom and right padding
	max, includePad bool
	// p > 0: LpPool, the p-norm of the taps inside the input.
	p        int
	src, dst int
	// ys and xs are each output row's and column's window: its first
	// input coordinate inside the image, its taps there, and its taps
	// inside the padded image (count_include_pad's divisor).
	ys, xs []span
	mp     vec.MaxPool2D // max pooling's geometry
}

// span is one output coordinate's window along a dimension.
type span struct{ first, n, padded int }

func spans(out, stride, pad, k, dil, in, padEnd int) []span {
	sp := make([]span, out)
	for o := range sp {
		f, n := taps(o, stride, pad, k, dil, 0, in)
		_, p := taps(o, stride, pad, k, dil, -pad, in+padEnd)
		sp[o] = span{first: o*stride - pad + f*dil, n: n, padded: p}
	}
	return sp
}

func buildPool(nc *nodeCtx) (step, error) {
	var op *ir.Pool
	lp := 0
	switch o := any(nc.n.Op).(type) {
	case *ir.Pool:
		op = o
	case *ir.LpPool:
		op, lp = &o.Pool, o.P
	}
	x, y := nc.inVal(0), nc.outVal(0)
	if x.dtype != tensor.Float32 {
		return nil, unsupportedf(x.dtype.String(), "pooling of %s", x.dtype)
	}
	if nc.outVal(1) != nil {
		return nil, unsupportedf("with indices", "MaxPool's Indices output")
	}
	rank := len(x.shape)
	if rank != 3 && rank != 4 {
		return nil, unsupportedf(fmt.Sprintf("%d-D", rank-2), "%d-D pooling", rank-2)
	}
	sp := rank - 2
	get := func(v []int, i, def int) int {
		if i < len(v) {
			return v[i]
		}
		return def
	}
	pads := op.Pads
	if op.AutoPad != "" && op.AutoPad != "NOTSET" {
		pads = autoPads(op.AutoPad, x.shape[2:], tensor.Shape(op.Kernel), op.Strides, op.Dilations)
	}
	s := &poolStep{max: op.Max && lp == 0, p: lp, includePad: op.CountIncludePad, src: nc.in[0], dst: nc.out[0]}
	g := &s.convGeom
	g.n, g.inC, g.outC = x.shape[0], x.shape[1], x.shape[1]
	g.ih, g.iw, g.oh, g.ow = 1, x.shape[rank-1], 1, y.shape[rank-1]
	g.kh, g.kw = 1, get(op.Kernel, sp-1, 1)
	g.sh, g.sw, g.dh, g.dw = 1, get(op.Strides, sp-1, 1), 1, get(op.Dilations, sp-1, 1)
	g.pl, s.pr = get(pads, sp-1, 0), get(pads, 2*sp-1, 0)
	if sp == 2 {
		g.ih, g.oh, g.kh = x.shape[2], y.shape[2], get(op.Kernel, 0, 1)
		g.sh, g.dh = get(op.Strides, 0, 1), get(op.Dilations, 0, 1)
		g.pt, s.pb = get(pads, 0, 0), get(pads, sp, 0)
	}
	if s.max {
		s.mp = vec.MaxPool2D{InH: g.ih, InW: g.iw, OutH: g.oh, OutW: g.ow,
			KH: g.kh, KW: g.kw, SH: g.sh, SW: g.sw, DH: g.dh, DW: g.dw, PadT: g.pt, PadL: g.pl}
		nc.needScratch(s.mp.ScratchLen())
		return s, nil
	}
	s.ys = spans(g.oh, g.sh, g.pt, g.kh, g.dh, g.ih, s.pb)
	s.xs = spans(g.ow, g.sw, g.pl, g.kw, g.dw, g.iw, s.pr)
	return s, nil
}

func (s *poolStep) run(x *Exec) error {
	x.parRange(s, s.n*s.inC, max(1, 4096/(s.oh*s.ow)))
	return nil
}

// taps returns, for output index o along one dimension, the first tap
// index and count of taps inside [lo, hi) of input coordinates.
func taps(o, stride, pad, k, dil, lo, hi int) (first, count int) {
	start := o*stride - pad
	first = 0
	if start < lo {
		first = (lo - start + dil - 1) / dil
	}
	last := k - 1
	if e := start + last*dil; e >= hi {
		last = (hi - 1 - start)
		if last < 0 {
			return first, 0
		}
		last /= dil
	}
	return first, max(0, last-first+1)
}

func (s *poolStep) rng(x *Exec, w, lo, hi int) {
	s.planes(x, w, x.f32(s.src), x.f32(s.dst), lo, hi)
}

// planes pools planes [lo, hi) of src into dst.
func (s *poolStep) planes(x *Exec, w int, src, dst []float32, lo, hi int) {
	ihw, ohw := s.ih*s.iw, s.oh*s.ow
	for p := lo; p < hi; p++ {
		in := src[p*ihw : (p+1)*ihw]
		out := dst[p*ohw : (p+1)*ohw]
		if s.max {
			s.mp.Plane(out, in, x.scratch[w])
			continue
		}
		for oy, y := range s.ys {
			orow := out[oy*s.ow : (oy+1)*s.ow]
			for ox, xs := range s.xs {
				var sum float64
				for ky := 0; ky < y.n; ky++ {
					row := in[(y.first+ky*s.dh)*s.iw:]
					for kx := 0; kx < xs.n; kx++ {
						sum += lpTerm(float64(row[xs.first+kx*s.dw]), s.p)
					}
				}
				if s.p > 0 {
					orow[ox] = float32(lpRoot(sum, s.p))
					continue
				}
				cnt := y.n * xs.n
				if s.includePad {
					cnt = y.padded * xs.padded
				}
				orow[ox] = float32(sum / float64(cnt))
			}
		}
	}
}

// globalPoolStep averages (or takes the max of) each plane.
type globalPoolStep struct {
	src, dst int
	planes   int
	hw       int
	max      bool
	p        int // GlobalLpPool's order, 0 for the others
}

func buildGlobalPool(nc *nodeCtx) (step, error) {
	var isMax bool
	lp := 0
	switch o := any(nc.n.Op).(type) {
	case *ir.GlobalPool:
		isMax = o.Max
	case *ir.GlobalLpPool:
		lp = o.P
	}
	x := nc.inVal(0)
	if x.dtype != tensor.Float32 || len(x.shape) < 2 {
		return nil, unsupportedf(x.dtype.String(), "global pooling of %s%v", x.dtype, x.shape)
	}
	planes := x.shape[0] * x.shape[1]
	return &globalPoolStep{src: nc.in[0], dst: nc.out[0], planes: planes, hw: x.elems / max(planes, 1), max: isMax, p: lp}, nil
}

func (s *globalPoolStep) run(x *Exec) error {
	x.parRange(s, s.planes, max(1, eltGrain/max(s.hw, 1)))
	return nil
}

func (s *globalPoolStep) rng(x *Exec, _, lo, hi int) {
	src, dst := x.f32(s.src), x.f32(s.dst)
	for p := lo; p < hi; p++ {
		plane := src[p*s.hw : (p+1)*s.hw]
		if s.max {
			m := float32(math.Inf(-1))
			for _, v := range plane {
				if v > m || v != v {
					m = v
				}
			}
			dst[p] = m
			continue
		}
		if s.p == 0 {
			// Eight float32 lanes, each summing hw/8 values: rounding
			// error well inside float32 parity for any feature map.
			dst[p] = vec.Sum(plane) / float32(s.hw)
			continue
		}
		var sum float64
		for _, v := range plane {
			sum += lpTerm(float64(v), s.p)
		}
		if s.p > 0 {
			dst[p] = float32(lpRoot(sum, s.p))
			continue
		}
		dst[p] = float32(sum / float64(s.hw))
	}
}

// lpTerm is v's term of a p-norm (v itself for p == 0, a plain sum).
func lpTerm(v float64, p int) float64 {
	switch p {
	case 0:
		return v
	case 1:
		return math.Abs(v)
	case 2:
		return v * v
	}
	return math.Pow(math.Abs(v), float64(p))
}

// lpRoot finishes a p-norm from its sum of terms.
func lpRoot(s float64, p int) float64 {
	switch p {
	case 1:
		return s
	case 2:
		return math.Sqrt(s)
	}
	return math.Pow(s, 1/float64(p))
}
