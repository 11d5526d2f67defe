package gemm

import (
	"math/rand/v2"
	"testing"
)

type packFunc func(dst, src []float32, g *Gather)

// packers lists the PackGather implementations this machine can run.
func packers() map[string]packFunc {
	p := map[string]packFunc{"go": packGatherGo}
	if useAsm {
		p["avx2"] = func(dst, src []float32, g *Gather) {
			z := useAVX512DQ
			useAVX512DQ = false
			defer func() { useAVX512DQ = z }()
			packGather(dst, src, g)
		}
	}
	if useAVX512DQ {
		p["avx512"] = packGather
	}
	return p
}

func TestPackGather(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	src := randSlice(r, 1000)
	for _, contiguous := range []bool{true, false} {
		for _, kc := range []int{1, 3, 9, 147} {
			g := &Gather{Contiguous: contiguous, Offs: make([]int32, kc), Mask: make([]int32, kc)}
			const nmasks = 5
			g.Masks = make([]int32, nmasks*NR)
			for i := range g.Masks {
				if r.IntN(4) != 0 {
					g.Masks[i] = -1
				}
			}
			base := int32(r.IntN(200)) - 20 // lane 0 may lie before src (padding)
			for l := range g.Lanes {
				if contiguous {
					g.Lanes[l] = base + int32(l)
				} else {
					g.Lanes[l] = base + int32(r.IntN(300))
				}
			}
			for kk := range g.Offs {
				g.Offs[kk] = int32(30 + r.IntN(400))
				g.Mask[kk] = int32(r.IntN(nmasks))
			}
			// Unmasked lanes must lie in src; mask the rest, so that
			// masked lanes do address outside src.
			for kk := range g.Offs {
				for l := range g.Lanes {
					if i := g.Offs[kk] + g.Lanes[l]; i < 0 || int(i) >= len(src) {
						g.Masks[int(g.Mask[kk])*NR+l] = 0
					}
				}
			}
			for name, pf := range packers() {
				dst := randSlice(r, kc*NR)
				pf(dst, src, g)
				for kk := 0; kk < kc; kk++ {
					for l := 0; l < NR; l++ {
						var want float32
						if g.Masks[int(g.Mask[kk])*NR+l] != 0 {
							want = src[g.Offs[kk]+g.Lanes[l]]
						}
						if got := dst[kk*NR+l]; got != want {
							t.Fatalf("%s contiguous=%v kc=%d: row %d lane %d = %g, want %g", name, contiguous, kc, kk, l, got, want)
						}
					}
				}
			}
		}
	}
}

func BenchmarkPackGather(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	src := randSlice(r, 1<<16)
	const kc = 256
	for _, contiguous := range []bool{true, false} {
		g := &Gather{Contiguous: contiguous, Offs: make([]int32, kc), Mask: make([]int32, kc), Masks: make([]int32, 9*NR)}
		for i := range g.Masks {
			g.Masks[i] = -1
		}
		for l := range g.Lanes {
			g.Lanes[l] = int32(l * 2)
			if contiguous {
				g.Lanes[l] = int32(l)
			}
		}
		for kk := range g.Offs {
			g.Offs[kk] = int32(kk * 200)
			g.Mask[kk] = int32(kk % 9)
		}
		dst := make([]float32, kc*NR)
		for name, pf := range packers() {
			b.Run(map[bool]string{true: "masked", false: "gather"}[contiguous]+"/"+name, func(b *testing.B) {
				for b.Loop() {
					pf(dst, src, g)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*kc*NR), "ns/value")
			})
		}
	}
}
