package gemm

import "fmt"

// Deinterleave2 splits src into its even and odd elements: even[i] =
// src[2i], odd[i] = src[2i+1]. It is how a stride-2 convolution's input rows
// become phase planes that the packing reads as shifts (AVX-512 where the
// CPU has it: the copy had cost a quarter of a strided convolution).
func Deinterleave2(even, odd, src []float32) {
	Deinterleave2Rows(even, odd, src, len(src), 1, len(src), len(even))
}

// Deinterleave2Rows is Deinterleave2 for rows rows of n values each, row r
// read from src[r*srcStride:] and split into even[r*dstStride:] and
// odd[r*dstStride:]: a plane's rows of one parity in one call, where a
// call per row had cost as much as the split itself on the 14- and
// 28-value rows of late stages.
func Deinterleave2Rows(even, odd, src []float32, n, rows, srcStride, dstStride int) {
	if rows <= 0 || n <= 0 {
		return
	}
	h := n / 2
	if n > srcStride && rows > 1 || (n+1)/2 > dstStride && rows > 1 || len(src) < (rows-1)*srcStride+n ||
		len(even) < (rows-1)*dstStride+(n+1)/2 || len(odd) < (rows-1)*dstStride+h {
		panic(fmt.Sprintf("gemm: Deinterleave2Rows of %d rows of %d values (strides %d, %d) from %d into %d and %d",
			rows, n, srcStride, dstStride, len(src), len(even), len(odd)))
	}
	if deinterleave2(even, odd, src, n, rows, srcStride, dstStride) {
		return
	}
	for r := range rows {
		s, e, o := src[r*srcStride:], even[r*dstStride:], odd[r*dstStride:]
		for i := 0; i < h; i++ {
			e[i], o[i] = s[2*i], s[2*i+1]
		}
		if n%2 == 1 {
			e[h] = s[2*h]
		}
	}
}
