//go:build !amd64 || purego

package vec

func interleave(dst, src []float32, nc, plane, rows, n, srcRow, dstRow int) {
	interleaveGo(dst, src, nc, plane, rows, n, srcRow, dstRow)
}
func deinterleave(dst, src []float32, nc, plane, n int) { deinterleaveGo(dst, src, nc, plane, n) }
