package gemm

import "fmt"

// Deinterleave2 splits src into its even and odd elements: even[i] =
// src[2i], odd[i] = src[2i+1]. It is how a stride-2 convolution's input rows
// become phase planes that the packing reads as shifts (AVX-512 where the
// CPU has it: the copy had cost a quarter of a strided convolution).
func Deinterleave2(even, odd, src []float32) {
	n := len(src) / 2
	if len(even) < (len(src)+1)/2 || len(odd) < n {
		panic(fmt.Sprintf("gemm: Deinterleave2 of %d values into %d and %d", len(src), len(even), len(odd)))
	}
	done := deinterleave2(even, odd, src, n)
	for i := done; i < n; i++ {
		even[i], odd[i] = src[2*i], src[2*i+1]
	}
	if len(src)%2 == 1 {
		even[n] = src[2*n]
	}
}
