package irexec

import (
	"fmt"
	"math"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// poolStep is MaxPool or AveragePool over 1-D or 2-D windows, one plane
// per task unit. Windows are clipped to the input (max pooling never sees
// padding); an average divides by the taps inside the input, or with
// count_include_pad by those inside the padded input.
type poolStep struct {
	convGeom
	pb, pr          int // bottom and right padding
	max, includePad bool
	src, dst        int
}

func buildPool(nc *nodeCtx) (step, error) {
	op := any(nc.n.Op).(*ir.Pool)
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
	s := &poolStep{max: op.Max, includePad: op.CountIncludePad, src: nc.in[0], dst: nc.out[0]}
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

func (s *poolStep) rng(x *Exec, _, lo, hi int) {
	src, dst := x.f32(s.src), x.f32(s.dst)
	ihw, ohw := s.ih*s.iw, s.oh*s.ow
	for p := lo; p < hi; p++ {
		in := src[p*ihw : (p+1)*ihw]
		out := dst[p*ohw : (p+1)*ohw]
		for oy := 0; oy < s.oh; oy++ {
			fy, ny := taps(oy, s.sh, s.pt, s.kh, s.dh, 0, s.ih)
			_, py := taps(oy, s.sh, s.pt, s.kh, s.dh, -s.pt, s.ih+s.pb)
			y0 := oy*s.sh - s.pt + fy*s.dh
			for ox := 0; ox < s.ow; ox++ {
				fx, nx := taps(ox, s.sw, s.pl, s.kw, s.dw, 0, s.iw)
				x0 := ox*s.sw - s.pl + fx*s.dw
				if s.max {
					m := float32(math.Inf(-1))
					for ky := 0; ky < ny; ky++ {
						row := in[(y0+ky*s.dh)*s.iw:]
						for kx := 0; kx < nx; kx++ {
							v := row[x0+kx*s.dw]
							if v > m || v != v {
								m = v
							}
						}
					}
					out[oy*s.ow+ox] = m
					continue
				}
				var sum float32
				for ky := 0; ky < ny; ky++ {
					row := in[(y0+ky*s.dh)*s.iw:]
					for kx := 0; kx < nx; kx++ {
						sum += row[x0+kx*s.dw]
					}
				}
				cnt := ny * nx
				if s.includePad {
					_, px := taps(ox, s.sw, s.pl, s.kw, s.dw, -s.pl, s.iw+s.pr)
					cnt = py * px
				}
				out[oy*s.ow+ox] = sum / float32(cnt)
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
}

func buildGlobalPool(nc *nodeCtx) (step, error) {
	op := any(nc.n.Op).(*ir.GlobalPool)
	x := nc.inVal(0)
	if x.dtype != tensor.Float32 || len(x.shape) < 2 {
		return nil, unsupportedf(x.dtype.String(), "global pooling of %s%v", x.dtype, x.shape)
	}
	planes := x.shape[0] * x.shape[1]
	return &globalPoolStep{src: nc.in[0], dst: nc.out[0], planes: planes, hw: x.elems / max(planes, 1), max: op.Max}, nil
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
		var sum float64
		for _, v := range plane {
			sum += float64(v)
		}
		dst[p] = float32(sum / float64(s.hw))
	}
}
