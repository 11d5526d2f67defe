//go:build amd64 && !purego

package gemm

// deinterleave2AVX512 splits rows rows of n values (srcStride floats
// apart) into rows dstStride floats apart, the last n mod 32 values of
// each under masks.
//
//go:noescape
func deinterleave2AVX512(even, odd, src *float32, n, rows, srcStride, dstStride int)

// deinterleave2 does all of Deinterleave2Rows (rows of at least two
// values, the operands checked by the caller) and reports whether it
// could.
func deinterleave2(even, odd, src []float32, n, rows, srcStride, dstStride int) bool {
	if !useAVX512 || n < 2 || rows < 1 {
		return false
	}
	deinterleave2AVX512(&even[0], &odd[0], &src[0], n, rows, srcStride, dstStride)
	return true
}
