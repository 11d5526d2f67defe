package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestKernelCols checks KernelCols against a float64 product, with the
// assembly and the Go chunk loop, for each width up to ColsMax and depths
// of less than one chunk, whole chunks and a ragged end.
func TestKernelCols(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, p := range kernelPaths() {
		for _, kc := range []int{1, 8, 16, 24, 64, 301} {
			for cols := 1; cols <= ColsMax; cols++ {
				t.Run(fmt.Sprintf("%s/kc%d/cols%d", p.name, kc, cols), func(t *testing.T) {
					restore := p.set()
					defer restore()
					a, b := make([]float32, kc*MR), make([]float32, kc*NR)
					for i := range a {
						a[i] = float32(rng.NormFloat64())
					}
					for i := range b {
						b[i] = float32(rng.NormFloat64())
					}
					tile := make([]float32, MR*NR)
					for i := range tile {
						tile[i] = -7
					}
					var cp ColsPanel
					cp.Expand(kc, b, cols, make([]float32, ColsBufLen(kc)))
					KernelCols(a, &cp, tile)
					for r := range MR {
						for j := range NR {
							got := tile[r*NR+j]
							if j >= cols {
								if got != -7 {
									t.Fatalf("row %d col %d past the panel's columns written: %v", r, j, got)
								}
								continue
							}
							var want float64
							for k := range kc {
								want += float64(a[k*MR+r]) * float64(b[k*NR+j])
							}
							if math.Abs(float64(got)-want) > 1e-4*math.Sqrt(float64(kc)) {
								t.Fatalf("row %d col %d: got %v, want %v", r, j, got, want)
							}
						}
					}
				})
			}
		}
	}
}
