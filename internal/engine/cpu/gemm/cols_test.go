package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestKernelCols checks KernelCols against a float64 product on every
// kernel path, for each width up to ColsMax and one past it (KernelTile's
// path), depths of one step to past a block.
func TestKernelCols(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, p := range kernelPaths() {
		for _, kc := range []int{1, 3, 64, 301} {
			for _, cols := range []int{1, 2, 3, ColsMax, ColsMax + 1} {
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
					KernelCols(kc, a, b, tile, cols)
					for r := range MR {
						for j := range cols {
							var want float64
							for k := range kc {
								want += float64(a[k*MR+r]) * float64(b[k*NR+j])
							}
							if got := tile[r*NR+j]; math.Abs(float64(got)-want) > 1e-4*math.Sqrt(float64(kc)) {
								t.Fatalf("row %d col %d: got %v, want %v", r, j, got, want)
							}
						}
					}
				})
			}
		}
	}
}
