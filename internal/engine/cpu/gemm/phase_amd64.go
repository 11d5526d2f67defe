//go:build amd64 && !purego

package gemm

// deinterleave2AVX512 splits blocks pairs of 16 (32 source values).
//
//go:noescape
func deinterleave2AVX512(even, odd, src *float32, blocks int)

// deinterleave2 does the first pairs of Deinterleave2 in whole blocks of 16
// and returns how many.
func deinterleave2(even, odd, src []float32, n int) int {
	blocks := n / 16
	if !useAVX512 || blocks == 0 {
		return 0
	}
	deinterleave2AVX512(&even[0], &odd[0], &src[0], blocks)
	return blocks * 16
}
