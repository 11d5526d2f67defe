package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestKernelPairs checks KernelPairs against a float64 product on every
// path: depths around the unrolling, one to several pairs, panels and B
// panels spaced apart, a row stride wider than the block, load on and off.
func TestKernelPairs(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, path := range kernelPaths() {
		restore := path.set()
		for _, sh := range []struct{ kc, npair, padA, padB, padC int }{
			{1, 1, 0, 0, 0}, {3, 2, 0, 0, 0}, {4, 1, 6, 16, 16}, {17, 3, 0, 32, 5}, {64, 2, 12, 0, 0}, {197, 2, 0, 0, 7}, {256, 4, 0, 16, 0},
		} {
			for _, load := range []bool{false, true} {
				name := fmt.Sprintf("%s/kc%d/npair%d/pad%d,%d,%d/load=%v", path.name, sh.kc, sh.npair, sh.padA, sh.padB, sh.padC, load)
				pstride, bstep := MR*sh.kc+sh.padA, NR*sh.kc+sh.padB
				cols := 2 * NR * sh.npair
				ld := cols + sh.padC
				a := randSlice(r, pstride+MR*sh.kc)
				b := randSlice(r, (2*sh.npair-1)*bstep+NR*sh.kc)
				c := randSlice(r, 2*MR*ld)
				old := append([]float32(nil), c...)
				KernelPairs(sh.kc, a, pstride, b, bstep, c, ld, sh.npair, load)
				for i := 0; i < 2*MR; i++ {
					for j := 0; j < ld; j++ {
						got := float64(c[i*ld+j])
						if j >= cols {
							if got != float64(old[i*ld+j]) {
								t.Fatalf("%s: (%d,%d) past the block changed", name, i, j)
							}
							continue
						}
						var want, mag float64
						if load {
							want, mag = float64(old[i*ld+j]), math.Abs(float64(old[i*ld+j]))
						}
						ap := a[(i/MR)*pstride:]
						bp := b[(j/NR)*bstep:]
						for k := 0; k < sh.kc; k++ {
							x := float64(ap[k*MR+i%MR]) * float64(bp[k*NR+j%NR])
							want += x
							mag += math.Abs(x)
						}
						if math.Abs(got-want) > 1e-5*mag+1e-6 {
							t.Fatalf("%s: (%d,%d) = %g, want %g", name, i, j, got, want)
						}
					}
				}
			}
		}
		restore()
	}
}

// BenchmarkPairsVsRun compares the 12 x 32 kernel with KernelRun's 24 x 16
// on a block of a linear layer: 32 A panels (192 rows) against 16 packed
// B panels (256 columns), depth 256, C in L2, load set.
func BenchmarkPairsVsRun(b *testing.B) {
	const np, nb, kc = 32, 16, 256
	r := rand.New(rand.NewPCG(1, 2))
	a := randSlice(r, np*MR*kc)
	bp := randSlice(r, nb*NR*kc)
	ld := nb * NR
	c := make([]float32, np*MR*ld)
	flops := 2 * float64(np*MR*nb*NR*kc)
	b.Run("run", func(b *testing.B) {
		for b.Loop() {
			t := Tile{C: c, Ld: ld, Rows: np * MR, Cols: nb * NR, Load: true}
			KernelRun(np, kc, a, MR*kc, bp, NR, NR*kc, nb, &t)
		}
		b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
	b.Run("pairs", func(b *testing.B) {
		if !PairsWide() {
			b.Skip("no 12 x 32 kernel on this CPU")
		}
		for b.Loop() {
			for p := 0; p < np; p += 2 {
				KernelPairs(kc, a[p*MR*kc:], MR*kc, bp, NR*kc, c[p*MR*ld:], ld, nb/2, true)
			}
		}
		b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}
