package gemm

import "fmt"

// ColsMax is the most columns KernelCols computes at its reduced cost.
const ColsMax = 4

// ColsFast reports whether KernelCols has its fast kernel on this CPU;
// without it, it costs as much as KernelTile.
func ColsFast() bool { return colsFast() }

// KernelCols is KernelTile for a panel of at most ColsMax real columns (the
// ragged end of a late-stage convolution's 7x7 or 14x14 output pixels at
// batch 1: 49 = 3 x 16 + 1, 196 = 12 x 16 + 4). The full micro-kernel
// would do 24 FMAs per depth step for a 16-column panel whatever its real
// width; this one does 2 per real column (output channels in the lanes,
// one accumulator pair per column), a third of the work or less. It writes
// the tile as KernelTile does: MR x NR, row stride NR, first cols columns.
func KernelCols(kc int, a, b, tile []float32, cols int) {
	if kc < 1 || len(a) < kc*MR || len(b) < kc*NR || len(tile) < MR*NR || cols < 1 || cols > NR {
		panic(fmt.Sprintf("gemm: KernelCols(kc=%d, len a=%d, len b=%d, len tile=%d, cols=%d): bad operands", kc, len(a), len(b), len(tile), cols))
	}
	if cols > ColsMax || !colsFast() {
		kernelNarrow(kc, &a[0], &b[0], &tile[0], cols)
		return
	}
	// Column-major: the kernel stores each column's MR values at once.
	var acc [ColsMax * MR]float32
	kernelCols(kc, &a[0], &b[0], &acc[0])
	for j := range cols {
		for r := range MR {
			tile[r*NR+j] = acc[j*MR+r]
		}
	}
}
