package irexec

import (
	"fmt"

	"goinfer/internal/engine/cpu/vec"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// convTStep is ConvTranspose computed directly: each output plane gathers,
// for every input channel of its group and kernel position, a scaled input
// row scattered at the stride into the output row it lands on.
type convTStep struct {
	convGeom // ih/iw: the input, oh/ow: the output; pt/pl: begin pads
	src, dst int
	w        []float32 // inC x ocg x kh x kw
	bias     []float32
}

// transposeBegin resolves ConvTranspose's begin pad in one spatial
// dimension as ONNX does: from output_shape (or SAME_*) the total padding
// is split (SAME_UPPER puts the smaller half first), else Pads.
func transposeBegin(op *ir.ConvTranspose, i, nd, in, k, s, d, out int) int {
	outPad := 0
	if i < len(op.OutputPadding) {
		outPad = op.OutputPadding[i]
	}
	full := s*(in-1) + outPad + (k-1)*d + 1
	same := op.AutoPad == "SAME_UPPER" || op.AutoPad == "SAME_LOWER"
	if len(op.OutputShape) != 0 || same {
		total := full - out
		half := total / 2
		if total < 0 && total%2 != 0 {
			half-- // floor
		}
		if op.AutoPad == "SAME_UPPER" {
			return half
		}
		return total - half
	}
	if len(op.Pads) == 2*nd && op.AutoPad != "VALID" {
		return op.Pads[i]
	}
	return 0
}

func buildConvTranspose(nc *nodeCtx) (step, error) {
	op := any(nc.n.Op).(*ir.ConvTranspose)
	x, w, y := nc.inVal(0), nc.inVal(1), nc.outVal(0)
	if x.dtype != tensor.Float32 {
		return nil, unsupportedf(x.dtype.String(), "ConvTranspose of %s", x.dtype)
	}
	if w.kind != kindConst {
		return nil, unsupportedf("with runtime weights", "weights %q are computed at run time", w.name)
	}
	rank := len(x.shape)
	if rank != 3 && rank != 4 {
		return nil, unsupportedf(fmt.Sprintf("%d-D", rank-2), "%d-D ConvTranspose", rank-2)
	}
	sp := rank - 2
	get := func(v []int, i int) int {
		if i < len(v) {
			return v[i]
		}
		return 1
	}
	s := &convTStep{src: nc.in[0], dst: nc.out[0]}
	g := &s.convGeom
	g.groups = max(op.Group, 1)
	g.n, g.inC, g.outC = x.shape[0], x.shape[1], y.shape[1]
	g.icg, g.ocg = g.inC/g.groups, w.shape[1]
	g.ih, g.oh, g.kh, g.sh, g.dh = 1, 1, 1, 1, 1
	g.iw, g.ow, g.kw = x.shape[rank-1], y.shape[rank-1], w.shape[rank-1]
	g.sw, g.dw = get(op.Strides, sp-1), get(op.Dilations, sp-1)
	g.pl = transposeBegin(op, sp-1, sp, g.iw, g.kw, g.sw, g.dw, g.ow)
	if sp == 2 {
		g.ih, g.oh, g.kh = x.shape[2], y.shape[2], w.shape[2]
		g.sh, g.dh = get(op.Strides, 0), get(op.Dilations, 0)
		g.pt = transposeBegin(op, 0, sp, g.ih, g.kh, g.sh, g.dh, g.oh)
	}
	if g.ocg*g.groups != g.outC {
		return nil, fmt.Errorf("weight %v and group %d do not give %d output channels", w.shape, g.groups, g.outC)
	}
	var err error
	if s.w, _, err = nc.constFloats(1); err != nil {
		return nil, err
	}
	if b := nc.inVal(2); b != nil {
		if b.kind != kindConst {
			return nil, unsupportedf("with runtime bias", "bias %q is computed at run time", b.name)
		}
		if s.bias, _, err = nc.constFloats(2); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *convTStep) run(x *Exec) error {
	x.parRange(s, s.n*s.outC, 1)
	return nil
}

func (s *convTStep) rng(x *Exec, _, lo, hi int) {
	src, dst := x.f32(s.src), x.f32(s.dst)
	ihw, ohw, kk := s.ih*s.iw, s.oh*s.ow, s.kh*s.kw
	for p := lo; p < hi; p++ {
		img, m := p/s.outC, p%s.outC
		grp, mo := m/s.ocg, m%s.ocg
		out := dst[p*ohw : (p+1)*ohw]
		var b float32
		if s.bias != nil {
			b = s.bias[m]
		}
		for i := range out {
			out[i] = b
		}
		for ci := grp * s.icg; ci < (grp+1)*s.icg; ci++ {
			in := src[(img*s.inC+ci)*ihw : (img*s.inC+ci+1)*ihw]
			w := s.w[(ci*s.ocg+mo)*kk : (ci*s.ocg+mo+1)*kk]
			for iy := 0; iy < s.ih; iy++ {
				irow := in[iy*s.iw : (iy+1)*s.iw]
				for ky := 0; ky < s.kh; ky++ {
					oy := iy*s.sh - s.pt + ky*s.dh
					if oy < 0 || oy >= s.oh {
						continue
					}
					orow := out[oy*s.ow : (oy+1)*s.ow]
					for kx := 0; kx < s.kw; kx++ {
						wv := w[ky*s.kw+kx]
						off := kx*s.dw - s.pl
						// Input columns ix with 0 <= ix*sw+off < ow.
						x0 := 0
						if off < 0 {
							x0 = (-off + s.sw - 1) / s.sw
						}
						if s.ow-1-off < 0 {
							continue
						}
						x1 := min(s.iw, (s.ow-1-off)/s.sw+1)
						if s.sw == 1 && x0 < x1 {
							vec.Axpy(orow[x0+off:x1+off], irow[x0:x1], wv)
							continue
						}
						for ix := x0; ix < x1; ix++ {
							orow[ix*s.sw+off] += wv * irow[ix]
						}
					}
				}
			}
		}
	}
}
