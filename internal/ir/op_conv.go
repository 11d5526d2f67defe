package ir

import (
	"fmt"

	"goinfer/internal/tensor"
)

// Kind implements Op.
func (*Conv) Kind() string { return "Conv" }

func (c *Conv) group() int { return max(c.Group, 1) }

// plan checks X and W against the attributes and resolves the window.
func (c *Conv) plan(x, w tensor.Shape) (*window, error) {
	if len(x) < 3 {
		return nil, fmt.Errorf("input X %v must have rank 3 or more ([N, C, spatial...])", x)
	}
	if len(w) != len(x) {
		return nil, fmt.Errorf("weight W %v must have the rank of X %v", w, x)
	}
	g := c.group()
	if x[1]%g != 0 || w[0]%g != 0 {
		return nil, fmt.Errorf("group %d divides neither X's %d channels nor W's %d output channels", g, x[1], w[0])
	}
	if w[1]*g != x[1] {
		return nil, fmt.Errorf("W %v takes %d channels per group; X %v has %d in each of %d groups", w, w[1], x, x[1]/g, g)
	}
	kernel := []int(w[2:])
	if len(c.Kernel) != 0 && !tensor.Shape(c.Kernel).Equal(w[2:]) {
		return nil, fmt.Errorf("kernel_shape %v differs from W's spatial shape %v", c.Kernel, w[2:])
	}
	win, err := planWindow(x[2:], kernel, c.Strides, c.Pads, c.Dilations, c.AutoPad, false)
	if err != nil {
		return nil, fmt.Errorf("X %v, W %v: %w", x, w, err)
	}
	return win, nil
}

// Infer implements Op.
func (c *Conv) Infer(in []*Value) ([]Type, error) {
	hi := 3
	if c.Epilogue.Residual {
		hi = 4
	}
	if err := wantInputs(in, 2, hi); err != nil {
		return nil, err
	}
	if err := wantFloat(in, 0); err != nil {
		return nil, err
	}
	if err := sameDTypes(in, "Conv"); err != nil {
		return nil, err
	}
	x, w := in[0].Type.Shape, in[1].Type.Shape
	win, err := c.plan(x, w)
	if err != nil {
		return nil, err
	}
	if b := in2(in, 2); b != nil && !b.Type.Shape.Equal(tensor.Shape{w[0]}) {
		return nil, fmt.Errorf("bias B %s must be [%d]", b.Type, w[0])
	}
	out := Type{DType: in[0].Type.DType, Shape: append(tensor.Shape{x[0], w[0]}, win.out...)}
	if err := c.Epilogue.check(in, 3, out); err != nil {
		return nil, err
	}
	return []Type{out}, nil
}

// Eval implements Op.
func (c *Conv) Eval(in []*Array) ([]*Array, error) {
	if err := inferArrays(c, in); err != nil {
		return nil, err
	}
	x, w := in[0], in[1]
	win, err := c.plan(x.Shape, w.Shape)
	if err != nil {
		return nil, err
	}
	n, ch, m := x.Shape[0], x.Shape[1], w.Shape[0]
	g := c.group()
	cg, mg := ch/g, m/g
	inSp := x.Shape[2:].NumElements()
	kSp := w.Shape[2:].NumElements()
	outSp := tensor.Shape(win.out).NumElements()
	out := NewArray(x.DType, append(tensor.Shape{n, m}, win.out...))
	runs := win.runs()
	b := arg(in, 2)
	parallelFor(n*m, func(plane int) {
		ni, mi := plane/m, plane%m
		gi := mi / mg
		dst := out.Data[plane*outSp : (plane+1)*outSp]
		for ci := 0; ci < cg; ci++ {
			src := x.Data[(ni*ch+gi*cg+ci)*inSp : (ni*ch+gi*cg+ci+1)*inSp]
			ker := w.Data[(mi*cg+ci)*kSp : (mi*cg+ci+1)*kSp]
			for k, list := range runs {
				wv := ker[k]
				for _, r := range list {
					d := dst[r.dst : r.dst+r.n]
					if r.step == 1 {
						sv := src[r.src : r.src+r.n]
						for t := range d {
							d[t] += wv * sv[t]
						}
						continue
					}
					for t, si := 0, int(r.src); t < len(d); t, si = t+1, si+int(r.step) {
						d[t] += wv * src[si]
					}
				}
			}
		}
		if b != nil {
			for o := range dst {
				dst[o] += b.Data[mi]
			}
		}
	})
	if err := c.Epilogue.apply(out, in, 3); err != nil {
		return nil, err
	}
	return []*Array{out}, nil
}

