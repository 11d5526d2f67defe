//go:build amd64 && !purego

package vec

//go:noescape
func tapsNAVX512(dst *float32, dstStride int, src *float32, offs *int, w, bias *float32, taps, no, n int)

func tapsN(dst []float32, dstStride int, src []float32, offs []int, w, bias []float32, no, n int) {
	if !useAVX512 || len(offs) == 0 {
		tapsNGo(dst, dstStride, src, offs, w, bias, no, n)
		return
	}
	tapsNAVX512(&dst[0], dstStride, &src[0], &offs[0], &w[0], &bias[0], len(offs), no, n)
}
