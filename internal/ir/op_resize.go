package ir

import (
	"fmt"
	"math"

	"goinfer/internal/tensor"
)

// Kind implements Op.
func (*Resize) Kind() string { return "Resize" }

// resizePlan is Resize's resolved geometry per dimension of X.
type resizePlan struct {
	out      tensor.Shape
	scale    []float64 // the scale factor coordinates are mapped with
	roiStart []float64
	roiEnd   []float64
}

// check validates the string attributes.
func (r *Resize) check() error {
	switch r.Mode {
	case "nearest", "linear", "cubic":
	default:
		return fmt.Errorf("mode %q is not nearest, linear or cubic", r.Mode)
	}
	switch r.CoordinateTransformMode {
	case "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize":
	default:
		return fmt.Errorf("coordinate_transformation_mode %q is not one ONNX defines", r.CoordinateTransformMode)
	}
	if r.Mode == "nearest" {
		switch r.NearestMode {
		case "round_prefer_floor", "round_prefer_ceil", "floor", "ceil":
		default:
			return fmt.Errorf("nearest_mode %q is not round_prefer_floor, round_prefer_ceil, floor or ceil", r.NearestMode)
		}
		if r.Antialias {
			return fmt.Errorf("antialias applies to the linear and cubic modes, not nearest")
		}
	}
	switch r.KeepAspectRatioPolicy {
	case "", "stretch", "not_larger", "not_smaller":
	default:
		return fmt.Errorf("keep_aspect_ratio_policy %q is not stretch, not_larger or not_smaller", r.KeepAspectRatioPolicy)
	}
	return nil
}

// inputs returns the roi, scales and sizes inputs' positions.
func (r *Resize) inputs() (roi, scales, sizes int) {
	if r.ScalesOnly {
		return -1, 1, -1
	}
	return 1, 2, 3
}

// plan resolves the output shape and scales from the roi, scales and
// sizes values (nil when absent or empty).
func (r *Resize) plan(x tensor.Shape, roi, scales []float64, sizes []int) (*resizePlan, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	rank := len(x)
	axes := make([]int, rank)
	for i := range axes {
		axes[i] = i
	}
	if len(r.Axes) != 0 {
		var err error
		if axes, err = axesOf(r.Axes, rank, "axes"); err != nil {
			return nil, err
		}
	}
	p := &resizePlan{out: x.Clone(), scale: make([]float64, rank), roiStart: make([]float64, rank), roiEnd: make([]float64, rank)}
	for i := range p.scale {
		p.scale[i], p.roiEnd[i] = 1, 1
	}
	if len(roi) != 0 && r.CoordinateTransformMode == "tf_crop_and_resize" {
		if len(roi) != 2*len(axes) {
			return nil, fmt.Errorf("roi has %d values, want %d (starts, then ends, of %d axes)", len(roi), 2*len(axes), len(axes))
		}
		for i, a := range axes {
			p.roiStart[a], p.roiEnd[a] = roi[i], roi[len(axes)+i]
		}
	}
	switch {
	case len(scales) != 0 && len(sizes) != 0:
		return nil, fmt.Errorf("scales and sizes are both given; one must be empty")
	case len(scales) != 0:
		if len(scales) != len(axes) {
			return nil, fmt.Errorf("scales %v has %d values, want %d", scales, len(scales), len(axes))
		}
		for i, a := range axes {
			s := scales[i]
			if !(s > 0) || math.IsInf(s, 0) {
				return nil, fmt.Errorf("scales %v must be positive", scales)
			}
			p.scale[a] = s
			o := math.Floor(float64(x[a]) * (p.roiEnd[a] - p.roiStart[a]) * s)
			if !(o < 1<<40) {
				return nil, fmt.Errorf("scales %v make dimension %d of %v too large", scales, a, x)
			}
			p.out[a] = int(o)
		}
	case len(sizes) != 0:
		if len(sizes) != len(axes) {
			return nil, fmt.Errorf("sizes %v has %d values, want %d", sizes, len(sizes), len(axes))
		}
		for i, a := range axes {
			if sizes[i] < 1 {
				return nil, fmt.Errorf("sizes %v must be positive", sizes)
			}
			if x[a] == 0 {
				return nil, fmt.Errorf("cannot resize the empty dimension %d of %v", a, x)
			}
			p.out[a] = sizes[i]
			p.scale[a] = float64(sizes[i]) / float64(x[a])
		}
		if pol := r.KeepAspectRatioPolicy; pol == "not_larger" || pol == "not_smaller" {
			s := p.scale[axes[0]]
			for _, a := range axes[1:] {
				if pol == "not_larger" {
					s = math.Min(s, p.scale[a])
				} else {
					s = math.Max(s, p.scale[a])
				}
			}
			for _, a := range axes {
				p.scale[a] = s
				p.out[a] = int(s*float64(x[a]) + 0.5)
			}
		}
	default:
		return nil, fmt.Errorf("neither scales nor sizes is given")
	}
	for a, d := range p.out {
		if d < 1 && x[a] > 0 {
			return nil, fmt.Errorf("dimension %d of %v resizes to %d", a, x, d)
		}
	}
	return p, nil
}

