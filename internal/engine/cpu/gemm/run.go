package gemm

import (
	"fmt"
	"unsafe"
)

// StridedB reports whether KernelRun reads B in place on this CPU (AVX2 or
// AVX-512); the pure-Go path copies each panel of a strided B first, and a
// driver that packs B anyway does better to pack it once.
func StridedB() bool { return useAsm }

// KernelRun computes np consecutive MR-row A panels (a and pstride as in
// KernelPanels) against nb consecutive NR-wide panels of B and stores the
// t.Rows x nb*NR block as t says (t.Cols must be nb*NR; no split). Panel j
// of B starts at b[j*bstep], its kc rows ldb floats apart: a packed block
// has ldb = NR and bstep = NR*kc; a row-major B (a 1x1 convolution's input
// channels) is read in place with ldb its row length and bstep = NR. One
// call replaces nb*np/WidePanels() kernel calls, whose fixed cost matters
// when kc is small.
func KernelRun(np, kc int, a []float32, pstride int, b []float32, ldb, bstep, nb int, t *Tile) {
	if nb < 1 || ldb < NR || bstep < 1 || t.Cols != nb*NR || (t.Split != 0 && t.Split != t.Cols) || kc < 1 ||
		len(b) < (nb-1)*bstep+(kc-1)*ldb+NR {
		panic(fmt.Sprintf("gemm: KernelRun(kc=%d, len b=%d, ldb=%d, bstep=%d, nb=%d, cols=%d, split=%d): bad operands",
			kc, len(b), ldb, bstep, nb, t.Cols, t.Split))
	}
	need := (t.Rows-1)*t.Ld + t.Cols
	if np < 1 || t.Rows < 1 || t.Rows > np*MR || pstride < MR*kc || len(a) < (np-1)*pstride+MR*kc || t.Ld < t.Cols ||
		len(t.C) < need || t.Res != nil && len(t.Res) < need || t.Bias != nil && len(t.Bias) < t.Rows {
		panic(fmt.Sprintf("gemm: KernelRun(np=%d, kc=%d, len a=%d, pstride=%d, len C=%d, ld=%d, rows=%d): bad operands",
			np, kc, len(a), pstride, len(t.C), t.Ld, t.Rows))
	}
	flags := 0
	if t.Load {
		flags |= flagLoad
	}
	if t.Bias != nil {
		flags |= flagBias
	}
	if t.Res != nil {
		flags |= flagRes
	}
	if t.ReLU {
		flags |= flagReLU
	}
	if !useAVX512 {
		runNarrow(np, kc, a, pstride, b, ldb, bstep, nb, t, flags)
		return
	}
	if runWide(np, kc, a, pstride, b, ldb, bstep, nb, t, flags) {
		return
	}
	z := zTile{ld: t.Ld, cols: NR, split: NR, ldb: ldb, bstep: bstep, flags: flags}
	for p := 0; p < np && p*MR < t.Rows; {
		n := groupPanels(min(np-p, (t.Rows-p*MR+MR-1)/MR))
		r0 := p * MR
		z.rows = min(t.Rows-r0, n*MR)
		z.c = &t.C[r0*t.Ld]
		z.res = nil
		if t.Res != nil {
			z.res = &t.Res[r0*t.Ld]
		}
		if t.Bias != nil {
			z.bias = &t.Bias[r0]
		}
		z.npan = nb
		// The A panels needed next (this call's following ones, else
		// t.Next) are fetched while these are reused from L1 by the nb B
		// panels, instead of at the rate the first B panel consumes them.
		z.pf, z.pfstep = 0, 0
		iters := max(1, nb*(kc/4))
		if next := (p + n) * pstride; pstride == MR*kc && next < len(a) && p+n < np && (p+n)*MR < t.Rows {
			z.pf = uintptr(unsafe.Pointer(&a[next]))
			z.pfstep = min(128, 4*min(len(a)-next, (np-p-n)*pstride)/iters)
		} else if p+n >= np || (p+n)*MR >= t.Rows {
			if len(t.Next) > 0 {
				z.pf = uintptr(unsafe.Pointer(&t.Next[0]))
				z.pfstep = min(128, 4*len(t.Next)/iters)
			}
		}
		kernelPanels(n, kc, &a[p*pstride], pstride, &b[0], &z)
		p += n
	}
}

