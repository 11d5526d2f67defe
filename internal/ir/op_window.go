package ir

import (
	"fmt"

	"goinfer/internal/tensor"
)

// The sliding-window geometry Conv and the pools share: per spatial
// dimension, the kernel extent, stride, dilation, padding and output size,
// and the taps each output position reads.

// window is the resolved geometry over the spatial dimensions.
type window struct {
	in, kernel, strides, dilations []int
	padBegin, padEnd               []int
	out                            []int
}

// spatialAttr returns attr, or n copies of def when attr is empty; what
// names the attribute in the error.
func spatialAttr(attr []int, n, def int, what string) ([]int, error) {
	if len(attr) == 0 {
		out := make([]int, n)
		for i := range out {
			out[i] = def
		}
		return out, nil
	}
	if len(attr) != n {
		return nil, fmt.Errorf("%s %v has %d values, want %d (one per spatial dimension)", what, attr, len(attr), n)
	}
	for _, v := range attr {
		if v < 1 {
			return nil, fmt.Errorf("%s %v must be positive", what, attr)
		}
	}
	return append([]int(nil), attr...), nil
}

// planWindow resolves the geometry of a window of the given kernel over
// the spatial dimensions in. autoPad SAME_UPPER/SAME_LOWER choose pads
// that give ceil(in/stride) outputs (the extra pad at the end or the
// beginning), VALID none; otherwise pads (begins, then ends) apply. ceil
// rounds the output size up (pools' ceil_mode) but never starts a window
// inside the end padding.
func planWindow(in, kernel, strides, pads, dilations []int, autoPad string, ceil bool) (*window, error) {
	nd := len(in)
	w := &window{in: in, kernel: kernel}
	var err error
	if len(kernel) != nd {
		return nil, fmt.Errorf("kernel %v has %d dimensions, the input has %d spatial ones", kernel, len(kernel), nd)
	}
	for _, k := range kernel {
		if k < 1 {
			return nil, fmt.Errorf("kernel %v must be positive", kernel)
		}
	}
	if w.strides, err = spatialAttr(strides, nd, 1, "strides"); err != nil {
		return nil, err
	}
	if w.dilations, err = spatialAttr(dilations, nd, 1, "dilations"); err != nil {
		return nil, err
	}
	w.padBegin, w.padEnd, w.out = make([]int, nd), make([]int, nd), make([]int, nd)
	switch autoPad {
	case "", "NOTSET":
		if len(pads) != 0 && len(pads) != 2*nd {
			return nil, fmt.Errorf("pads %v has %d values, want %d (begins then ends)", pads, len(pads), 2*nd)
		}
		for i, p := range pads {
			if p < 0 {
				return nil, fmt.Errorf("pads %v must not be negative", pads)
			}
			if i < nd {
				w.padBegin[i] = p
			} else {
				w.padEnd[i-nd] = p
			}
		}
	case "VALID":
	case "SAME_UPPER", "SAME_LOWER":
		for i := range in {
			out := (in[i] + w.strides[i] - 1) / w.strides[i]
			ext := (kernel[i]-1)*w.dilations[i] + 1
			total := max(0, (out-1)*w.strides[i]+ext-in[i])
			small, big := total/2, total-total/2
			if autoPad == "SAME_UPPER" {
				w.padBegin[i], w.padEnd[i] = small, big
			} else {
				w.padBegin[i], w.padEnd[i] = big, small
			}
		}
	default:
		return nil, fmt.Errorf("auto_pad %q is not NOTSET, SAME_UPPER, SAME_LOWER or VALID", autoPad)
	}
	for i := range in {
		ext := (kernel[i]-1)*w.dilations[i] + 1
		span := in[i] + w.padBegin[i] + w.padEnd[i] - ext
		if span < 0 {
			return nil, fmt.Errorf("the dilated kernel (%d) is larger than the padded input (%d) in spatial dimension %d", ext, in[i]+w.padBegin[i]+w.padEnd[i], i)
		}
		o := span/w.strides[i] + 1
		if ceil && span%w.strides[i] != 0 {
			o++
			// The last window must start inside the input or its begin
			// padding.
			if (o-1)*w.strides[i] >= in[i]+w.padBegin[i] {
				o--
			}
		}
		w.out[i] = o
	}
	return w, nil
}