// Kind implements Op.
func (*ConvTranspose) Kind() string { return "ConvTranspose" }

func (c *ConvTranspose) group() int { return max(c.Group, 1) }

// transposeGeometry is ConvTranspose's resolved geometry per spatial
// dimension.
type transposeGeometry struct {
	strides, dilations, padBegin, out []int
}

// plan resolves ConvTranspose's output shape and begin pads: from
// OutputShape when given (the total padding it implies split by AutoPad:
// SAME_UPPER puts the smaller half first, otherwise the larger half),
// from SAME_* as in*stride, else from Pads and OutputPadding.
func (c *ConvTranspose) plan(x, w tensor.Shape) (*transposeGeometry, error) {
	if len(x) < 3 {
		return nil, fmt.Errorf("input X %v must have rank 3 or more ([N, C, spatial...])", x)
	}
	if len(w) != len(x) {
		return nil, fmt.Errorf("weight W %v must have the rank of X %v", w, x)
	}
	g := c.group()
	if w[0] != x[1] || x[1]%g != 0 {
		return nil, fmt.Errorf("W %v must have X's %d input channels first, divisible by group %d", w, x[1], g)
	}
	if len(c.Kernel) != 0 && !tensor.Shape(c.Kernel).Equal(w[2:]) {
		return nil, fmt.Errorf("kernel_shape %v differs from W's spatial shape %v", c.Kernel, w[2:])
	}
	nd := len(x) - 2
	in, k := x[2:], w[2:]
	geo := &transposeGeometry{padBegin: make([]int, nd), out: make([]int, nd)}
	var err error
	if geo.strides, err = spatialAttr(c.Strides, nd, 1, "strides"); err != nil {
		return nil, err
	}
	if geo.dilations, err = spatialAttr(c.Dilations, nd, 1, "dilations"); err != nil {
		return nil, err
	}
	outPad := make([]int, nd)
	if len(c.OutputPadding) != 0 {
		if len(c.OutputPadding) != nd {
			return nil, fmt.Errorf("output_padding %v has %d values, want %d", c.OutputPadding, len(c.OutputPadding), nd)
		}
		for i, p := range c.OutputPadding {
			if p < 0 || p >= max(geo.strides[i], geo.dilations[i]) {
				return nil, fmt.Errorf("output_padding %v must be below the stride or dilation", c.OutputPadding)
			}
			outPad[i] = p
		}
	}
	full := func(i int) int { return geo.strides[i]*(in[i]-1) + outPad[i] + (k[i]-1)*geo.dilations[i] + 1 }
	target := c.OutputShape
	if len(target) > nd {
		// output_shape may include N and C.
		target = target[len(target)-nd:]
	}
	autoSame := c.AutoPad == "SAME_UPPER" || c.AutoPad == "SAME_LOWER"
	switch c.AutoPad {
	case "", "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER":
	default:
		return nil, fmt.Errorf("auto_pad %q is not NOTSET, SAME_UPPER, SAME_LOWER or VALID", c.AutoPad)
	}
	if len(target) == 0 && autoSame {
		target = make([]int, nd)
		for i := range target {
			target[i] = in[i] * geo.strides[i]
		}
	}
	if len(target) != 0 {
		if len(target) != nd {
			return nil, fmt.Errorf("output_shape %v does not give %d spatial sizes", c.OutputShape, nd)
		}
		for i := range target {
			if target[i] < 1 {
				return nil, fmt.Errorf("output_shape %v must be positive", c.OutputShape)
			}
			// A negative total pads the end with zeros (as output_padding
			// does); halves round toward minus infinity.
			total := full(i) - target[i]
			half := floorDiv(total, 2)
			if c.AutoPad == "SAME_UPPER" {
				geo.padBegin[i] = half
			} else {
				geo.padBegin[i] = total - half
			}
			geo.out[i] = target[i]
		}
		return geo, nil
	}
	if len(c.Pads) != 0 && len(c.Pads) != 2*nd {
		return nil, fmt.Errorf("pads %v has %d values, want %d (begins then ends)", c.Pads, len(c.Pads), 2*nd)
	}
	for i := 0; i < nd; i++ {
		pb, pe := 0, 0
		if len(c.Pads) != 0 && c.AutoPad != "VALID" {
			pb, pe = c.Pads[i], c.Pads[nd+i]
		}
		if pb < 0 || pe < 0 {
			return nil, fmt.Errorf("pads %v must not be negative", c.Pads)
		}
		geo.padBegin[i] = pb
		geo.out[i] = full(i) - pb - pe
		if geo.out[i] < 1 {
			return nil, fmt.Errorf("pads %v leave no output in spatial dimension %d", c.Pads, i)
		}
	}
	return geo, nil
}

