//go:build !amd64 || purego

package gemm

func deinterleave2(even, odd, src []float32, n, rows, srcStride, dstStride int) bool { return false }
