package winograd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"goinfer/internal/engine/cpu/gemm"
	"goinfer/internal/engine/cpu/parallel"
)

// directConv is the reference: a float64 3x3 stride-1 convolution with
// bias, residual and ReLU.
func directConv(g Conv, n int, in, w, bias, res []float32, relu bool) []float64 {
	out := make([]float64, n*g.K*g.OH*g.OW)
	for b := range n {
		for k := range g.K {
			for oy := range g.OH {
				for ox := range g.OW {
					var s float64
					for c := range g.C {
						for ky := range 3 {
							for kx := range 3 {
								iy, ix := oy+ky-g.PT, ox+kx-g.PL
								if iy < 0 || iy >= g.IH || ix < 0 || ix >= g.IW {
									continue
								}
								s += float64(in[((b*g.C+c)*g.IH+iy)*g.IW+ix]) * float64(w[((k*g.C+c)*3+ky)*3+kx])
							}
						}
					}
					o := ((b*g.K+k)*g.OH+oy)*g.OW + ox
					if bias != nil {
						s += float64(bias[k])
					}
					if res != nil {
						s += float64(res[o])
					}
					if relu && s < 0 {
						s = 0
					}
					out[o] = s
				}
			}
		}
	}
	return out
}

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

func TestRun(t *testing.T) {
	paths := []struct {
		name                 string
		asm, avx512, noFused bool
	}{
		{"go", false, false, false},
		{"avx2", true, false, false}, {"avx2-phased", true, false, true},
		{"avx512", true, true, false}, {"avx512-phased", true, true, true},
	}
	cases := []struct {
		n, c, k, h, w, pad int
		bias, res, relu    bool
	}{
		{1, 16, 16, 8, 8, 1, true, false, true},
		{1, 3, 5, 7, 9, 1, false, false, false},
		{3, 17, 30, 13, 11, 1, true, true, true},
		{3, 64, 24, 7, 7, 1, true, true, false},
		{1, 8, 40, 6, 5, 0, false, true, true},
		{2, 300, 7, 5, 6, 1, true, false, true}, // input channels past one K-block
		{1, 4, 4, 1, 1, 1, true, true, true},
		{3, 16, 8, 30, 14, 1, false, false, true}, // several blocks when blockFloats is small
		{2, 16, 14, 29, 60, 1, true, false, true}, // 15 panels: more than one KernelRun takes
		// Small maps: several tile rows share an 8-lane half, whose
		// stores are widened past a row's tiles where the lanes allow.
		{4, 32, 24, 8, 8, 1, true, true, true},     // one whole panel, 2 tiles a row
		{4, 24, 16, 16, 16, 1, false, true, true},  // four panels, 4 tiles a row
		{3, 16, 16, 10, 10, 1, true, false, false}, // 3 tiles a row, a partial last panel
	}
	for _, path := range paths {
		if skip := pathMissing(path.asm, path.avx512); skip != "" {
			t.Run(path.name, func(t *testing.T) { t.Skip(skip) })
			continue
		}
		for _, tc := range cases {
			name := fmt.Sprintf("%s/n%d_c%d_k%d_%dx%d_pad%d_b%v_r%v_relu%v", path.name, tc.n, tc.c, tc.k, tc.h, tc.w, tc.pad, tc.bias, tc.res, tc.relu)
			t.Run(name, func(t *testing.T) {
				defer func(v, z bool) { useAsm, useAVX512 = v, z }(useAsm, useAVX512)
				useAsm, useAVX512 = path.asm, path.avx512
				r := rand.New(rand.NewPCG(1, uint64(tc.c*tc.h)))
				g := Conv{N: tc.n, C: tc.c, K: tc.k, IH: tc.h, IW: tc.w, OH: tc.h + 2*tc.pad - 2, OW: tc.w + 2*tc.pad - 2, PT: tc.pad, PL: tc.pad}
				in := randSlice(r, tc.n*tc.c*tc.h*tc.w)
				w := randSlice(r, tc.k*tc.c*9)
				var bias, res []float32
				if tc.bias {
					bias = randSlice(r, tc.k)
				}
				outN := tc.n * tc.k * g.OH * g.OW
				if tc.res {
					res = randSlice(r, outN)
				}
				u, err := TransformWeights(w, tc.k, tc.c)
				if err != nil {
					t.Fatal(err)
				}
				l, err := NewLayer(g, u, bias, tc.relu)
				if err != nil {
					t.Fatal(err)
				}
				l.phased = path.noFused
				if tc.h >= 30 {
					l.blockFloats = Points * (tc.c + tc.k) * 2 * lanes
				}
				pool := parallel.New(2)
				defer pool.Close()
				s := NewScratch(pool.Size(), make([]float32, l.BufferFloats(tc.n)), l.WorkerFloats())
				// A guard band past the output must stay untouched.
				out := make([]float32, outN+64)
				for i := range out {
					out[i] = 12345
				}
				want := directConv(g, tc.n, in, w, bias, res, tc.relu)
				for _, n := range []int{tc.n, 1} {
					l.Run(pool, s, in, res, out[:outN], n)
					for i, v := range want[:n*tc.k*g.OH*g.OW] {
						// F(4x4, 3x3) rounds more than a direct sum (its
						// transforms scale values by up to 100 and back):
						// allow 4e-5 of the sum's scale (sqrt of 9C terms
						// of unit variance).
						tol := 4e-5 * (1 + math.Sqrt(float64(9*tc.c)))
						if d := math.Abs(float64(out[i]) - v); !(d <= tol) {
							t.Fatalf("batch %d: out[%d] = %g, want %g (diff %g > %g)", n, i, out[i], v, d, tol)
						}
					}
				}
				for i := outN; i < len(out); i++ {
					if out[i] != 12345 {
						t.Fatalf("out[%d] past the output written: %g", i, out[i])
					}
				}
			})
		}
	}
}

