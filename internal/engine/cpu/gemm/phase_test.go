package gemm

import (
	"testing"
)

func TestDeinterleave2(t *testing.T) {
	for _, path := range kernelPaths() {
		restore := path.set()
		for _, n := range []int{0, 1, 2, 3, 31, 32, 33, 63, 64, 65, 112, 225} {
			src := make([]float32, n)
			for i := range src {
				src[i] = float32(i + 1)
			}
			even, odd := make([]float32, (n+1)/2+1), make([]float32, n/2+1)
			Deinterleave2(even, odd, src)
			for i := range src {
				got := even[i/2]
				if i%2 == 1 {
					got = odd[i/2]
				}
				if got != src[i] {
					t.Fatalf("%s n=%d: element %d = %g, want %g", path.name, n, i, got, src[i])
				}
			}
			if even[(n+1)/2] != 0 || odd[n/2] != 0 {
				t.Fatalf("%s n=%d: wrote past the halves", path.name, n)
			}
		}
		restore()
	}
}
