package gemm

import "unsafe"

// Shapes runWide may take (see wideShape).
const (
	wideOff  = iota
	wideAuto // 12 x 32 over pairs of B panels, an odd run's first three 6 x 48, from wideMinPanels on
	wide1x3  // 6 x 48 over triples of B panels, any run (tests, benchmarks)
)

// wideShape is the kernel family KernelRun uses on AVX-512 (tests and
// benchmarks switch it to cover each).
var wideShape = wideAuto

// wideMinPanels is the fewest B panels of a run the wide kernels take by
// default. With fewer, each A panel passes under a few B vectors only and
// comes from L2 or memory on every call (stage 4 of ResNet-18 at batch 1,
// 3 panels; Winograd's blocks of up to 8), and there the wide kernels ran
// no faster than kernelZ4 in the network, sometimes slower, though faster
// on A in cache; from about 10 panels (the stride-2 3x3s into stages 2 and
// 3, 16 and 12 panels a task) they gained 5-10% a layer.
const wideMinPanels = 10

// runWide is KernelRun's AVX-512 path through the kernels that read
// several B vectors per k step (kernelW*): two A panels at a time against
// pairs of B panels (12 x 32), the A panels reused from L1 across the
// run; an odd run's first three B panels go through 6 x 48 per A panel.
// false: no such kernel here, too few B panels (wideMinPanels), or a
// single A panel (KernelRun's 24 x 16 kernels): B then
// passes under one panel only, and its reads from memory (a linear
// layer's weights at batch 1) are the cost, not the loads per FMA; the
// 6 x 32 kernel's two streams of B ran slower than one there.
func runWide(np, kc int, a []float32, pstride int, b []float32, ldb, bstep, nb int, t *Tile, flags int) bool {
	if wideShape == wideOff || !useAVX512 || nb < 2 || np < 2 || t.Rows <= MR || wideShape == wideAuto && nb < wideMinPanels {
		return false
	}
	nA, nv := 2, 2
	if wideShape == wide1x3 && nb >= 3 {
		nA, nv = 1, 3
	}
	z := zTile{ld: t.Ld, cols: NR, split: NR, ldb: ldb, bstep: bstep, flags: flags}
	for p := 0; p < np && p*MR < t.Rows; {
		n := min(nA, np-p, (t.Rows-p*MR+MR-1)/MR)
		r0 := p * MR
		rows := min(t.Rows-r0, n*MR)
		// call runs panels p0.. of the group against groups of nv B
		// panels from B panel j0 on.
		call := func(p0, np, nv, j0, groups int) {
			z.rows = min(rows-p0*MR, np*MR)
			z.c = &t.C[(r0+p0*MR)*t.Ld+j0*NR]
			z.res = nil
			if t.Res != nil {
				z.res = &t.Res[(r0+p0*MR)*t.Ld+j0*NR]
			}
			if t.Bias != nil {
				z.bias = &t.Bias[r0+p0*MR]
			}
			z.npan = groups
			if !kernelWide(np, nv, kc, &a[(p+p0)*pstride], pstride, &b[j0*bstep], &z) {
				z.npan = groups * nv
				kernelPanels(np, kc, &a[(p+p0)*pstride], pstride, &b[j0*bstep], &z)
			}
		}
		// The A panels needed next arrive in L2 while these are
		// reused (as in KernelRun), spread over all of this group's
		// calls.
		z.pf, z.pfstep = 0, 0
		iters := max(1, nb*(kc/4)/2)
		if next := (p + n) * pstride; pstride == MR*kc && next < len(a) && p+n < np && (p+n)*MR < t.Rows {
			z.pf = uintptr(unsafe.Pointer(&a[next]))
			z.pfstep = min(128, 4*min(len(a)-next, n*pstride)/iters)
		} else if len(t.Next) > 0 && (p+n >= np || (p+n)*MR >= t.Rows) {
			z.pf = uintptr(unsafe.Pointer(&t.Next[0]))
			z.pfstep = min(128, 4*min(len(t.Next), n*MR*kc)/iters)
		}
		switch {
		case nv == 3:
			call(0, 1, 3, 0, nb/3)
			if rem := nb % 3; rem > 0 {
				call(0, 1, rem, nb-rem, 1)
			}
		case nb%2 == 1:
			for i := 0; i < n && i*MR < rows; i++ {
				call(i, 1, 3, 0, 1)
			}
			if nb > 3 {
				call(0, n, 2, 3, (nb-3)/2)
			}
		default:
			call(0, n, 2, 0, nb/2)
		}
		p += n
	}
	return true
}
