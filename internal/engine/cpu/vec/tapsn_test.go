package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestTapsN covers both AVX-512 kernels (sixteen outputs over one vector;
// eight over three, for runs of 48 and outputs in eights) and their
// split of a run, with and without the fused ReLU, against the definition.
func TestTapsN(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 8))
	for _, taps := range []int{1, 9, 27, 147} {
		for _, no := range []int{1, 3, 8, 15, 16} {
			for _, n := range []int{1, 15, 16, 17, 47, 48, 96, 112, 113} {
				relu := (taps+no+n)%2 == 0
				src := data(r, n+60, false)
				offs := make([]int, taps)
				for i := range offs {
					offs[i] = r.IntN(61)
				}
				w := data(r, taps*DWLanes, false)
				bias := data(r, DWLanes, false)
				stride := n + 3
				dst := make([]float32, DWLanes*stride)
				for i := range dst {
					dst[i] = -9
				}
				TapsN(dst, stride, src, offs, w, bias, no, n, relu)
				plain := make([]float32, len(dst))
				tapsNGo(plain, stride, src, offs, w, bias, no, n, relu)
				for o := 0; o < DWLanes; o++ {
					for i := 0; i < stride; i++ {
						got := dst[o*stride+i]
						if o >= no || i >= n {
							if got != -9 {
								t.Fatalf("taps %d no %d n %d: wrote output %d element %d", taps, no, n, o, i)
							}
							continue
						}
						want := float64(bias[o])
						for k, off := range offs {
							want += float64(w[k*DWLanes+o]) * float64(src[off+i])
						}
						if relu {
							want = max(want, 0)
						}
						for name, v := range map[string]float32{"asm": got, "go": plain[o*stride+i]} {
							if math.Abs(float64(v)-want) > 1e-5*(1+math.Abs(want)) {
								t.Fatalf("taps %d no %d n %d: %s output %d element %d = %v, want %v", taps, no, n, name, o, i, v, want)
							}
						}
					}
				}
			}
		}
	}
}

func TestTapsNPanics(t *testing.T) {
	w := make([]float32, 2*DWLanes)
	for name, f := range map[string]func(){
		"17 outputs":  func() { TapsN(make([]float32, 17*4), 4, make([]float32, 8), []int{0}, w, w, 17, 4, false) },
		"short dst":   func() { TapsN(make([]float32, 7), 4, make([]float32, 8), []int{0}, w, w, 2, 4, false) },
		"past source": func() { TapsN(make([]float32, 8), 4, make([]float32, 8), []int{0, 5}, w, w, 2, 4, false) },
		"negative":    func() { TapsN(make([]float32, 8), 4, make([]float32, 8), []int{-1}, w, w, 2, 4, false) },
		"stride":      func() { TapsN(make([]float32, 8), 3, make([]float32, 8), []int{0}, w, w, 2, 4, false) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}
