package gemm

import "fmt"

// Deinterleave2Rows splits rows rows of n values each into their even and
// odd values: row r read from src[r*srcStride:] goes to even[r*dstStride:]
// (its values 0, 2, 4...) and odd[r*dstStride:] (1, 3, 5...). It is how a
// stride-2 convolution's input becomes phase planes that the packing reads
// as shifts. A plane's rows of one parity go in one call, where a
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