// resizeParams reads roi, scales and sizes from load-time values.
func (r *Resize) paramsFromValues(in []*Value) (roi, scales []float64, sizes []int, err error) {
	ri, si, zi := r.inputs()
	get := func(i int, what string) ([]float64, error) {
		v := in2(in, i)
		if i < 0 || v == nil || v.Type.Shape.NumElements() == 0 {
			return nil, nil
		}
		if !isFloatType(v.Type.DType) {
			return nil, fmt.Errorf("Resize's %s input %q is %s, want floating-point", what, v.Name, v.Type)
		}
		if v.Const == nil {
			return nil, notConstant("Resize's "+what+" input", v.Name)
		}
		a, err := ArrayFromTensor(v.Const)
		if err != nil {
			return nil, err
		}
		return a.Data, nil
	}
	if roi, err = get(ri, "roi"); err != nil {
		return
	}
	if scales, err = get(si, "scales"); err != nil {
		return
	}
	if v := in2(in, zi); zi >= 0 && v != nil && v.Type.Shape.NumElements() != 0 {
		sizes, err = loadTimeVector(v, "Resize's sizes input")
	}
	return
}

// paramsFromArrays reads roi, scales and sizes from evaluated inputs.
func (r *Resize) paramsFromArrays(in []*Array) (roi, scales []float64, sizes []int, err error) {
	ri, si, zi := r.inputs()
	get := func(i int) []float64 {
		if a := arg(in, i); i >= 0 && a != nil {
			return a.Data
		}
		return nil
	}
	roi, scales = get(ri), get(si)
	if a := arg(in, zi); zi >= 0 && a != nil && len(a.Data) != 0 {
		sizes, err = arrayInts(a, "Resize's sizes input")
	}
	return
}

// Infer implements Op.
func (r *Resize) Infer(in []*Value) ([]Type, error) {
	hi := 4
	if r.ScalesOnly {
		hi = 2
	}
	if err := wantInputs(in, 1, hi); err != nil {
		return nil, err
	}
	if in[0].Type.DType == tensor.Bool {
		return nil, fmt.Errorf("input X is %s, want a numeric tensor", in[0].Type)
	}
	roi, scales, sizes, err := r.paramsFromValues(in)
	if err != nil {
		return nil, err
	}
	p, err := r.plan(in[0].Type.Shape, roi, scales, sizes)
	if err != nil {
		return nil, fmt.Errorf("X %s: %w", in[0].Type, err)
	}
	return []Type{{DType: in[0].Type.DType, Shape: p.out}}, nil
}

// resizeTap is one input sample and its weight.
type resizeTap struct {
	i int
	w float64
}

// original maps output coordinate o of dimension a to X's coordinates;
// outside reports a tf_crop_and_resize sample beyond X.
func (r *Resize) original(p *resizePlan, a, o, in int) (x float64, outside bool) {
	s := p.scale[a]
	outF := s * float64(in) // the unrounded output size
	of := float64(o)
	switch r.CoordinateTransformMode {
	case "half_pixel":
		return (of+0.5)/s - 0.5, false
	case "half_pixel_symmetric":
		adj := float64(p.out[a]) / outF
		center := float64(in) / 2
		return center*(1-adj) + (of+0.5)/s - 0.5, false
	case "pytorch_half_pixel":
		if outF == 1 {
			return -0.5, false
		}
		return (of+0.5)/s - 0.5, false
	case "align_corners":
		if outF == 1 {
			return 0, false
		}
		return of * float64(in-1) / (outF - 1), false
	case "asymmetric":
		return of / s, false
	case "tf_half_pixel_for_nn":
		return (of + 0.5) / s, false
	case "tf_crop_and_resize":
		st, en := p.roiStart[a], p.roiEnd[a]
		if outF == 1 {
			x = (en - st) * float64(in-1) / 2
		} else {
			x = of * (en - st) * float64(in-1) / (outF - 1)
		}
		x += st * float64(in-1)
		return x, x < 0 || x > float64(in-1)
	}
	return 0, false
}

