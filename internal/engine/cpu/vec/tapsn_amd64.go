//go:build amd64 && !purego

package vec

//go:noescape
func tapsNAVX512(dst *float32, dstStride int, src *float32, offs *int, w, bias *float32, taps, no, n, relu int)

//go:noescape
func tapsN3AVX512(dst *float32, dstStride int, src *float32, offs *int, w, bias *float32, taps, n, relu int)

// tapsRun is the run tapsN3AVX512 computes per pass: three vectors.
const tapsRun = 48

func tapsN(dst []float32, dstStride int, src []float32, offs []int, w, bias []float32, no, n int, relu bool) {
	if !useAVX512 || len(offs) == 0 {
		tapsNGo(dst, dstStride, src, offs, w, bias, no, n, relu)
		return
	}
	r := 0
	if relu {
		r = 1
	}
	done := 0
	if no%8 == 0 && n >= tapsRun {
		// Eight outputs over three vectors load fewer operands per FMA
		// than sixteen over one; the rest of the run takes the latter.
		done = n / tapsRun * tapsRun
		for o := 0; o < no; o += 8 {
			tapsN3AVX512(&dst[o*dstStride], dstStride, &src[0], &offs[0], &w[o], &bias[o], len(offs), done, r)
		}
		if done == n {
			return
		}
	}
	tapsNAVX512(&dst[done], dstStride, &src[done], &offs[0], &w[0], &bias[0], len(offs), no, n-done, r)
}
