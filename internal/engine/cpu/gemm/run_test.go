package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"goinfer/internal/cputime"
)

func TestKernelRun(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	type shape struct{ np, rows, nb, kc, ldb int }
	shapes := []shape{
		{1, 6, 1, 1, NR}, {1, 1, 3, 5, NR}, {2, 7, 2, 17, NR}, {4, 24, 5, 16, NR}, {5, 29, 3, 33, NR},
		{1, 6, 1, 1, 16}, {1, 3, 4, 3, 19}, {3, 13, 2, 13, 100}, {4, 24, 6, 64, 49}, {4, 23, 7, 80, 196},
		{9, 50, 3, 40, 37}, {2, 12, 1, 256, 20},
		// Panel groups of unequal sizes (33 -> 4x6 + 3x3), rows ending early.
		{33, 197, 2, 24, NR}, {11, 57, 2, 9, NR}, {6, 31, 1, 7, 40},
		// Groups of wide kernels with one or two B panels left, an odd
		// A panel, partial last panels; runs past wideMinPanels (12 x
		// 32, an odd run's first three 6 x 48).
		{3, 18, 3, 256, NR}, {3, 17, 4, 31, NR}, {5, 25, 5, 66, 75}, {2, 8, 8, 7, 16}, {1, 2, 2, 4, NR},
		{3, 17, 11, 31, NR}, {5, 25, 10, 66, 175}, {2, 8, 13, 7, 16}, {4, 24, 16, 256, NR}, {2, 7, 12, 40, 200},
	}
	for _, path := range kernelPaths() {
		restore := path.set()
		for _, sh := range shapes {
			for _, flags := range []int{0, flagLoad, flagBias | flagRes, flagLoad | flagBias | flagRes | flagReLU} {
				name := fmt.Sprintf("%s/np%d/rows%d/nb%d/kc%d/ldb%d/flags%b", path.name, sh.np, sh.rows, sh.nb, sh.kc, sh.ldb, flags)
				checkRun(t, r, name, sh.np, sh.rows, sh.nb, sh.kc, sh.ldb, flags)
			}
		}
		restore()
	}
}

// checkRun runs KernelRun on random operands, B packed (ldb NR, panels
// NR*kc apart) or row-major (panels NR apart), and compares every value of
// C with a float64 reference and the values around the block with their old
// ones.
func checkRun(t *testing.T, r *rand.Rand, name string, np, rows, nb, kc, ldb, flags int) {
	t.Helper()
	pstride := MR*kc + 3
	a := randSlice(r, (np-1)*pstride+MR*kc)
	bstep := NR
	if ldb == NR {
		bstep = NR * kc
	}
	b := randSlice(r, (nb-1)*bstep+(kc-1)*ldb+NR)
	bv := func(k, col int) float64 { return float64(b[(col/NR)*bstep+k*ldb+col%NR]) }
	cols := nb * NR
	ld := cols + 5
	const guard = 40
	size := (rows-1)*ld + cols
	tl := Tile{Ld: ld, Rows: rows, Cols: cols, ReLU: flags&flagReLU != 0, Load: flags&flagLoad != 0}
	tl.C = randSlice(r, size+guard)
	old := append([]float32(nil), tl.C...)
	if flags&flagBias != 0 {
		tl.Bias = randSlice(r, rows)
	}
	if flags&flagRes != 0 {
		tl.Res = randSlice(r, size)
	}
	c := tl.C
	tl.C = tl.C[:size]
	KernelRun(np, kc, a, pstride, b, ldb, bstep, nb, &tl)
	for i := range c {
		row, col := i/ld, i%ld
		if row >= rows || col >= cols {
			if c[i] != old[i] {
				t.Fatalf("%s: wrote outside the block at [%d]", name, i)
			}
			continue
		}
		pan, ii := row/MR, row%MR
		s := 0.0
		if tl.Load {
			s = float64(old[i])
		}
		for p := 0; p < kc; p++ {
			s += float64(a[pan*pstride+p*MR+ii]) * bv(p, col)
		}
		if tl.Bias != nil {
			s += float64(tl.Bias[row])
		}
		if tl.Res != nil {
			s += float64(tl.Res[i])
		}
		if tl.ReLU {
			s = math.Max(s, 0)
		}
		if g := float64(c[i]); math.Abs(g-s) > 1e-5*float64(kc+1) {
			t.Fatalf("%s: C[%d][%d] = %g, want %g", name, row, col, g, s)
		}
	}
}

