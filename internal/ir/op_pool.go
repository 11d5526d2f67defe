package ir

import (
	"fmt"
	"math"

	"goinfer/internal/tensor"
)

// Kind implements Op.
func (p *Pool) Kind() string {
	if p.Max {
		return "MaxPool"
	}
	return "AveragePool"
}

func (p *Pool) plan(x tensor.Shape) (*window, error) {
	if len(x) < 3 {
		return nil, fmt.Errorf("input X %v must have rank 3 or more ([N, C, spatial...])", x)
	}
	if len(p.Kernel) == 0 {
		return nil, fmt.Errorf("%s needs kernel_shape", p.Kind())
	}
	win, err := planWindow(x[2:], p.Kernel, p.Strides, p.Pads, p.Dilations, p.AutoPad, p.CeilMode)
	if err != nil {
		return nil, fmt.Errorf("X %v: %w", x, err)
	}
	return win, nil
}

// Infer implements Op. MaxPool's optional second output is the flat
// int64 index of each maximum.
func (p *Pool) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 1); err != nil {
		return nil, err
	}
	dt := in[0].Type.DType
	if !isFloatType(dt) && !(p.Max && (dt == tensor.Int8 || dt == tensor.Uint8)) {
		return nil, fmt.Errorf("input is %s, want a floating-point tensor", in[0].Type)
	}
	if p.StorageOrder != 0 && p.StorageOrder != 1 {
		return nil, fmt.Errorf("storage_order %d is not 0 or 1", p.StorageOrder)
	}
	x := in[0].Type.Shape
	win, err := p.plan(x)
	if err != nil {
		return nil, err
	}
	shape := append(tensor.Shape{x[0], x[1]}, win.out...)
	out := []Type{{DType: dt, Shape: shape}}
	if p.Max {
		out = append(out, Type{DType: tensor.Int64, Shape: shape.Clone()})
	}
	return out, nil
}

// Eval implements Op.
func (p *Pool) Eval(in []*Array) ([]*Array, error) {
	x := in[0]
	win, err := p.plan(x.Shape)
	if err != nil {
		return nil, err
	}
	n, c := x.Shape[0], x.Shape[1]
	inShape := x.Shape[2:]
	inSp := inShape.NumElements()
	outSp := tensor.Shape(win.out).NumElements()
	shape := append(tensor.Shape{n, c}, win.out...)
	out := NewArray(x.DType, shape)
	idx := NewArray(tensor.Int64, shape)
	taps := win.taps()
	var divisor []int
	if !p.Max && p.CountIncludePad {
		divisor = win.paddedCount()
	}
	// The column-major flat index MaxPool's storage_order 1 reports.
	colMajor := func(i int) int {
		rem, r, mul := i, 0, 1
		str := Strides(inShape)
		for d := range inShape {
			r += (rem / str[d]) * mul
			rem %= str[d]
			mul *= inShape[d]
		}
		return r
	}
	for plane := 0; plane < n*c; plane++ {
		src := x.Data[plane*inSp : (plane+1)*inSp]
		for o, list := range taps {
			k := plane*outSp + o
			if p.Max {
				best, at := math.Inf(-1), -1
				for _, t := range list {
					if v := src[t.i]; at < 0 || v > best {
						best, at = v, int(t.i)
					}
				}
				out.Data[k] = best
				if at >= 0 {
					if p.StorageOrder == 1 {
						at = colMajor(at)
					}
					idx.Data[k] = float64(plane*inSp + at)
				}
				continue
			}
			s := 0.0
			for _, t := range list {
				s += src[t.i]
			}
			d := len(list)
			if divisor != nil {
				d = divisor[o]
			}
			out.Data[k] = s / float64(d)
		}
	}
	if isInt(out.DType) {
		out.RoundTo()
	}
	if p.Max {
		return []*Array{out, idx}, nil
	}
	return []*Array{out}, nil
}

// lpNorm is (sum |x|^p)^(1/p) over the taps (padding adds nothing).
func lpNorm(src []float64, list []tap, p int) float64 {
	s := 0.0
	for _, t := range list {
		s += math.Pow(math.Abs(src[t.i]), float64(p))
	}
	return math.Pow(s, 1/float64(p))
}