// tap is one kernel position read by an output position: the kernel's flat
// offset and the input's flat spatial offset.
type tap struct{ k, i int32 }

// taps lists, per output position (row-major over w.out), the taps whose
// input position lies inside the input. Padded positions are left out tap
// by tap, so a kernel wider than the input never reads outside it.
func (w *window) taps() [][]tap {
	nOut := tensor.Shape(w.out).NumElements()
	inStr := Strides(w.in)
	kShape := tensor.Shape(w.kernel)
	res := make([][]tap, nOut)
	pos := make([]int, len(w.in))
	eachCoord(tensor.Shape(w.out), func(o int, oc []int) {
		var list []tap
		eachCoord(kShape, func(kf int, kc []int) {
			p := 0
			for d := range oc {
				pos[d] = oc[d]*w.strides[d] - w.padBegin[d] + kc[d]*w.dilations[d]
				if pos[d] < 0 || pos[d] >= w.in[d] {
					return
				}
				p += pos[d] * inStr[d]
			}
			list = append(list, tap{k: int32(kf), i: int32(p)})
		})
		res[o] = list
	})
	return res
}

// paddedCount is, per output position, how many kernel positions fall
// inside the input plus its explicit padding (AveragePool's divisor with
// count_include_pad; ceil_mode's extra positions past the end padding are
// not counted).
func (w *window) paddedCount() []int {
	res := make([]int, tensor.Shape(w.out).NumElements())
	eachCoord(tensor.Shape(w.out), func(o int, oc []int) {
		n := 1
		for d := range oc {
			c := 0
			for k := 0; k < w.kernel[d]; k++ {
				if oc[d]*w.strides[d]+k*w.dilations[d] < w.in[d]+w.padBegin[d]+w.padEnd[d] {
					c++
				}
			}
			n *= c
		}
		res[o] = n
	})
	return res
}

// pads returns the resolved pads, begins then ends.
func (w *window) pads() []int { return append(append([]int(nil), w.padBegin...), w.padEnd...) }

// run is a stretch of output positions along the last spatial dimension
// that one kernel position reads from evenly spaced input positions:
// out[dst+t] uses in[src+t*step] for t < n.
type run struct{ dst, src, n, step int32 }

// runs lists, per kernel position (row-major over the kernel), the runs
// covering every output position whose input lies inside the input; the
// rest read padding. Convolutions spend their time in these inner loops,
// which is why they are contiguous in the output.
func (w *window) runs() [][]run {
	nd := len(w.in)
	last := nd - 1
	outRows := tensor.Shape(w.out[:last])
	inStr := Strides(w.in)
	ow, iw := w.out[last], w.in[last]
	s, p, d := w.strides[last], w.padBegin[last], w.dilations[last]
	res := make([][]run, tensor.Shape(w.kernel).NumElements())
	eachCoord(tensor.Shape(w.kernel), func(kf int, kc []int) {
		// Output positions o along the last dimension read input
		// o*s - p + kc*d, inside [0, iw) for o in [lo, hi).
		off := kc[last]*d - p
		lo := 0
		if off < 0 {
			lo = (-off + s - 1) / s
		}
		hi := ow
		if lim := iw - off; lim <= 0 {
			hi = 0
		} else {
			hi = min(hi, (lim+s-1)/s)
		}
		if lo >= hi {
			return
		}
		var list []run
		eachCoord(outRows, func(r int, rc []int) {
			src := 0
			for i := 0; i < last; i++ {
				pos := rc[i]*w.strides[i] - w.padBegin[i] + kc[i]*w.dilations[i]
				if pos < 0 || pos >= w.in[i] {
					return
				}
				src += pos * inStr[i]
			}
			list = append(list, run{dst: int32(r*ow + lo), src: int32(src + lo*s + off), n: int32(hi - lo), step: int32(s)})
		})
		res[kf] = list
	})
	return res
}