// BenchmarkKernelRun computes a 192-row block against 16 B panels (a
// convolution task's 256 pixels), B packed or read in place from rows of
// a 56x56 map, per kernel path and depth; "calls" is KernelPanels once per
// B panel, the driver's loop before KernelRun.
func BenchmarkKernelRun(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	const np, nb, plane = 32, 16, 56 * 56
	for _, kc := range []int{16, 64, 256} {
		a := randSlice(r, np*MR*kc)
		packed := randSlice(r, nb*NR*kc)
		rowMajor := randSlice(r, kc*plane)
		c := make([]float32, np*MR*plane)
		for _, path := range kernelPaths() {
			for _, mode := range []string{"calls", "packed", "strided"} {
				b.Run(fmt.Sprintf("%s/kc%d/%s", path.name, kc, mode), func(b *testing.B) {
					restore := path.set()
					defer restore()
					for b.Loop() {
						t := Tile{C: c, Ld: plane, Rows: np * MR, Cols: nb * NR, Load: true}
						switch mode {
						case "calls":
							for j := 0; j < nb; j++ {
								KernelPanels(np, kc, a, MR*kc, packed[j*NR*kc:], &Tile{C: c[j*NR:], Ld: plane, Rows: np * MR, Cols: NR, Split: NR, Load: true})
							}
						case "packed":
							KernelRun(np, kc, a, MR*kc, packed, NR, NR*kc, nb, &t)
						default:
							KernelRun(np, kc, a, MR*kc, rowMajor, plane, NR, nb, &t)
						}
					}
					b.ReportMetric(2*float64(np*MR*nb*NR*kc)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// BenchmarkKernelRunWide compares KernelRun's kernel shapes on a
// convolution task's block: 32 A panels (192 rows) of depth 256 against 3
// packed B panels (a 7x7 map at batch 1) or 12 and 16, C loaded. "auto" is
// the default (the 24 x 16 kernels below wideMinPanels); cpuGFLOP/s counts
// the process's CPU time, steadier than wall time on a shared machine (run
// with -cpu 1).
func BenchmarkKernelRunWide(b *testing.B) {
	if !useAVX512 {
		b.Skip("the wide kernels are AVX-512")
	}
	r := rand.New(rand.NewPCG(9, 11))
	const np, kc = 32, 256
	a := randSlice(r, np*MR*kc)
	for _, nb := range []int{3, 12, 16} {
		packed := randSlice(r, nb*NR*kc)
		c := make([]float32, np*MR*nb*NR)
		benchShapes(b, fmt.Sprintf("nb%d", nb), 2*float64(np*MR*nb*NR*kc), func() {
			t := Tile{C: c, Ld: nb * NR, Rows: np * MR, Cols: nb * NR, Load: true}
			KernelRun(np, kc, a, MR*kc, packed, NR, NR*kc, nb, &t)
		})
	}
}

// BenchmarkKernelRunStream is a 3x3 512->512 convolution's GEMM at batch 1
// on a 7x7 map (ResNet-18's stage 4, 504 rows): 9.3 MB of A a layer, six
// layers in turn, streamed from memory, against 3 B panels per K-block, each call pointing
// Tile.Next at the A rows it reads next; the wide shapes are forced (auto
// takes them from wideMinPanels on).
func BenchmarkKernelRunStream(b *testing.B) {
	if !useAVX512 {
		b.Skip("the wide kernels are AVX-512")
	}
	r := rand.New(rand.NewPCG(9, 12))
	const m, k, kc, chunk, layers = 504, 4608, 256, 192, 6
	all := randSlice(r, layers*m*k)
	for _, nb := range []int{3, 12} {
		packed := randSlice(r, nb*NR*kc)
		c := make([]float32, m*nb*NR)
		layer := 0
		benchShapes(b, fmt.Sprintf("nb%d", nb), 2*float64(m*nb*NR*k), func() {
			// Six layers' weights in turn, more than the L3 holds.
			a := all[layer*m*k : (layer+1)*m*k]
			layer = (layer + 1) % layers
			for kb := 0; kb < k/kc; kb++ {
				blk := a[kb*m*kc : (kb+1)*m*kc]
				for ic := 0; ic < m; ic += chunk {
					ie := min(m, ic+chunk)
					t := Tile{C: c[ic*nb*NR:], Ld: nb * NR, Rows: ie - ic, Cols: nb * NR, Load: kb > 0}
					if ie < m {
						t.Next = blk[ie*kc : min(m, ie+chunk)*kc]
					} else if kb+1 < k/kc {
						t.Next = a[(kb+1)*m*kc:][:chunk*kc]
					}
					KernelRun((ie-ic)/MR, kc, blk[ic*kc:], MR*kc, packed, NR, NR*kc, nb, &t)
				}
			}
		})
	}
}

// benchShapes runs one sub-benchmark per KernelRun shape (24 x 16 forced,
// the automatic choice, 6 x 48 forced) of op, which does flop floating-point
// operations, reporting GFLOP/s of wall and of CPU time.
func benchShapes(b *testing.B, name string, flop float64, op func()) {
	for _, sh := range []struct {
		name  string
		shape int
	}{{"24x16", wideOff}, {"auto", wideAuto}, {"6x48", wide1x3}} {
		b.Run(name+"/"+sh.name, func(b *testing.B) {
			defer func(w int) { wideShape = w }(wideShape)
			wideShape = sh.shape
			cpu0 := cputime.Process()
			for b.Loop() {
				op()
			}
			b.ReportMetric(flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			if cpu := cputime.Process() - cpu0; cpu > 0 {
				b.ReportMetric(flop*float64(b.N)/cpu.Seconds()/1e9, "cpuGFLOP/s")
			}
		})
	}
}
