package gemm

import (
	"testing"
)

func TestDeinterleave2(t *testing.T) {
	for _, path := range kernelPaths() {
		restore := path.set()
		for _, n := range []int{0, 1, 2, 3, 14, 15, 16, 17, 28, 31, 32, 33, 56, 63, 64, 65, 112, 225} {
			src := make([]float32, n)
			for i := range src {
				src[i] = float32(i + 1)
			}
			even, odd := make([]float32, (n+1)/2+1), make([]float32, n/2+1)
			Deinterleave2Rows(even, odd, src, n, 1, n, len(even))
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

func TestDeinterleave2Rows(t *testing.T) {
	for _, path := range kernelPaths() {
		restore := path.set()
		for _, c := range []struct{ n, rows, ss, ds int }{{14, 7, 28, 7}, {28, 14, 56, 14}, {56, 3, 112, 28}, {33, 4, 40, 20}, {63, 5, 63, 32}, {250, 3, 256, 125}, {47, 2, 50, 30}, {5, 1, 5, 3}, {2, 2, 2, 1}} {
			src := make([]float32, (c.rows-1)*c.ss+c.n)
			for i := range src {
				src[i] = float32(i + 1)
			}
			size := (c.rows-1)*c.ds + (c.n+1)/2 + 1
			even, odd := make([]float32, size), make([]float32, size)
			Deinterleave2Rows(even, odd, src, c.n, c.rows, c.ss, c.ds)
			for r := range c.rows {
				for i := range min(c.ds, size-r*c.ds) {
					want, got := float32(0), even[r*c.ds+i]
					if i < (c.n+1)/2 {
						want = src[r*c.ss+2*i]
					}
					if got != want {
						t.Fatalf("%s %+v: even row %d [%d] = %g, want %g", path.name, c, r, i, got, want)
					}
					want, got = 0, odd[r*c.ds+i]
					if i < c.n/2 {
						want = src[r*c.ss+2*i+1]
					}
					if got != want {
						t.Fatalf("%s %+v: odd row %d [%d] = %g, want %g", path.name, c, r, i, got, want)
					}
				}
			}
		}
		restore()
	}
}

// BenchmarkDeinterleave2Rows splits a 250x250 plane (the default bench's
// stem input) into its column phases, on each kernel path.
func BenchmarkDeinterleave2Rows(b *testing.B) {
	const n, rows = 250, 250
	src := make([]float32, n*rows)
	even, odd := make([]float32, (n+1)/2*rows), make([]float32, (n+1)/2*rows)
	for _, path := range kernelPaths() {
		b.Run(path.name, func(b *testing.B) {
			defer path.set()()
			for b.Loop() {
				Deinterleave2Rows(even, odd, src, n, rows, n, (n+1)/2)
			}
			b.ReportMetric(float64(4*n*rows)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}
