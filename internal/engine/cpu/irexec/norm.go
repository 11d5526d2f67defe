package irexec

import (
	"fmt"
	"math"

	"goinfer/internal/engine/cpu/vec"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// scaleShiftStep is y = x*scale[c] + shift[c] per channel plane: an
// inference BatchNorm with its statistics folded at compile time.
type scaleShiftStep struct {
	src, dst     int
	c, hw        int
	planes       int
	scale, shift []float32
}

func buildBatchNorm(nc *nodeCtx) (step, error) {
	op := any(nc.n.Op).(*ir.BatchNorm)
	x := nc.inVal(0)
	if x.dtype != tensor.Float32 || len(x.shape) < 2 {
		return nil, unsupportedf(x.dtype.String(), "BatchNorm of %s%v", x.dtype, x.shape)
	}
	for i := 1; i <= 4; i++ {
		if len(nc.out) > 1 && nc.out[1] >= 0 {
			return nil, unsupportedf("training outputs", "training-mode outputs")
		}
		if v := nc.inVal(i); v == nil || v.kind != kindConst {
			return nil, unsupportedf("with runtime statistics", "input %d is not a constant", i)
		}
	}
	c := x.shape[1]
	p := make([][]float32, 4)
	for i := range p {
		var err error
		if p[i], _, err = nc.constFloats(i + 1); err != nil {
			return nil, err
		}
		if len(p[i]) != c {
			return nil, fmt.Errorf("input %d has %d values for %d channels", i+1, len(p[i]), c)
		}
	}
	s := &scaleShiftStep{src: nc.in[0], dst: nc.out[0], c: c, planes: x.shape[0] * c, scale: make([]float32, c), shift: make([]float32, c)}
	s.hw = x.elems / max(s.planes, 1)
	for i := 0; i < c; i++ {
		sc := float64(p[0][i]) / math.Sqrt(float64(p[3][i])+op.Epsilon)
		s.scale[i] = float32(sc)
		s.shift[i] = float32(float64(p[1][i]) - float64(p[2][i])*sc)
	}
	return s, nil
}

func (s *scaleShiftStep) run(x *Exec) error {
	x.parRange(s, s.planes, max(1, eltGrain/max(s.hw, 1)))
	return nil
}

func (s *scaleShiftStep) rng(x *Exec, _, lo, hi int) {
	src, dst := x.f32(s.src), x.f32(s.dst)
	for p := lo; p < hi; p++ {
		c := p % s.c
		vec.ScaleShift(dst[p*s.hw:(p+1)*s.hw], src[p*s.hw:(p+1)*s.hw], s.scale[c], s.shift[c])
	}
}

// normStep normalizes groups of d consecutive values to zero mean and unit
// variance (in float64), then applies a scale and bias that are either
// per channel (InstanceNorm: group g uses channel g%c) or per element of
// the normalized block (LayerNorm, broadcast).
type normStep struct {
	src, dst   int
	groups, d  int
	eps        float64
	perChannel bool
	c          int
	// scale and bias: constants, or values read at run time (sv, bv).
	scale, bias []float32
	sv, bv      int
	// meanV, invV are LayerNorm's optional Mean and InvStdDev outputs (-1:
	// absent).
	meanV, invV int
}

func buildInstanceNorm(nc *nodeCtx) (step, error) {
	op := any(nc.n.Op).(*ir.InstanceNorm)
	x := nc.inVal(0)
	if x.dtype != tensor.Float32 || len(x.shape) < 3 {
		return nil, unsupportedf(x.dtype.String(), "InstanceNorm of %s%v", x.dtype, x.shape)
	}
	c := x.shape[1]
	s := &normStep{src: nc.in[0], dst: nc.out[0], groups: x.shape[0] * c, eps: op.Epsilon, perChannel: true, c: c, sv: nc.in[1], bv: nc.in[2], meanV: -1, invV: -1}
	s.d = x.elems / max(s.groups, 1)
	return s, nil
}

func buildLayerNorm(nc *nodeCtx) (step, error) {
	op := any(nc.n.Op).(*ir.LayerNorm)
	x := nc.inVal(0)
	if x.dtype != tensor.Float32 {
		return nil, unsupportedf(x.dtype.String(), "LayerNorm of %s", x.dtype)
	}
	axis := op.Axis
	if axis < 0 {
		axis += len(x.shape)
	}
	if axis < 0 || axis >= len(x.shape) {
		return nil, fmt.Errorf("axis %d out of range for %v", op.Axis, x.shape)
	}
	d := tensor.Shape(x.shape[axis:]).NumElements()
	s := &normStep{src: nc.in[0], dst: nc.out[0], d: d, groups: x.elems / max(d, 1), eps: op.Epsilon, sv: -1, bv: -1, meanV: -1, invV: -1}
	for i, p := range []*int{&s.meanV, &s.invV} {
		if v := nc.outVal(i + 1); v != nil {
			if v.dtype != tensor.Float32 || v.elems != s.groups {
				return nil, unsupportedf("with "+v.dtype.String()+" statistics", "output %d is %s%v", i+1, v.dtype, v.shape)
			}
			*p = nc.out[i+1]
		}
	}
	block := x.shape[axis:]
	for i, p := range []*[]float32{&s.scale, &s.bias} {
		v := nc.inVal(i + 1)
		if v == nil {
			continue
		}
		// Broadcast the constant (or, at run time, the value) to the
		// normalized block.
		if v.kind != kindConst {
			if v.elems != d {
				return nil, unsupportedf("with a broadcast runtime scale", "input %d %v", i+1, v.shape)
			}
			if i == 0 {
				s.sv = nc.in[1]
			} else {
				s.bv = nc.in[2]
			}
			continue
		}
		f, _, err := nc.constFloats(i + 1)
		if err != nil {
			return nil, err
		}
		str := broadcastStrides(v.shape, block)
		full := make([]float32, d)
		bs := stridesOf(block)
		for e := range full {
			o, r := 0, e
			for k := range block {
				o += (r / bs[k]) * str[k]
				r %= bs[k]
			}
			full[e] = f[o]
		}
		*p = full
	}
	return s, nil
}

func (s *normStep) run(x *Exec) error {
	x.parRange(s, s.groups, max(1, eltGrain/max(s.d, 1)))
	return nil
}

func (s *normStep) rng(x *Exec, _, lo, hi int) {
	src, dst := x.f32(s.src), x.f32(s.dst)
	scale, bias := s.scale, s.bias
	if s.sv >= 0 {
		scale = x.f32(s.sv)
	}
	if s.bv >= 0 {
		bias = x.f32(s.bv)
	}
	for g := lo; g < hi; g++ {
		v := src[g*s.d : (g+1)*s.d]
		o := dst[g*s.d : (g+1)*s.d]
		if !s.perChannel {
			s.vector(x, g, v, o, scale, bias)
			continue
		}
		var sum float64
		for _, e := range v {
			sum += float64(e)
		}
		mean := sum / float64(s.d)
		var sq float64
		for _, e := range v {
			t := float64(e) - mean
			sq += t * t
		}
		inv := 1 / math.Sqrt(sq/float64(s.d)+s.eps)
		if s.meanV >= 0 {
			x.f32(s.meanV)[g] = float32(mean)
		}
		if s.invV >= 0 {
			x.f32(s.invV)[g] = float32(inv)
		}
		if s.perChannel {
			c := g % s.c
			a := float64(scale[c]) * inv
			b := float64(bias[c]) - mean*a
			for i, e := range v {
				o[i] = float32(float64(e)*a + b)
			}
			continue
		}
		for i, e := range v {
			y := (float64(e) - mean) * inv
			if scale != nil {
				y *= float64(scale[i])
			}
			if bias != nil {
				y += float64(bias[i])
			}
			o[i] = float32(y)
		}
	}
}

// vector normalizes one group whose scale and bias vary along it (Layer
// Normalization), in float32 with package vec: the mean, the centred
// values into o, their variance as a dot product, then o scaled in place.
func (s *normStep) vector(x *Exec, g int, v, o, scale, bias []float32) {
	d := float32(s.d)
	mean := vec.Sum(v) / d
	vec.ScaleShift(o, v, 1, -mean)
	inv := float32(1 / math.Sqrt(float64(vec.Dot(o, o)/d)+s.eps))
	if s.meanV >= 0 {
		x.f32(s.meanV)[g] = mean
	}
	if s.invV >= 0 {
		x.f32(s.invV)[g] = inv
	}
	vec.ScaleShift(o, o, inv, 0)
	if scale != nil {
		vec.Mul(o, o, scale)
	}
	if bias != nil {
		vec.Add(o, o, bias)
	}
}

// lrnStep is local response normalization across channels.
type lrnStep struct {
	src, dst            int
	n, c, hw            int
	alpha, beta, bias   float64
	size, before, after int
}

func buildLRN(nc *nodeCtx) (step, error) {
	op := any(nc.n.Op).(*ir.LRN)
	x := nc.inVal(0)
	if x.dtype != tensor.Float32 || len(x.shape) < 2 {
		return nil, unsupportedf(x.dtype.String(), "LRN of %s%v", x.dtype, x.shape)
	}
	s := &lrnStep{src: nc.in[0], dst: nc.out[0], n: x.shape[0], c: x.shape[1], alpha: op.Alpha, beta: op.Beta, bias: op.Bias, size: op.Size}
	s.hw = x.elems / max(s.n*s.c, 1)
	s.before, s.after = (op.Size-1)/2, op.Size-1-(op.Size-1)/2
	return s, nil
}

func (s *lrnStep) run(x *Exec) error {
	x.parRange(s, s.n*s.c, 1)
	return nil
}

func (s *lrnStep) rng(x *Exec, _, lo, hi int) {
	src, dst := x.f32(s.src), x.f32(s.dst)
	for p := lo; p < hi; p++ {
		img, c := p/s.c, p%s.c
		c0, c1 := max(0, c-s.before), min(s.c-1, c+s.after)
		for i := 0; i < s.hw; i++ {
			var sq float64
			for k := c0; k <= c1; k++ {
				v := float64(src[(img*s.c+k)*s.hw+i])
				sq += v * v
			}
			d := math.Pow(s.bias+s.alpha/float64(s.size)*sq, s.beta)
			dst[p*s.hw+i] = float32(float64(src[p*s.hw+i]) / d)
		}
	}
}