// cubicWeight is the cubic convolution kernel with coefficient a at
// distance d.
func cubicWeight(d, a float64) float64 {
	d = math.Abs(d)
	switch {
	case d <= 1:
		return ((a+2)*d-(a+3))*d*d + 1
	case d < 2:
		return ((a*d-5*a)*d+8*a)*d - 4*a
	}
	return 0
}

// taps returns, per output index of dimension a, the input samples and
// weights, and which outputs are extrapolated.
func (r *Resize) taps(p *resizePlan, a, in int) ([][]resizeTap, []bool) {
	n := p.out[a]
	res := make([][]resizeTap, n)
	outside := make([]bool, n)
	clamp := func(i int) int { return min(max(i, 0), in-1) }
	for o := 0; o < n; o++ {
		x, out := r.original(p, a, o, in)
		outside[o] = out
		// base is the sample left of x (x itself counts as right of it),
		// so that ratio is in (0, 1].
		base := int(math.Ceil(x)) - 1
		ratio := x - float64(base)
		if r.Mode == "nearest" {
			i := base + 1
			if x != math.Floor(x) {
				switch r.NearestMode {
				case "round_prefer_floor":
					if ratio <= 0.5 {
						i = base
					}
				case "round_prefer_ceil":
					if ratio < 0.5 {
						i = base
					}
				case "floor":
					i = base
				}
			}
			res[o] = []resizeTap{{i: clamp(i), w: 1}}
			continue
		}
		s := 1.0
		if r.Antialias {
			s = math.Min(p.scale[a], 1)
		}
		var lo int
		var kernel func(d float64) float64
		if r.Mode == "linear" {
			lo = int(math.Floor(-1/s)) + 1
			kernel = func(d float64) float64 { return math.Max(0, 1-math.Abs(d)) }
		} else {
			lo = int(math.Floor(-2/s)) + 1
			ca := r.CubicCoeffA
			kernel = func(d float64) float64 { return cubicWeight(d, ca) }
		}
		var list []resizeTap
		sum := 0.0
		for k := lo; k <= 1-lo; k++ {
			i := base + k
			w := kernel((float64(k) - ratio) * s)
			if r.ExcludeOutside && (i < 0 || i >= in) {
				w = 0
			}
			list = append(list, resizeTap{i: i, w: w})
			sum += w
		}
		if r.Antialias || r.ExcludeOutside {
			for k := range list {
				list[k].w /= sum
			}
		}
		for k := range list {
			list[k].i = clamp(list[k].i)
		}
		res[o] = list
	}
	return res, outside
}

// Eval implements Op: one dimension at a time, each output sample is the
// weighted sum of its taps.
func (r *Resize) Eval(in []*Array) ([]*Array, error) {
	x := in[0]
	roi, scales, sizes, err := r.paramsFromArrays(in)
	if err != nil {
		return nil, err
	}
	p, err := r.plan(x.Shape, roi, scales, sizes)
	if err != nil {
		return nil, err
	}
	cur := x
	var outside [][]bool
	for a := range x.Shape {
		if p.out[a] == x.Shape[a] && p.scale[a] == 1 && r.CoordinateTransformMode != "tf_crop_and_resize" {
			outside = append(outside, nil)
			continue
		}
		taps, out := r.taps(p, a, x.Shape[a])
		outside = append(outside, out)
		shape := cur.Shape.Clone()
		shape[a] = p.out[a]
		next := NewArray(x.DType, shape)
		outer := shape[:a].NumElements()
		inner := shape[a+1:].NumElements()
		inN := cur.Shape[a]
		for o := 0; o < outer; o++ {
			for j, list := range taps {
				dst := next.Data[(o*p.out[a]+j)*inner:]
				for _, t := range list {
					src := cur.Data[(o*inN+t.i)*inner:]
					for k := 0; k < inner; k++ {
						dst[k] += t.w * src[k]
					}
				}
			}
		}
		cur = next
	}
	if r.CoordinateTransformMode == "tf_crop_and_resize" {
		eachCoord(cur.Shape, func(k int, c []int) {
			for a, o := range c {
				if outside[a] != nil && outside[a][o] {
					cur.Data[k] = r.ExtrapolationValue
					return
				}
			}
		})
	}
	if cur == x {
		cur = x.Clone()
	}
	if isInt(cur.DType) {
		cur.RoundTo()
	}
	return []*Array{cur}, nil
}
