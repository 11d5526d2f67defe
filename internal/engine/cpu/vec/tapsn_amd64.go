//go:build amd64 && !purego

package vec

//go:noescape
func tapsNAVX512(dst *float32, dstStride int, src *float32, offs *int, w, bias *float32, taps, no, n int)

//go:noescape
func tapsN3AVX512(dst *float32, dstStride int, src *float32, offs *int, w, bias *float32, taps, n int)

//go:noescape
func tapsN4AVX512(dst *float32, dstStride int, src *float32, offs *int, w, bias *float32, taps, n int)

// tapsRun is the run tapsN3AVX512 computes per pass: three vectors.
const tapsRun = 48

func tapsN(dst []float32, dstStride int, src []float32, offs []int, w, bias []float32, no, n int) {
	if !useAVX512 || len(offs) == 0 {
		tapsNGo(dst, dstStride, src, offs, w, bias, no, n)
		return
	}
	done := 0
	if no%8 == 0 && n >= tapsRun {
		// Eight outputs over three vectors load fewer operands per FMA
		// than sixteen over one; the rest of the run takes the latter.
		done = n / tapsRun * tapsRun
		four := n-done == 16
		if four {
			// A run of 48k+16 (the 112 columns of a 224 image's
			// stride-2 stem) ends in four vectors, four outputs at a
			// time (8 loads per 16 FMAs), not one vector of sixteen
			// outputs (17 per 16).
			done -= tapsRun
		}
		for o := 0; done > 0 && o < no; o += 8 {
			tapsN3AVX512(&dst[o*dstStride], dstStride, &src[0], &offs[0], &w[o], &bias[o], len(offs), done)
		}
		if four {
			for o := 0; o < no; o += 4 {
				tapsN4AVX512(&dst[o*dstStride+done], dstStride, &src[done], &offs[0], &w[o], &bias[o], len(offs), 4*16)
			}
			done += 4 * 16
		}
		if done == n {
			return
		}
	}
	tapsNAVX512(&dst[done], dstStride, &src[done], &offs[0], &w[0], &bias[0], len(offs), no, n-done)
}
