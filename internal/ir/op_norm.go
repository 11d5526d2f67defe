package ir

import (
	"fmt"
	"math"

	"goinfer/internal/tensor"
)

// Kind implements Op.
func (*BatchNorm) Kind() string { return "BatchNormalization" }

// paramShapeOK accepts a per-channel parameter ([C]) or, as
// BatchNormalization's spatial=0 form before opset 9 has it, one of X's
// shape without the batch.
func paramShapeOK(p, x tensor.Shape) bool {
	return p.Equal(tensor.Shape{x[1]}) || len(x) > 2 && p.Equal(x[1:])
}

// Infer implements Op.
func (b *BatchNorm) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 5, 5); err != nil {
		return nil, err
	}
	if err := wantFloat(in, 0); err != nil {
		return nil, err
	}
	x := in[0].Type.Shape
	if len(x) < 2 {
		return nil, fmt.Errorf("input X %v must have rank 2 or more ([N, C, ...])", x)
	}
	names := [...]string{"", "scale", "B", "mean", "var"}
	for i := 1; i < 5; i++ {
		if !isFloatType(in[i].Type.DType) {
			return nil, fmt.Errorf("%s %s must be floating-point", names[i], in[i].Type)
		}
		if !paramShapeOK(in[i].Type.Shape, x) {
			return nil, fmt.Errorf("%s %s must be [%d] for X %v", names[i], in[i].Type, x[1], x)
		}
	}
	return []Type{sameType(in[0].Type)}, nil
}

// Eval implements Op.
func (b *BatchNorm) Eval(in []*Array) ([]*Array, error) {
	if err := inferArrays(b, in); err != nil {
		return nil, err
	}
	x := in[0]
	out := NewArray(x.DType, x.Shape)
	c := x.Shape[1]
	inner := x.Shape[2:].NumElements()
	perChannel := len(in[1].Shape) == 1
	for k := range x.Data {
		p := k / inner % c // channel
		if !perChannel {
			p = k % (c * inner)
		}
		scale, bias, mean, v := in[1].Data[p], in[2].Data[p], in[3].Data[p], in[4].Data[p]
		out.Data[k] = (x.Data[k]-mean)/math.Sqrt(v+b.Epsilon)*scale + bias
	}
	return []*Array{out}, nil
}

// Kind implements Op.
func (*LayerNorm) Kind() string { return "LayerNormalization" }

func (l *LayerNorm) plan(x tensor.Shape) (axis, outer, inner int, err error) {
	axis, err = axisOf(l.Axis, len(x), "axis")
	if err != nil {
		return 0, 0, 0, err
	}
	return axis, x[:axis].NumElements(), x[axis:].NumElements(), nil
}

// Infer implements Op: Y, then the optional Mean and InvStdDev (float32,
// X's shape with the normalised dimensions as 1).
func (l *LayerNorm) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 2, 3); err != nil {
		return nil, err
	}
	if err := wantFloat(in, 0); err != nil {
		return nil, err
	}
	x := in[0].Type.Shape
	axis, _, _, err := l.plan(x)
	if err != nil {
		return nil, err
	}
	for i := 1; i < len(in); i++ {
		if in[i] == nil {
			continue
		}
		if s, err := BroadcastShape(x[axis:], in[i].Type.Shape); err != nil || !s.Equal(x[axis:]) {
			return nil, fmt.Errorf("input %d %s does not broadcast to the normalised shape %v", i, in[i].Type, x[axis:])
		}
	}
	stat := x.Clone()
	for i := axis; i < len(stat); i++ {
		stat[i] = 1
	}
	return []Type{sameType(in[0].Type), {DType: tensor.Float32, Shape: stat}, {DType: tensor.Float32, Shape: stat.Clone()}}, nil
}

