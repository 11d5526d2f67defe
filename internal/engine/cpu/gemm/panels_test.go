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
	asm, z, dq, ws := useAsm, useAVX512, useAVX512DQ, wideShape
	sel := func(a, b bool, w int) func() func() {
		return func() func() {
			useAsm, useAVX512, useAVX512DQ, wideShape = a, b, b && dq, w
			return func() { useAsm, useAVX512, useAVX512DQ, wideShape = asm, z, dq, ws }
		}
	}
	type path = struct {
		name string
		set  func() (restore func())
	}
	paths := []path{{"go", sel(false, false, ws)}}
	if asm {
		paths = append(paths, path{"avx2", sel(true, false, ws)})
	}
	if z {
		// KernelRun's wide kernels (12 x 32, 6 x 48) and the 24 x 16
		// ones alone.
		paths = append(paths, path{"avx512", sel(true, true, wideAuto)}, path{"avx512-6x48", sel(true, true, wide1x3)},
			path{"avx512-24x16", sel(true, true, wideOff)})
	}
	return paths
}

func TestKernelPanels(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	type shape struct{ np, rowsLess, cols, split int }
	var shapes []shape
	for _, np := range []int{1, 2, 3, 4, 9} {
		for _, less := range []int{0, 1, 5} {
			for _, cs := range [][2]int{{16, 16}, {1, 1}, {7, 7}, {15, 15}, {16, 1}, {16, 9}, {11, 5}} {
				shapes = append(shapes, shape{np, less, cs[0], cs[1]})
			}
		}
	}
	for _, path := range kernelPaths() {
		restore := path.set()
		for _, sh := range shapes {
			for _, kc := range []int{1, 7, 147} {
				for _, flags := range []int{0, 1, 6, 15} {
					name := fmt.Sprintf("%s/np%d/rows-%d/cols%d/split%d/kc%d/flags%b", path.name, sh.np, sh.rowsLess, sh.cols, sh.split, kc, flags)
					checkPanels(t, r, name, sh.np, sh.np*MR-sh.rowsLess, kc, sh.cols, sh.split, flags)
				}
			}
		}
		restore()
	}
}

// checkPanels runs KernelPanels on random operands and compares every value
// of C and C2 with a float64 reference, and the values around them with
// their old ones.
func checkPanels(t *testing.T, r *rand.Rand, name string, np, rows, kc, cols, split, flags int) {
	t.Helper()
	pstride := MR*kc + 5             // panels need not be adjacent
	ld := max(split, cols-split) + 3 // as narrow as images of fewer pixels than NR
	a := randSlice(r, (np-1)*pstride+MR*kc)
	b := randSlice(r, kc*NR)
	// C, C2 and the residuals end exactly at the last value stored, so that
	// a store past them shows as a change in the guard band after them.
	const guard = 40
	sz := func(c int) int { return (rows-1)*ld + c + guard }
	tl := Tile{Ld: ld, Rows: rows, Cols: cols, Split: split, ReLU: flags&flagReLU != 0, Load: flags&flagLoad != 0}
	tl.C = randSlice(r, sz(split))
	c0 := append([]float32(nil), tl.C...)
	var c20 []float32
	if split < cols {
		tl.C2 = randSlice(r, sz(cols-split))
		c20 = append([]float32(nil), tl.C2...)
	}
	if flags&flagBias != 0 {
		tl.Bias = randSlice(r, rows)
	}
	if flags&flagRes != 0 {
		tl.Res, tl.Res2 = randSlice(r, sz(split)), randSlice(r, sz(cols-split))
	}
	tl.C, tl.C2 = tl.C[:len(tl.C)-guard], tl.C2[:max(0, len(tl.C2)-guard)]
	KernelPanels(np, kc, a, pstride, b, &tl)
	tl.C, tl.C2 = tl.C[:len(tl.C)+guard], tl.C2[:cap(tl.C2)]
	check := func(c, old, res []float32, j0, j1 int) {
		for i := range c {
			row, col := i/ld, i%ld+j0
			if row >= rows || col >= j1 {
				if c[i] != old[i] {
					t.Fatalf("%s: wrote outside the tile at [%d]", name, i)
				}
				continue
			}
			pan, ii := row/MR, row%MR
			s := 0.0
			if tl.Load {
				s = float64(old[i])
			}
			for p := 0; p < kc; p++ {
				s += float64(a[pan*pstride+p*MR+ii]) * float64(b[p*NR+col])
			}
			if tl.Bias != nil {
				s += float64(tl.Bias[row])
			}
			if res != nil {
				s += float64(res[i])
			}
			if tl.ReLU {
				s = math.Max(s, 0)
			}
			if g := float64(c[i]); math.Abs(g-s) > 1e-5*float64(kc+1) {
				t.Fatalf("%s: C[%d][%d] = %g, want %g", name, row, col, g, s)
			}
		}
	}
	check(tl.C, c0, tl.Res, 0, split)
	if split < cols {
		check(tl.C2, c20, tl.Res2, split, cols)
	}
}

func TestKernelPanelsNaNReLU(t *testing.T) {
	for _, path := range kernelPaths() {
		restore := path.set()
		a := make([]float32, 4*MR)
		b := make([]float32, 4*NR)
		a[0] = float32(math.NaN())
		c := make([]float32, MR*NR)
		KernelPanels(1, 4, a, 4*MR, b, &Tile{C: c, Ld: NR, Rows: MR, Cols: NR, Split: NR, ReLU: true})
		if !math.IsNaN(float64(c[0])) || c[NR] != 0 {
			t.Errorf("%s: relu(NaN) = %g, relu(0) = %g; want NaN, 0", path.name, c[0], c[NR])
		}
		restore()
	}
}

// BenchmarkKernelPanels sweeps 32 A panels (192 rows, as the convolution
// drivers' MC block) over one B panel, per kernel path and depth.
func BenchmarkKernelPanels(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	const np = 32
	for _, kc := range benchKCs {
		a := randSlice(r, np*MR*kc)
		bp := randSlice(r, kc*NR)
		const ld = 200 // C rows apart, as output channels are
		c := make([]float32, np*MR*ld)
		for _, path := range kernelPaths() {
			b.Run(fmt.Sprintf("%s/kc%d", path.name, kc), func(b *testing.B) {
				restore := path.set()
				defer restore()
				for b.Loop() {
					KernelPanels(np, kc, a, MR*kc, bp, &Tile{C: c, Ld: ld, Rows: np * MR, Cols: NR, Split: NR, Load: true})
				}
				b.ReportMetric(2*float64(np*MR*NR*kc)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

var benchKCs = []int{64, 147, 256}
