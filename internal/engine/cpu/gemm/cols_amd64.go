//go:build amd64 && !purego

package gemm

// colsZ computes ColsMax columns of an MR-row tile over depth kc with
// AVX-512 (cols_amd64.s): a is an MR-row panel, b an NR-wide panel of
// which the first ColsMax columns are read, out the MR x ColsMax result,
// column by column.
//
//go:noescape
func colsZ(kc int, a, b, out *float32)

func colsFast() bool { return useAVX512 && MR == 24 && NR == 16 }

func kernelCols(kc int, a, b, out *float32) { colsZ(kc, a, b, out) }
