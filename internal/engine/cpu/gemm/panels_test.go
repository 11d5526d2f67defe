package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// kernelPaths lists the micro-kernel paths this CPU can run, each as a
// function that selects it; the returned function restores the default.
func kernelPaths() []struct {
	name string
	set  func() (restore func())
} {
	asm, z := useAsm, useAVX512
	sel := func(a, b bool) func() func() {
		return func() func() {
			useAsm, useAVX512 = a, b
			return func() { useAsm, useAVX512 = asm, z }
		}
	}
	paths := []struct {
		name string
		set  func() (restore func())
	}{{"go", sel(false, false)}}
	if asm {
		paths = append(paths, struct {
			name string
			set  func() (restore func())
		}{"avx2", sel(true, false)})
	}
	if z {
		paths = append(paths, struct {
			name string
			set  func() (restore func())
		}{"avx512", sel(true, true)})
	}
	return paths
}

func TestKernelPanels(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, path := range kernelPaths() {
		restore := path.set()
		for _, np := range []int{1, 2, 3, 4, 5, 9} {
			for _, kc := range []int{1, 3, 4, 7, 37, 256} {
				for _, cols := range []int{1, 7, 15, 16} {
					for _, flags := range []int{0, 1, 2, 4, 8, 15} {
						name := fmt.Sprintf("%s/np%d/kc%d/cols%d/flags%b", path.name, np, kc, cols, flags)
						checkPanels(t, r, name, np, kc, cols, flags)
					}
				}
			}
		}
		restore()
	}
}

func checkPanels(t *testing.T, r *rand.Rand, name string, np, kc, cols, flags int) {
	t.Helper()
	rows := np * MR
	pstride := MR*kc + 5 // panels need not be adjacent
	ldc, ldr := cols+3, cols+1
	a := randSlice(r, (np-1)*pstride+MR*kc)
	b := randSlice(r, kc*NR)
	// C and the residual end exactly at the last value read or written, so
	// that an access past cols would be caught by the race detector's
	// bounds or corrupt the guard.
	c := randSlice(r, (rows-1)*ldc+cols)
	c0 := append([]float32(nil), c...)
	var e Epilogue
	if flags&flagBias != 0 {
		e.Bias = randSlice(r, rows)
	}
	if flags&flagRes != 0 {
		e.Res, e.LdRes = randSlice(r, (rows-1)*ldr+cols), ldr
	}
	e.ReLU = flags&flagReLU != 0
	KernelPanels(np, kc, a, pstride, b, c, ldc, cols, flags&flagLoad != 0, e)
	for i := 0; i < rows; i++ {
		pan, ii := i/MR, i%MR
		for j := 0; j < ldc && i*ldc+j < len(c); j++ {
			if j >= cols {
				if c[i*ldc+j] != c0[i*ldc+j] {
					t.Fatalf("%s: wrote C[%d][%d] past cols", name, i, j)
				}
				continue
			}
			s := 0.0
			if flags&flagLoad != 0 {
				s = float64(c0[i*ldc+j])
			}
			for p := 0; p < kc; p++ {
				s += float64(a[pan*pstride+p*MR+ii]) * float64(b[p*NR+j])
			}
			if e.Bias != nil {
				s += float64(e.Bias[i])
			}
			if e.Res != nil {
				s += float64(e.Res[i*ldr+j])
			}
			if e.ReLU {
				s = math.Max(s, 0)
			}
			if g := float64(c[i*ldc+j]); math.Abs(g-s) > 1e-5*float64(kc+1) {
				t.Fatalf("%s: C[%d][%d] = %g, want %g", name, i, j, g, s)
			}
		}
	}
}

func TestKernelPanelsNaNReLU(t *testing.T) {
	for _, path := range kernelPaths() {
		restore := path.set()
		a := make([]float32, 4*MR)
		b := make([]float32, 4*NR)
		a[0] = float32(math.NaN())
		c := make([]float32, MR*NR)
		KernelPanels(1, 4, a, 4*MR, b, c, NR, NR, false, Epilogue{ReLU: true})
		if !math.IsNaN(float64(c[0])) || c[NR] != 0 {
			t.Errorf("%s: relu(NaN) = %g, relu(0) = %g; want NaN, 0", path.name, c[0], c[NR])
		}
		restore()
	}
}

// BenchmarkKernelPanels sweeps 32 A panels (192 rows, as the convolution
// drivers' MC block) over one B panel, per kernel path.
func BenchmarkKernelPanels(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	const kc, np = 256, 32
	a := randSlice(r, np*MR*kc)
	bp := randSlice(r, kc*NR)
	c := make([]float32, np*MR*NR)
	for _, path := range kernelPaths() {
		b.Run(path.name, func(b *testing.B) {
			restore := path.set()
			defer restore()
			for b.Loop() {
				KernelPanels(np, kc, a, MR*kc, bp, c, NR, NR, false, Epilogue{})
			}
			b.ReportMetric(2*float64(np*MR*NR*kc)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
