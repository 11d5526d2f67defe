//go:build amd64 && !purego

package gemm

// deinterleave2AVX512 splits rows rows of n values (srcStride floats
// apart) into rows dstStride floats apart, the last n mod 32 values of
// each under masks.
//
//go:noescape
func deinterleave2AVX512(even, odd, src *float32, n, rows, srcStride, dstStride int)

// deinterleave2AVX2 splits the first blocks*16 values of rows rows
// (srcStride floats apart) into rows dstStride floats apart; blocks >= 1.
//
//go:noescape
func deinterleave2AVX2(even, odd, src *float32, blocks, rows, srcStride, dstStride int)

// deinterleave2 does all of Deinterleave2Rows (rows of at least two
// values, the operands checked by the caller) and reports whether it
// could.
func deinterleave2(even, odd, src []float32, n, rows, srcStride, dstStride int) bool {
	if !useAsm || n < 2 || rows < 1 {
		return false
	}
	if useAVX512 {
		deinterleave2AVX512(&even[0], &odd[0], &src[0], n, rows, srcStride, dstStride)
		return true
	}
	blocks := n / 16
	if blocks > 0 {
		deinterleave2AVX2(&even[0], &odd[0], &src[0], blocks, rows, srcStride, dstStride)
	}
	for r := range rows {
		s, e, o := src[r*srcStride:r*srcStride+n], even[r*dstStride:], odd[r*dstStride:]
		for i := 16 * blocks; i < n; i++ {
			if i%2 == 0 {
				e[i/2] = s[i]
			} else {
				o[i/2] = s[i]
			}
		}
	}
	return true
}