// Kind implements Op.
func (p *GlobalPool) Kind() string {
	if p.Max {
		return "GlobalMaxPool"
	}
	return "GlobalAveragePool"
}

// Infer implements Op.
func (p *GlobalPool) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 1); err != nil {
		return nil, err
	}
	if err := wantFloat(in, 0); err != nil {
		return nil, err
	}
	x := in[0].Type.Shape
	if len(x) < 2 {
		return nil, fmt.Errorf("input X %v must have rank 2 or more ([N, C, spatial...])", x)
	}
	shape := x.Clone()
	for i := 2; i < len(shape); i++ {
		shape[i] = 1
	}
	return []Type{{DType: in[0].Type.DType, Shape: shape}}, nil
}

// Eval implements Op.
func (p *GlobalPool) Eval(in []*Array) ([]*Array, error) {
	if err := inferArrays(p, in); err != nil {
		return nil, err
	}
	x := in[0]
	shape := x.Shape.Clone()
	for i := 2; i < len(shape); i++ {
		shape[i] = 1
	}
	out := NewArray(x.DType, shape)
	sp := x.Shape[2:].NumElements()
	for plane := range out.Data {
		src := x.Data[plane*sp : (plane+1)*sp]
		if p.Max {
			m := math.Inf(-1)
			for _, v := range src {
				m = math.Max(m, v)
			}
			out.Data[plane] = m
			continue
		}
		s := 0.0
		for _, v := range src {
			s += v
		}
		out.Data[plane] = s / float64(sp)
	}
	return []*Array{out}, nil
}

// Kind implements Op.
func (*LpPool) Kind() string { return "LpPool" }

// Infer implements Op.
func (l *LpPool) Infer(in []*Value) ([]Type, error) {
	if l.P < 1 {
		return nil, fmt.Errorf("p %d is not positive", l.P)
	}
	if err := wantInputs(in, 1, 1); err != nil {
		return nil, err
	}
	if err := wantFloat(in, 0); err != nil {
		return nil, err
	}
	x := in[0].Type.Shape
	win, err := l.Pool.plan(x)
	if err != nil {
		return nil, err
	}
	return []Type{{DType: in[0].Type.DType, Shape: append(tensor.Shape{x[0], x[1]}, win.out...)}}, nil
}

// Eval implements Op.
func (l *LpPool) Eval(in []*Array) ([]*Array, error) {
	x := in[0]
	win, err := l.Pool.plan(x.Shape)
	if err != nil {
		return nil, err
	}
	inSp := x.Shape[2:].NumElements()
	outSp := tensor.Shape(win.out).NumElements()
	out := NewArray(x.DType, append(tensor.Shape{x.Shape[0], x.Shape[1]}, win.out...))
	taps := win.taps()
	for plane := 0; plane < x.Shape[0]*x.Shape[1]; plane++ {
		src := x.Data[plane*inSp : (plane+1)*inSp]
		for o, list := range taps {
			out.Data[plane*outSp+o] = lpNorm(src, list, l.P)
		}
	}
	return []*Array{out}, nil
}

// Kind implements Op.
func (*GlobalLpPool) Kind() string { return "GlobalLpPool" }

// Infer implements Op.
func (l *GlobalLpPool) Infer(in []*Value) ([]Type, error) {
	if l.P < 1 {
		return nil, fmt.Errorf("p %d is not positive", l.P)
	}
	return (&GlobalPool{}).Infer(in)
}

// Eval implements Op.
func (l *GlobalLpPool) Eval(in []*Array) ([]*Array, error) {
	if err := inferArrays(l, in); err != nil {
		return nil, err
	}
	x := in[0]
	shape := x.Shape.Clone()
	for i := 2; i < len(shape); i++ {
		shape[i] = 1
	}
	out := NewArray(x.DType, shape)
	sp := x.Shape[2:].NumElements()
	for plane := range out.Data {
		s := 0.0
		for _, v := range x.Data[plane*sp : (plane+1)*sp] {
			s += math.Pow(math.Abs(v), float64(l.P))
		}
		out.Data[plane] = math.Pow(s, 1/float64(l.P))
	}
	return []*Array{out}, nil
}