// Eval implements Op.
func (l *LayerNorm) Eval(in []*Array) ([]*Array, error) {
	if err := inferArrays(l, in); err != nil {
		return nil, err
	}
	x := in[0]
	axis, outer, inner, err := l.plan(x.Shape)
	if err != nil {
		return nil, err
	}
	norm := x.Shape[axis:]
	stat := x.Shape.Clone()
	for i := axis; i < len(stat); i++ {
		stat[i] = 1
	}
	y := NewArray(x.DType, x.Shape)
	mean, inv := NewArray(tensor.Float32, stat), NewArray(tensor.Float32, stat)
	scale := in[1]
	si := BroadcastIndex(scale.Shape, norm)
	var bi []int
	bias := arg(in, 2)
	if bias != nil {
		bi = BroadcastIndex(bias.Shape, norm)
	}
	for o := 0; o < outer; o++ {
		row := x.Data[o*inner : (o+1)*inner]
		m, v := meanVar(row)
		r := 1 / math.Sqrt(v+l.Epsilon)
		mean.Data[o], inv.Data[o] = m, r
		dst := y.Data[o*inner:]
		for i, val := range row {
			d := (val - m) * r * scale.Data[si[i]]
			if bias != nil {
				d += bias.Data[bi[i]]
			}
			dst[i] = d
		}
	}
	return []*Array{y, mean, inv}, nil
}

// meanVar returns the mean and the (biased) variance of v.
func meanVar(v []float64) (mean, variance float64) {
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	for _, x := range v {
		variance += (x - mean) * (x - mean)
	}
	return mean, variance / float64(len(v))
}

// Kind implements Op.
func (*InstanceNorm) Kind() string { return "InstanceNormalization" }

// Infer implements Op.
func (n *InstanceNorm) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 3, 3); err != nil {
		return nil, err
	}
	if err := wantFloat(in, 0); err != nil {
		return nil, err
	}
	x := in[0].Type.Shape
	if len(x) < 3 {
		return nil, fmt.Errorf("input X %v must have rank 3 or more ([N, C, spatial...])", x)
	}
	for i, name := range []string{"scale", "B"} {
		if !in[i+1].Type.Shape.Equal(tensor.Shape{x[1]}) {
			return nil, fmt.Errorf("%s %s must be [%d]", name, in[i+1].Type, x[1])
		}
	}
	return []Type{sameType(in[0].Type)}, nil
}

// Eval implements Op.
func (n *InstanceNorm) Eval(in []*Array) ([]*Array, error) {
	if err := inferArrays(n, in); err != nil {
		return nil, err
	}
	x := in[0]
	y := NewArray(x.DType, x.Shape)
	c := x.Shape[1]
	sp := x.Shape[2:].NumElements()
	for plane := 0; plane < x.Shape[0]*c; plane++ {
		row := x.Data[plane*sp : (plane+1)*sp]
		m, v := meanVar(row)
		r := 1 / math.Sqrt(v+n.Epsilon)
		s, b := in[1].Data[plane%c], in[2].Data[plane%c]
		for i, val := range row {
			y.Data[plane*sp+i] = (val-m)*r*s + b
		}
	}
	return []*Array{y}, nil
}

// Kind implements Op.
func (*LRN) Kind() string { return "LRN" }

// Infer implements Op.
func (l *LRN) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 1); err != nil {
		return nil, err
	}
	if err := wantFloat(in, 0); err != nil {
		return nil, err
	}
	if len(in[0].Type.Shape) < 3 {
		return nil, fmt.Errorf("input X %s must have rank 3 or more ([N, C, spatial...])", in[0].Type)
	}
	if l.Size < 1 {
		return nil, fmt.Errorf("size %d must be positive", l.Size)
	}
	return []Type{sameType(in[0].Type)}, nil
}

// Eval implements Op: each value is divided by (bias + alpha/size * the
// sum of squares over the size channels around it)^beta.
func (l *LRN) Eval(in []*Array) ([]*Array, error) {
	if err := inferArrays(l, in); err != nil {
		return nil, err
	}
	x := in[0]
	y := NewArray(x.DType, x.Shape)
	c := x.Shape[1]
	sp := x.Shape[2:].NumElements()
	lo, hi := (l.Size-1)/2, l.Size-1-(l.Size-1)/2
	for k := range x.Data {
		ch := k / sp % c
		base := k - ch*sp
		sq := 0.0
		for j := max(0, ch-lo); j <= min(c-1, ch+hi); j++ {
			v := x.Data[base+j*sp]
			sq += v * v
		}
		y.Data[k] = x.Data[k] / math.Pow(l.Bias+l.Alpha/float64(l.Size)*sq, l.Beta)
	}
	return []*Array{y}, nil
}