// Infer implements Op.
func (c *ConvTranspose) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 2, 3); err != nil {
		return nil, err
	}
	if err := wantFloat(in, 0); err != nil {
		return nil, err
	}
	if err := sameDTypes(in, "ConvTranspose"); err != nil {
		return nil, err
	}
	x, w := in[0].Type.Shape, in[1].Type.Shape
	geo, err := c.plan(x, w)
	if err != nil {
		return nil, err
	}
	m := w[1] * c.group()
	if b := in2(in, 2); b != nil && !b.Type.Shape.Equal(tensor.Shape{m}) {
		return nil, fmt.Errorf("bias B %s must be [%d]", b.Type, m)
	}
	return []Type{{DType: in[0].Type.DType, Shape: append(tensor.Shape{x[0], m}, geo.out...)}}, nil
}

// Eval implements Op: every input position scatters its kernel-weighted
// value over the output positions it reaches.
func (c *ConvTranspose) Eval(in []*Array) ([]*Array, error) {
	if err := inferArrays(c, in); err != nil {
		return nil, err
	}
	x, w := in[0], in[1]
	geo, err := c.plan(x.Shape, w.Shape)
	if err != nil {
		return nil, err
	}
	n, ch := x.Shape[0], x.Shape[1]
	g := c.group()
	cg, mg := ch/g, w.Shape[1]
	m := mg * g
	inShape, kShape, outShape := x.Shape[2:], w.Shape[2:], tensor.Shape(geo.out)
	inSp, kSp, outSp := inShape.NumElements(), kShape.NumElements(), outShape.NumElements()
	outStr := Strides(outShape)
	// scatter[i] lists (kernel offset, output offset) for input position i.
	scatter := make([][]tap, inSp)
	eachCoord(inShape, func(i int, ic []int) {
		eachCoord(kShape, func(kf int, kc []int) {
			p := 0
			for d := range ic {
				o := ic[d]*geo.strides[d] + kc[d]*geo.dilations[d] - geo.padBegin[d]
				if o < 0 || o >= geo.out[d] {
					return
				}
				p += o * outStr[d]
			}
			scatter[i] = append(scatter[i], tap{k: int32(kf), i: int32(p)})
		})
	})
	out := NewArray(x.DType, append(tensor.Shape{n, m}, geo.out...))
	for ni := 0; ni < n; ni++ {
		for ci := 0; ci < ch; ci++ {
			gi := ci / cg
			src := x.Data[(ni*ch+ci)*inSp : (ni*ch+ci+1)*inSp]
			for mj := 0; mj < mg; mj++ {
				mi := gi*mg + mj
				dst := out.Data[(ni*m+mi)*outSp:]
				ker := w.Data[(ci*mg+mj)*kSp:]
				for i, v := range src {
					for _, t := range scatter[i] {
						dst[t.i] += v * ker[t.k]
					}
				}
			}
		}
	}
	if b := arg(in, 2); b != nil {
		for ni := 0; ni < n; ni++ {
			for mi := 0; mi < m; mi++ {
				dst := out.Data[(ni*m+mi)*outSp : (ni*m+mi+1)*outSp]
				for o := range dst {
					dst[o] += b.Data[mi]
				}
			}
		}
	}
	return []*Array{out}, nil
}