// pathMissing says why this CPU cannot run a path of the transforms (the
// AVX2 ones run where the AVX-512 ones do), or "" if it can.
func pathMissing(asm, avx512 bool) string {
	switch {
	case asm && !Fast():
		return "no SIMD transforms on this CPU (they need AVX2 and FMA, or AVX-512F)"
	case avx512 && !hasAVX512:
		return "the AVX-512 transforms need AVX-512F, which this CPU lacks"
	}
	return ""
}

// gMat is G of F(4x4, 3x3) (6x3), the reference for TransformWeights.
var gMat = [In][3]float64{
	{1.0 / 4, 0, 0},
	{-1.0 / 6, -1.0 / 6, -1.0 / 6},
	{-1.0 / 6, 1.0 / 6, -1.0 / 6},
	{1.0 / 24, 1.0 / 12, 1.0 / 6},
	{1.0 / 24, -1.0 / 12, 1.0 / 6},
	{0, 0, 1},
}

// TestTransformWeights checks the packed U against G g Gt computed plainly in
// float64 for every channel pair, at sizes with one and several KC blocks
// and row counts that end inside an MR panel.
func TestTransformWeights(t *testing.T) {
	for _, tc := range []struct{ k, c int }{{1, 1}, {7, 3}, {64, 64}, {13, 300}, {70, 1100}} {
		t.Run(fmt.Sprintf("%dx%d", tc.k, tc.c), func(t *testing.T) {
			r := rand.New(rand.NewPCG(2, uint64(tc.k)))
			w := randSlice(r, tc.k*tc.c*9)
			u, err := TransformWeights(w, tc.k, tc.c)
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.k * tc.c {
				g := w[i*9 : i*9+9]
				var gg [In][3]float64
				for a := range In {
					for col := range 3 {
						for j := range 3 {
							gg[a][col] += gMat[a][j] * float64(g[j*3+col])
						}
					}
				}
				off := u.U[0].Offset(i/tc.c, i%tc.c)
				for a := range In {
					for b := range In {
						var want float64
						for j := range 3 {
							want += gg[a][j] * gMat[b][j]
						}
						if got := u.U[a*In+b].Data[off]; math.Abs(float64(got)-want) > 1e-6*(1+math.Abs(want)) {
							t.Fatalf("pair %d point %d: %g, want %g", i, a*In+b, got, want)
						}
					}
				}
			}
			// Rows past K in the last panel stay zero.
			a := u.U[Points-1]
			for row := tc.k; row < a.Panels*gemm.MR; row++ {
				for col := range tc.c {
					if v := a.Data[a.Offset(row, col)]; v != 0 {
						t.Fatalf("padding row %d col %d = %g", row, col, v)
					}
				}
			}
		})
	}
}

// BenchmarkTransformWeights times the weight transform of ResNet-18's
// largest Winograd layer (512 x 512 channels).
func BenchmarkTransformWeights(b *testing.B) {
	w := randSlice(rand.New(rand.NewPCG(1, 1)), 512*512*9)
	for b.Loop() {
		if _, err := TransformWeights(w, 512, 512); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSpanMask checks spanMask against the lanes counted one by one.
func TestSpanMask(t *testing.T) {
	for _, tc := range []struct{ lo, hi int }{
		{0, 16}, {-5, 40}, {1, 16}, {0, 3}, {3, 9}, {15, 16}, {16, 20}, {-20, 0}, {5, 5}, {9, 3},
	} {
		var want uint16
		for e := range lanes {
			if e >= tc.lo && e < tc.hi {
				want |= 1 << e
			}
		}
		if got := spanMask(tc.lo, tc.hi); got != want {
			t.Errorf("spanMask(%d, %d) = %#x, want %#x", tc.lo, tc.hi, got, want)
		}
	}
}
