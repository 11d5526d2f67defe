package gemm

import "fmt"

// WidePanels is how many consecutive MR-row panels of a PackedA block
// KernelPanels computes in one call on this CPU: 4 (24 rows, one zmm
// register per row) with AVX-512, 1 otherwise. Drivers step their panel
// loops by it.
func WidePanels() int { return widePanels() }

// Tile says where KernelPanels stores its rows x cols block of C, and what
// it adds first: out = relu?(acc [+ C] + Bias[row] + Res).
type Tile struct {
	// C is row 0, column 0; rows are Ld apart (Res's too).
	C  []float32
	Ld int
	// Rows (<= np*MR) and Cols (<= NR) are stored; the rest of the tile
	// (rows of zero padding, columns past the data) is dropped, and
	// nothing outside is read or written.
	Rows, Cols int
	// Split, when in (0, Cols), sends columns [Split, Cols) to C2 instead
	// (column Split at C2[0], and the residual's at Res2[0]): a panel of
	// output pixels that spans two images. Otherwise set it to Cols.
	Split int
	C2    []float32
	// Res and Res2 are the residual, laid out as C and C2, or nil.
	Res, Res2 []float32
	Bias      []float32 // Rows values, or nil
	ReLU      bool
	// Load adds C's old values (a later K-block).
	Load bool
	// Next, when set, is the A operand the caller runs after this call
	// (KernelRun only): the kernel prefetches it into L2 while it computes
	// its last panels, which it reuses from L1 across the B panels.
	Next []float32
}

// zTile is Tile as the assembly reads it (field offsets are fixed in
// gen_avx512.go).
type zTile struct {
	c, c2, res, res2, bias       *float32
	ld, rows, cols, split, flags int
	// ldb is B's row stride (NR for a packed panel); the kernel computes
	// npan (at least 1) B panels bstep floats apart, advancing c and res
	// by NR columns per panel, and keeps its place in bcur. The kernel
	// changes c, res, npan and bcur.
	ldb, npan int
	bcur      uintptr
	bstep     int
	// pf, when set, is where the kernel prefetches into L2, pfstep bytes
	// further per four steps of depth (two lines each); the kernel
	// advances it.
	pf     uintptr
	pfstep int
}

// flagSpan says the tile's columns from split on go to c2.
const flagSpan = 16

// KernelPanels computes np consecutive MR-row A panels against one NR-wide
// B panel and stores them as t says. a starts at the first panel, the next
// ones pstride floats apart (MR*kc within a PackedA block, see PanelRun); b
// is the B panel (kc*NR values). np may exceed WidePanels; the call is then
// split.
func KernelPanels(np, kc int, a []float32, pstride int, b []float32, t *Tile) {
	split := t.Split
	if split <= 0 || split > t.Cols {
		split = t.Cols
	}
	span := split < t.Cols
	need := func(rows, cols int) int { return (rows-1)*t.Ld + cols }
	if np < 1 || kc < 1 || t.Rows < 1 || t.Rows > np*MR || t.Cols < 1 || t.Cols > NR || pstride < MR*kc ||
		len(a) < (np-1)*pstride+MR*kc || len(b) < kc*NR || t.Ld < split || t.Ld < t.Cols-split || len(t.C) < need(t.Rows, split) ||
		(span && len(t.C2) < need(t.Rows, t.Cols-split)) {
		panic(fmt.Sprintf("gemm: KernelPanels(np=%d, kc=%d, len a=%d, pstride=%d, len b=%d, len C=%d, len C2=%d, ld=%d, rows=%d, cols=%d, split=%d): bad operands",
			np, kc, len(a), pstride, len(b), len(t.C), len(t.C2), t.Ld, t.Rows, t.Cols, t.Split))
	}
	if t.Res != nil && (len(t.Res) < need(t.Rows, split) || (span && len(t.Res2) < need(t.Rows, t.Cols-split))) {
		panic(fmt.Sprintf("gemm: KernelPanels: residual of %d (%d) values too short for %d rows of stride %d", len(t.Res), len(t.Res2), t.Rows, t.Ld))
	}
	if t.Bias != nil && len(t.Bias) < t.Rows {
		panic(fmt.Sprintf("gemm: KernelPanels: bias has %d values, want %d", len(t.Bias), t.Rows))
	}
	z := zTile{ld: t.Ld, cols: t.Cols, split: split, ldb: NR}
	if t.Load {
		z.flags |= flagLoad
	}
	if t.Bias != nil {
		z.flags |= flagBias
	}
	if t.Res != nil {
		z.flags |= flagRes
	}
	if t.ReLU {
		z.flags |= flagReLU
	}
	if span {
		z.flags |= flagSpan
	}
	rows := t.Rows
	for p, w := 0, widePanels(); p < np && p*MR < rows; {
		n := min(np-p, w, (rows-p*MR+MR-1)/MR)
		r0 := p * MR
		z.rows = min(rows-r0, n*MR)
		z.c = &t.C[r0*t.Ld]
		if span {
			z.c2 = &t.C2[r0*t.Ld]
		}
		if t.Res != nil {
			z.res = &t.Res[r0*t.Ld]
			if span {
				z.res2 = &t.Res2[r0*t.Ld]
			}
		}
		if t.Bias != nil {
			z.bias = &t.Bias[r0]
		}
		if !kernelPanels(n, kc, &a[p*pstride], pstride, &b[0], &z) {
			panelFallback(kc, a[p*pstride:], b, t, r0, z.rows)
		}
		p += n
	}
}

// panelFallback is one panel of KernelPanels, rows [r0, r0+rows) of t, on a
// CPU without the wide kernel: in place when the tile is whole, else
// through scratch.
func panelFallback(kc int, a, b []float32, t *Tile, r0, rows int) {
	var e Epilogue
	if t.Bias != nil {
		e.Bias = t.Bias[r0:]
	}
	e.ReLU = t.ReLU
	c := t.C[r0*t.Ld:]
	split := t.Split
	if split <= 0 || split > t.Cols {
		split = t.Cols
	}
	if rows == MR && split == NR && len(c) >= (MR-1)*t.Ld+NR {
		if t.Res != nil {
			e.Res, e.LdRes = t.Res[r0*t.Ld:], t.Ld
		}
		KernelEpilogue(kc, a, b, c, t.Ld, t.Load, e)
		return
	}
	var tile [MR * NR]float32
	KernelTile(kc, a, b, tile[:], t.Cols)
	seg := func(c, res []float32, l, cols int) {
		MergeTile(c, t.Ld, tile[l:], rows, cols, t.Load)
		if res != nil {
			e.Res, e.LdRes = res, t.Ld
		}
		ApplyEpilogue(c, t.Ld, rows, cols, e)
	}
	var res []float32
	if t.Res != nil {
		res = t.Res[r0*t.Ld:]
	}
	seg(c, res, 0, split)
	if split < t.Cols {
		if t.Res != nil {
			res = t.Res2[r0*t.Ld:]
		}
		seg(t.C2[r0*t.Ld:], res, split, t.Cols-split)
	}
}