// runNarrow is KernelRun with the MR x NR kernel (AVX2), a call per tile;
// a last panel of fewer than MR rows, and a CPU without the kernel, go
// through runFallback.
func runNarrow(np, kc int, a []float32, pstride int, b []float32, ldb, bstep, nb int, t *Tile, flags int) {
	for p := 0; p < np && p*MR < t.Rows; p++ {
		r0 := p * MR
		if t.Rows-r0 < MR && useAsm {
			narrowRows(kc, a[p*pstride:], b, ldb, bstep, nb, t, flags, r0)
			continue
		}
		if !useAsm {
			sub := *t
			sub.Rows = min(MR, t.Rows-r0)
			sub.C = t.C[r0*t.Ld:]
			if t.Res != nil {
				sub.Res = t.Res[r0*t.Ld:]
			}
			if t.Bias != nil {
				sub.Bias = t.Bias[r0:]
			}
			runFallback(1, kc, a[p*pstride:], pstride, b, ldb, bstep, nb, &sub)
			continue
		}
		var bias *float32
		if t.Bias != nil {
			bias = &t.Bias[r0]
		}
		for j := 0; j < nb; j++ {
			var res *float32
			if t.Res != nil {
				res = &t.Res[r0*t.Ld+j*NR]
			}
			kernelStrided(kc, &a[p*pstride], &b[j*bstep], &t.C[r0*t.Ld+j*NR], t.Ld, flags, bias, res, ldb)
		}
	}
}

// narrowRows is runNarrow's last A panel when it has fewer than MR rows
// (64 output channels leave 4): each tile goes through the AVX2 kernel
// into scratch, the epilogue's bias and residual padded to MR rows, and
// its rows are copied out. Through KernelPanels' scalar epilogue, with B
// copied panel by panel, those 4 rows cost as much as the other 60 of a
// pointwise convolution over few input channels.
func narrowRows(kc int, a, b []float32, ldb, bstep, nb int, t *Tile, flags, r0 int) {
	rows := t.Rows - r0
	var tile, res [MR * NR]float32
	var bias [MR]float32
	if t.Bias != nil {
		copy(bias[:rows], t.Bias[r0:r0+rows])
	}
	for j := 0; j < nb; j++ {
		c := t.C[r0*t.Ld+j*NR:]
		if t.Res != nil {
			for r := range rows {
				copy(res[r*NR:(r+1)*NR], t.Res[(r0+r)*t.Ld+j*NR:])
			}
		}
		if t.Load {
			for r := range rows {
				copy(tile[r*NR:(r+1)*NR], c[r*t.Ld:])
			}
		}
		kernelStrided(kc, &a[0], &b[j*bstep], &tile[0], NR, flags, &bias[0], &res[0], ldb)
		for r := range rows {
			copy(c[r*t.Ld:r*t.Ld+NR], tile[r*NR:(r+1)*NR])
		}
	}
}

// runFallback is KernelRun through KernelPanels, one B panel at a time,
// copying a strided panel into packed order first.
func runFallback(np, kc int, a []float32, pstride int, b []float32, ldb, bstep, nb int, t *Tile) {
	var buf [KCMax * NR]float32
	var packed []float32
	if ldb != NR {
		packed = buf[:]
		if kc > KCMax {
			packed = make([]float32, kc*NR)
		}
	}
	for j := 0; j < nb; j++ {
		bp := b[j*bstep:]
		if packed != nil {
			for k := 0; k < kc; k++ {
				copy(packed[k*NR:(k+1)*NR], bp[k*ldb:k*ldb+NR])
			}
			bp = packed
		}
		tj := *t
		tj.Cols, tj.Split = NR, NR
		tj.C = t.C[j*NR:]
		if t.Res != nil {
			tj.Res = t.Res[j*NR:]
		}
		KernelPanels(np, kc, a, pstride, bp, &tj)
	}
}

// groupPanels is how many of rem remaining A panels the next kernel call
// takes: as few calls as the widest kernel allows, of sizes that differ by
// at most one panel. 33 panels (ViT's 197 tokens) run as 6 calls of 4 and
// 3 of 3 instead of 8 of 4 and one of 1, whose single panel loads a B
// vector for every 6 FMAs instead of 18 or 24.
func groupPanels(rem int) int {
	w := widePanels()
	calls := (rem + w - 1) / w
	return (rem + calls - 1) / calls
}
