package gemm

import "fmt"

// PairsWide reports whether KernelPairs runs its 12 x 32 AVX-512 kernel;
// elsewhere it computes the same through Kernel, tile by tile, and a
// driver does as well with KernelRun.
func PairsWide() bool { return useAVX512 }

// KernelPairs computes two consecutive MR-row A panels (a, the second
// pstride floats on) against npair pairs of packed NR-wide B panels (panel
// j at b[j*bstep], kc rows of NR) and stores the 2*MR x 2*NR*npair block
// to c, row stride ld, adding c's old values when load. Every row is
// stored, zero-padded A rows too: c must hold them. Two B vectors per k
// load fewer operands per FMA than KernelRun's one, for drivers whose A
// panels are packed per call (activations) and B panels once (weights).
func KernelPairs(kc int, a []float32, pstride int, b []float32, bstep int, c []float32, ld, npair int, load bool) {
	cols := 2 * NR * npair
	if kc < 1 || npair < 1 || pstride < MR*kc || bstep < NR*kc || ld < cols || len(a) < pstride+MR*kc ||
		len(b) < (2*npair-1)*bstep+NR*kc || len(c) < (2*MR-1)*ld+cols {
		panic(fmt.Sprintf("gemm: KernelPairs(kc=%d, len a=%d, pstride=%d, len b=%d, bstep=%d, len c=%d, ld=%d, npair=%d): bad operands",
			kc, len(a), pstride, len(b), bstep, len(c), ld, npair))
	}
	if useAVX512 {
		l := 0
		if load {
			l = 1
		}
		kernelPairs(kc, &a[0], pstride, &b[0], bstep, &c[0], ld, npair, l)
		return
	}
	for j := 0; j < 2*npair; j++ {
		for p := 0; p < 2; p++ {
			Kernel(kc, a[p*pstride:], b[j*bstep:], c[p*MR*ld+j*NR:], ld, load)
		}
	}
}
