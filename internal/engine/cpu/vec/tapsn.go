package vec

import "fmt"

// TapsN is Taps for up to DWLanes outputs that read the same input runs
// (a convolution with few input channels, such as a network's stem, over
// pre-padded planes): for o < no and i < n it sets
//
//	dst[o*dstStride+i] = bias[o] + sum over t of w[t*DWLanes+o]*src[offs[t]+i]
//
// summed in tap order, then with relu set max(0, that), NaN kept. Each
// input vector is loaded once for all outputs.
// bias holds DWLanes values (those past no unused). It panics if an
// operand is too short, an offset is negative, no is
// outside [1, DWLanes] or dstStride < n.
func TapsN(dst []float32, dstStride int, src []float32, offs []int, w, bias []float32, no, n int, relu bool) {
	if n <= 0 {
		return
	}
	maxOff := 0
	for _, o := range offs {
		if o < 0 {
			panic(fmt.Sprintf("vec.TapsN: negative offset %d", o))
		}
		maxOff = max(maxOff, o)
	}
	switch {
	case no < 1 || no > DWLanes || dstStride < n:
		panic(fmt.Sprintf("vec.TapsN: %d outputs %d apart for runs of %d", no, dstStride, n))
	case len(dst) < (no-1)*dstStride+n:
		panic(fmt.Sprintf("vec.TapsN: %d floats for %d outputs %d apart", len(dst), no, dstStride))
	case len(w) < len(offs)*DWLanes || len(bias) < DWLanes:
		panic(fmt.Sprintf("vec.TapsN: %d weights and %d biases for %d taps", len(w), len(bias), len(offs)))
	case len(offs) > 0 && maxOff+n > len(src):
		panic(fmt.Sprintf("vec.TapsN: offset %d of a %d-element run in a source of %d", maxOff, n, len(src)))
	}
	tapsN(dst, dstStride, src, offs, w, bias, no, n, relu)
}

func tapsNGo(dst []float32, dstStride int, src []float32, offs []int, w, bias []float32, no, n int, relu bool) {
	for o := 0; o < no; o++ {
		d := dst[o*dstStride : o*dstStride+n]
		for i := range d {
			d[i] = bias[o]
		}
		for t, off := range offs {
			axpyGo(d, src[off:off+n], w[t*DWLanes+o])
		}
		if relu {
			reluGo(d, d)
		}
	}
}

// TapsNFast reports whether TapsN runs vector code on this CPU (AVX-512):
// elsewhere a convolution does better through the GEMM.
func TapsNFast() bool { return useAVX512 }
