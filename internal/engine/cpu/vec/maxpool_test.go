package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestMaxWindows checks MaxWindows (assembly where the CPU has it) against
// its Go loop over kernels, strides and dilations on lengths around the
// 8-wide blocks, with NaNs, and with src exactly as long as needed (the
// stride-2 kernel must not read past it).
func TestMaxWindows(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	for _, k := range []int{1, 2, 3, 4, 5} {
		for _, s := range []int{1, 2, 3} {
			for _, d := range []int{1, 2, 3} {
				for n := 0; n < 35; n++ {
					need := max(0, (n-1)*s+(k-1)*d+1)
					src := data(r, need, n%3 == 0)
					got, want := make([]float32, n), make([]float32, n)
					MaxWindows(got, src, k, s, d)
					for i := range want {
						want[i] = float32(math.Inf(-1))
						for t := range k {
							v := src[i*s+t*d]
							if v != v || want[i] != want[i] {
								want[i] = float32(math.NaN())
							} else {
								want[i] = max(want[i], v)
							}
						}
						if !same(got[i], want[i]) {
							t.Fatalf("k=%d s=%d d=%d n=%d [%d]: got %g, want %g", k, s, d, n, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// refMaxPool is max pooling by definition: every tap of every window,
// taps outside the plane skipped, -inf for a window with none inside.
func refMaxPool(g *MaxPool2D, in []float32) []float32 {
	out := make([]float32, g.OutH*g.OutW)
	for oy := range g.OutH {
		for ox := range g.OutW {
			m := float32(math.Inf(-1))
			for ky := range g.KH {
				for kx := range g.KW {
					y, x := oy*g.SH-g.PadT+ky*g.DH, ox*g.SW-g.PadL+kx*g.DW
					if y < 0 || y >= g.InH || x < 0 || x >= g.InW {
						continue
					}
					if v := in[y*g.InW+x]; v != v || m != m {
						m = float32(math.NaN())
					} else {
						m = max(m, v)
					}
				}
			}
			out[oy*g.OutW+ox] = m
		}
	}
	return out
}

func TestMaxPool2D(t *testing.T) {
	// outSize is the output length with floor or ceil rounding; ceil mode's
	// last window must start inside the input or left padding.
	outSize := func(in, k, s, d, p0, p1 int, ceil bool) int {
		span := in + p0 + p1 - (k-1)*d - 1
		o := span/s + 1
		if ceil && span%s != 0 && (o)*s < in+p0 {
			o++
		}
		return o
	}
	type geom struct{ h, w, k, s, d, p int }
	var cases []geom
	for _, k := range []int{2, 3, 5} {
		for _, s := range []int{1, 2, 3} {
			for _, p := range []int{0, 1, 2} {
				if 2*p > k {
					continue
				}
				cases = append(cases, geom{13, 17, k, s, 1, p}, geom{9, 8, k, s, 1, p}, geom{112, 112, k, s, 1, p})
			}
			cases = append(cases, geom{11, 23, k, s, 2, 1})
		}
	}
	cases = append(cases, geom{1, 1, 3, 2, 1, 1}, geom{2, 3, 3, 1, 1, 1}, geom{5, 40, 2, 2, 3, 0})
	r := rand.New(rand.NewPCG(3, 3))
	for _, c := range cases {
		for _, ceil := range []bool{false, true} {
			for _, pb := range []int{c.p, c.p + 1} {
				g := MaxPool2D{InH: c.h, InW: c.w, KH: c.k, KW: c.k, SH: c.s, SW: c.s, DH: c.d, DW: c.d, PadT: c.p, PadL: c.p}
				g.OutH = outSize(c.h, c.k, c.s, c.d, c.p, pb, ceil)
				g.OutW = outSize(c.w, c.k, c.s, c.d, c.p, pb, ceil)
				if g.OutH < 1 || g.OutW < 1 {
					continue
				}
				name := fmt.Sprintf("%+v", g)
				in := data(r, c.h*c.w, c.w%2 == 1)
				want := refMaxPool(&g, in)
				got := make([]float32, len(want))
				tmp := make([]float32, g.ScratchLen())
				for i := range tmp {
					tmp[i] = float32(math.NaN()) // Plane must not read stale scratch
				}
				g.Plane(got, in, tmp)
				for i := range want {
					if !same(got[i], want[i]) {
						t.Fatalf("%s [%d]: got %g, want %g", name, i, got[i], want[i])
					}
				}
			}
		}
	}
	// Rectangular windows with different strides and dilations per axis.
	g := MaxPool2D{InH: 9, InW: 8, OutH: 6, OutW: 4, KH: 2, KW: 3, SH: 1, SW: 2, DH: 2, DW: 1, PadT: 1, PadL: 0}
	in := data(r, 72, false)
	want, got := refMaxPool(&g, in), make([]float32, 24)
	g.Plane(got, in, make([]float32, g.ScratchLen()))
	for i := range want {
		if !same(got[i], want[i]) {
			t.Fatalf("%+v [%d]: got %g, want %g", g, i, got[i], want[i])
		}
	}
}

func BenchmarkMaxPool2DStem(b *testing.B) {
	g := MaxPool2D{InH: 112, InW: 112, OutH: 56, OutW: 56, KH: 3, KW: 3, SH: 2, SW: 2, DH: 1, DW: 1, PadT: 1, PadL: 1}
	in := data(rand.New(rand.NewPCG(1, 1)), 112*112, false)
	out, tmp := make([]float32, 56*56), make([]float32, g.ScratchLen())
	b.SetBytes(4 * 112 * 112)
	for b.Loop() {
		g.Plane(out, in, tmp)
	}
}
