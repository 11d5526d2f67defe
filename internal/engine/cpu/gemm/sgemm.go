package gemm

import "fmt"

// PackB packs rows [k0, k0+kc) and columns [n0, n0+nw) of the row-major
// matrix b (row stride ldb) into NR-wide panels: panel p holds kc rows of
// NR values for columns n0+p*NR..., columns past nw zero-filled. dst needs
// ceil(nw/NR)*NR*kc values.
func PackB(dst, b []float32, ldb, k0, kc, n0, nw int) {
	panels := (nw + NR - 1) / NR
	for p := 0; p < panels; p++ {
		d := dst[p*NR*kc : (p+1)*NR*kc]
		c0 := n0 + p*NR
		w := min(NR, n0+nw-c0)
		for kk := 0; kk < kc; kk++ {
			row := b[(k0+kk)*ldb+c0 : (k0+kk)*ldb+c0+w]
			dr := d[kk*NR : kk*NR+NR]
			copy(dr, row)
			clear(dr[w:])
		}
	}
}

// SGEMM computes C = A*B for row-major A (m x k, row stride lda), B (k x n,
// ldb) and C (m x n, ldc), single-threaded. The engine runs its own
// parallel, fused driver; SGEMM is the plain entry point for other callers
// and the tests.
func SGEMM(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) error {
	if m < 1 || n < 1 || k < 1 || lda < k || ldb < n || ldc < n {
		return fmt.Errorf("gemm: SGEMM %dx%dx%d with lda %d, ldb %d, ldc %d: bad dimensions", m, n, k, lda, ldb, ldc)
	}
	if len(b) < (k-1)*ldb+n || len(c) < (m-1)*ldc+n {
		return fmt.Errorf("gemm: SGEMM %dx%dx%d: B has %d values (need %d), C has %d (need %d)", m, n, k, len(b), (k-1)*ldb+n, len(c), (m-1)*ldc+n)
	}
	pa, err := PackA(a, m, k, lda, BlockDepth(k))
	if err != nil {
		return err
	}
	const nc = 256
	bp := make([]float32, pa.KC*nc)
	var tile [MR * NR]float32
	for n0 := 0; n0 < n; n0 += nc {
		nw := min(nc, n-n0)
		for kb := 0; kb < pa.Blocks(); kb++ {
			k0, kc := pa.BlockK(kb)
			PackB(bp, b, ldb, k0, kc, n0, nw)
			for jp := 0; jp*NR < nw; jp++ {
				bpan := bp[jp*NR*kc : (jp+1)*NR*kc]
				cols := min(NR, nw-jp*NR)
				for ip := 0; ip < pa.Panels; ip++ {
					rows := min(MR, m-ip*MR)
					off := ip*MR*ldc + n0 + jp*NR
					if rows == MR && cols == NR {
						Kernel(kc, pa.Panel(kb, ip), bpan, c[off:], ldc, kb > 0)
						continue
					}
					KernelTile(kc, pa.Panel(kb, ip), bpan, tile[:], cols)
					MergeTile(c[off:], ldc, tile[:], rows, cols, kb > 0)
				}
			}
		}
	}
	return nil
}

// MergeTile stores the top-left rows x cols of an MR x NR tile computed into
// scratch (row stride NR) into c (row stride ldc), adding to c when load.
func MergeTile(c []float32, ldc int, tile []float32, rows, cols int, load bool) {
	for i := 0; i < rows; i++ {
		dst := c[i*ldc : i*ldc+cols]
		src := tile[i*NR : i*NR+cols]
		if load {
			for j, v := range src {
				dst[j] += v
			}
		} else {
			copy(dst, src)
		}
	}
}
