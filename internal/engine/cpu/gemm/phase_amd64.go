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
	done := 16 * blocks
	if blocks > 0 {
		deinterleave2AVX2(&even[0], &odd[0], &src[0], blocks, rows, srcStride, dstStride)
		if done < n-1 {
			// The rest but an odd last value as one more block that
			// overlaps the last (its values written again, the same):
			// it starts on an even value, so evens stay evens. A 63-value
			// row had left 15 values to the loop below.
			start := (n - 16) &^ 1
			deinterleave2AVX2(&even[start/2], &odd[start/2], &src[start], 1, rows, srcStride, dstStride)
			done = start + 16
		}
	}
	for r := 0; done < n && r < rows; r++ {
		s, e, o := src[r*srcStride:r*srcStride+n], even[r*dstStride:], odd[r*dstStride:]
		for i := done; i < n; i++ {
			if i%2 == 0 {
				e[i/2] = s[i]
			} else {
				o[i/2] = s[i]
			}
		}
	}
	return true
}
