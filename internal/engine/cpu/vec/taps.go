package vec

import "fmt"

// Taps sets dst[i] = bias + sum over t of w[t]*src[offs[t]+i]: a
// convolution over a flattened, pre-padded plane, each tap a shifted
// contiguous run of src (the depthwise kernel's inner loop). The sum runs
// in tap order per element. It panics if len(offs) != len(w), an offset
// is negative, or src is shorter than some offs[t]+len(dst).
func Taps(dst, src []float32, offs []int, w []float32, bias float32) {
	if len(offs) != len(w) {
		panic(fmt.Sprintf("vec.Taps: %d offsets and %d weights", len(offs), len(w)))
	}
	for _, o := range offs {
		if o < 0 || o+len(dst) > len(src) {
			panic(fmt.Sprintf("vec.Taps: offset %d of a %d-element run in a source of %d", o, len(dst), len(src)))
		}
	}
	taps(dst, src, offs, w, bias)
}

func tapsGo(dst, src []float32, offs []int, w []float32, bias float32) {
	for i := range dst {
		dst[i] = bias
	}
	for t, o := range offs {
		axpyGo(dst, src[o:o+len(dst)], w[t])
	}
}

// Deinterleave2 sets even[i] = src[2i] and odd[i] = src[2i+1] for i <
// len(even); odd must be as long and src twice as long.
func Deinterleave2(even, odd, src []float32) {
	n := len(even)
	odd, src = odd[:n], src[:2*n]
	deinterleave2(even, odd, src)
}

func deinterleave2Go(even, odd, src []float32) {
	for i := range even {
		even[i], odd[i] = src[2*i], src[2*i+1]
	}
}
