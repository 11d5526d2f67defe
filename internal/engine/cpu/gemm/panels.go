package gemm

import "fmt"

// WidePanels is how many consecutive MR-row panels of a PackedA block
// KernelPanels computes in one call on this CPU: 4 (24 rows, one zmm
// register per row) with AVX-512, 1 otherwise. Drivers step their panel
// loops by it.
func WidePanels() int { return widePanels() }

// KernelPanels computes np consecutive MR-row A panels against one NR-wide
// B panel: rows np*MR, columns [0, cols) of C (row stride ldc) = A*B (or +=
// with load), then the epilogue e (Bias needs np*MR values). a starts at the
// first panel, the next ones pstride floats apart (MR*kc within a PackedA
// block); b is the B panel (kc*NR values). Columns of C from cols on are
// neither read nor written, so a ragged last panel of an image is stored in
// place. np may exceed WidePanels; the call is then split.
func KernelPanels(np, kc int, a []float32, pstride int, b, c []float32, ldc, cols int, load bool, e Epilogue) {
	rows := np * MR
	if np < 1 || kc < 1 || cols < 1 || cols > NR || pstride < MR*kc || len(a) < (np-1)*pstride+MR*kc || len(b) < kc*NR || ldc < cols || len(c) < (rows-1)*ldc+cols {
		panic(fmt.Sprintf("gemm: KernelPanels(np=%d, kc=%d, len a=%d, pstride=%d, len b=%d, len c=%d, ldc=%d, cols=%d): bad operands", np, kc, len(a), pstride, len(b), len(c), ldc, cols))
	}
	var flags int
	var bias, res *float32
	if load {
		flags |= flagLoad
	}
	if e.Bias != nil {
		if len(e.Bias) < rows {
			panic(fmt.Sprintf("gemm: KernelPanels: bias has %d values, want %d", len(e.Bias), rows))
		}
		flags |= flagBias
		bias = &e.Bias[0]
	}
	if e.Res != nil {
		if e.LdRes < cols || len(e.Res) < (rows-1)*e.LdRes+cols {
			panic(fmt.Sprintf("gemm: KernelPanels: residual of %d values with stride %d is too short", len(e.Res), e.LdRes))
		}
		flags |= flagRes
		res = &e.Res[0]
	}
	if e.ReLU {
		flags |= flagReLU
	}
	for w := widePanels(); np > 0; {
		n := min(np, w)
		if e.Bias != nil {
			bias = &e.Bias[0]
		}
		if e.Res != nil {
			res = &e.Res[0]
		}
		if !kernelPanels(n, kc, &a[0], pstride, &b[0], &c[0], ldc, cols, flags, bias, res, e.LdRes) {
			panelsFallback(kc, a, b, c, ldc, cols, load, e)
			n = 1
		}
		np -= n
		a = a[min(len(a), n*pstride):]
		c = c[min(len(c), n*MR*ldc):]
		if e.Bias != nil {
			e.Bias = e.Bias[n*MR:]
		}
		if e.Res != nil {
			e.Res = e.Res[min(len(e.Res), n*MR*e.LdRes):]
		}
	}
}

// panelsFallback is one panel of KernelPanels on a CPU without the wide
// kernel: in place when the tile is whole, else through scratch.
func panelsFallback(kc int, a, b, c []float32, ldc, cols int, load bool, e Epilogue) {
	if cols == NR && (e.Res == nil || e.LdRes >= NR) {
		KernelEpilogue(kc, a, b, c, ldc, load, e)
		return
	}
	var tile [MR * NR]float32
	KernelTile(kc, a, b, tile[:], cols)
	MergeTile(c, ldc, tile[:], MR, cols, load)
	ApplyEpilogue(c, ldc, MR, cols, e)
}
