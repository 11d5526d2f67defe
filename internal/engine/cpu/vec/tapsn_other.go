//go:build !amd64 || purego

package vec

func tapsN(dst []float32, dstStride int, src []float32, offs []int, w, bias []float32, no, n int, relu bool) {
	tapsNGo(dst, dstStride, src, offs, w, bias, no, n, relu)
}
