package gemm

import (
	"math"
	"math/rand/v2"
	"testing"
)

func randSlice(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// naive returns A*B in float64.
func naive(m, n, k int, a []float32, lda int, b []float32, ldb int) []float64 {
	c := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			s := 0.0
			for p := 0; p < k; p++ {
				s += float64(a[i*lda+p]) * float64(b[p*ldb+j])
			}
			c[i*n+j] = s
		}
	}
	return c
}

// checkClose fails when got (row stride ldc) differs from want by more than
// float32 accumulation error over depth k allows.
func checkClose(t *testing.T, got []float32, ldc int, want []float64, m, n, k int) {
	t.Helper()
	tol := 1e-6 * float64(k) * 8
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			g, w := float64(got[i*ldc+j]), want[i*n+j]
			if math.Abs(g-w) > tol*math.Max(1, math.Abs(w)) {
				t.Fatalf("C[%d][%d] = %g, want %g", i, j, g, w)
			}
		}
	}
}

type kernelFunc func(kc int, a, b, c *float32, ldc int, flags int, bias, res *float32, ldr int)

// kernels lists the micro-kernels this machine can run, so that both the
// assembly and the portable one are tested where the CPU allows.
func kernels() map[string]kernelFunc {
	k := map[string]kernelFunc{"go": kernelGo}
	if useAsm {
		k["asm"] = kernel
	}
	return k
}

func TestKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const ldc, ldr = NR + 5, NR + 3
	bias := randSlice(r, MR)
	res := randSlice(r, (MR-1)*ldr+NR)
	for name, kf := range kernels() {
		for _, kc := range []int{1, 2, 3, 4, 5, 7, 16, 147, 256} {
			for flags := 0; flags < 16; flags++ {
				a := randSlice(r, kc*MR)
				b := randSlice(r, kc*NR)
				c := randSlice(r, (MR-1)*ldc+NR)
				c0 := append([]float32(nil), c...)
				kf(kc, &a[0], &b[0], &c[0], ldc, flags, &bias[0], &res[0], ldr)
				for i := 0; i < MR; i++ {
					for j := 0; j < NR; j++ {
						s := 0.0
						if flags&flagLoad != 0 {
							s = float64(c0[i*ldc+j])
						}
						for p := 0; p < kc; p++ {
							s += float64(a[p*MR+i]) * float64(b[p*NR+j])
						}
						if flags&flagBias != 0 {
							s += float64(bias[i])
						}
						if flags&flagRes != 0 {
							s += float64(res[i*ldr+j])
						}
						if flags&flagReLU != 0 {
							s = math.Max(s, 0)
						}
						if g := float64(c[i*ldc+j]); math.Abs(g-s) > 1e-5*float64(kc+1) {
							t.Fatalf("%s kc=%d flags=%b: C[%d][%d] = %g, want %g", name, kc, flags, i, j, g, s)
						}
					}
					// Padding between rows must be untouched.
					for j := NR; j < ldc && i < MR-1; j++ {
						if c[i*ldc+j] != c0[i*ldc+j] {
							t.Fatalf("%s kc=%d flags=%b: wrote outside the tile at [%d][%d]", name, kc, flags, i, j)
						}
					}
				}
			}
		}
	}
}

func TestKernelTile(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, kc := range []int{1, 5, 64, 147} {
		for _, cols := range []int{1, 7, 8, 9, 16} {
			a, b := randSlice(r, kc*MR), randSlice(r, kc*NR)
			tile := make([]float32, MR*NR)
			KernelTile(kc, a, b, tile, cols)
			for i := 0; i < MR; i++ {
				for j := 0; j < cols; j++ {
					s := 0.0
					for p := 0; p < kc; p++ {
						s += float64(a[p*MR+i]) * float64(b[p*NR+j])
					}
					if g := float64(tile[i*NR+j]); math.Abs(g-s) > 1e-5*float64(kc+1) {
						t.Fatalf("kc=%d cols=%d: tile[%d][%d] = %g, want %g", kc, cols, i, j, g, s)
					}
				}
			}
		}
	}
}

func TestReLUKeepsNaN(t *testing.T) {
	nan := float32(math.NaN())
	for name, kf := range kernels() {
		a := make([]float32, MR)
		b := make([]float32, NR)
		a[0], b[0] = nan, 1
		c := make([]float32, MR*NR)
		c[NR] = -5 // row 1: a[1] is 0
		kf(1, &a[0], &b[0], &c[0], NR, flagLoad|flagReLU, nil, nil, 0)
		if !math.IsNaN(float64(c[0])) || c[NR] != 0 {
			t.Errorf("%s: relu(NaN) = %g, relu(-5) = %g; want NaN, 0", name, c[0], c[NR])
		}
	}
}

func TestSGEMM(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	tests := []struct{ m, n, k int }{
		{1, 1, 1}, {6, 16, 8}, {7, 17, 9}, {64, 49, 576}, {13, 300, 300}, {5, 3, 1000},
	}
	for _, tt := range tests {
		lda, ldb, ldc := tt.k+1, tt.n+2, tt.n+3
		a := randSlice(r, tt.m*lda)
		b := randSlice(r, tt.k*ldb)
		c := make([]float32, tt.m*ldc)
		if err := SGEMM(tt.m, tt.n, tt.k, a, lda, b, ldb, c, ldc); err != nil {
			t.Fatal(err)
		}
		checkClose(t, c, ldc, naive(tt.m, tt.n, tt.k, a, lda, b, ldb), tt.m, tt.n, tt.k)
	}
}

func TestSGEMMErrors(t *testing.T) {
	a := make([]float32, 4)
	tests := []struct {
		name          string
		m, n, k       int
		lda, ldb, ldc int
		b, c          []float32
	}{
		{"zero m", 0, 2, 2, 2, 2, 2, a, a},
		{"short lda", 2, 2, 2, 1, 2, 2, a, a},
		{"short b", 2, 2, 2, 2, 2, 2, a[:3], a},
		{"short c", 2, 2, 2, 2, 2, 2, a, a[:1]},
	}
	for _, tt := range tests {
		if err := SGEMM(tt.m, tt.n, tt.k, a, tt.lda, tt.b, tt.ldb, tt.c, tt.ldc); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
	if _, err := PackA(a, 3, 2, 2, 2); err == nil {
		t.Error("PackA of a too-short matrix: no error")
	}
}

func TestBlockDepth(t *testing.T) {
	for _, k := range []int{1, 64, 256, 257, 576, 1152, 4608} {
		kc := BlockDepth(k)
		nb := (k + kc - 1) / kc
		if kc > KCMax || (nb-1)*kc >= k {
			t.Errorf("BlockDepth(%d) = %d: %d blocks", k, kc, nb)
		}
	}
}

func BenchmarkKernel(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	const kc = 256
	a := randSlice(r, kc*MR)
	bb := randSlice(r, kc*NR)
	c := make([]float32, MR*NR)
	for name, kf := range kernels() {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				kf(kc, &a[0], &bb[0], &c[0], NR, flagLoad, nil, nil, 0)
			}
			b.ReportMetric(float64(2*MR*NR*kc)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
