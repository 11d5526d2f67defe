package gemm

import "unsafe"

// kernelGo is the portable micro-kernel. Accumulating the whole 6x16 tile in
// an array would keep every sum in memory; strips of 2 rows x 4 columns keep
// 8 sums, 2 A values and 4 B values in registers on amd64 and arm64 alike
// (3x4 strips spill on amd64 and measured 2.5x slower there), at the price
// of reading each panel once per strip, from L1.
func kernelGo(kc int, a, b, c *float32, ldc int, flags int, bias, res *float32, ldr int) {
	load := flags&flagLoad != 0
	as := unsafe.Slice(a, kc*MR)
	bs := unsafe.Slice(b, kc*NR)
	cs := unsafe.Slice(c, (MR-1)*ldc+NR)
	for i := 0; i < MR; i += 2 {
		for j := 0; j < NR; j += 4 {
			var c00, c01, c02, c03, c10, c11, c12, c13 float32
			ai, bj := as[i:], bs[j:]
			for k := 0; k < kc; k++ {
				ak := ai[k*MR : k*MR+2 : k*MR+2]
				bk := bj[k*NR : k*NR+4 : k*NR+4]
				a0, a1 := ak[0], ak[1]
				b0, b1, b2, b3 := bk[0], bk[1], bk[2], bk[3]
				c00 += a0 * b0
				c01 += a0 * b1
				c02 += a0 * b2
				c03 += a0 * b3
				c10 += a1 * b0
				c11 += a1 * b1
				c12 += a1 * b2
				c13 += a1 * b3
			}
			r0 := cs[i*ldc+j : i*ldc+j+4 : i*ldc+j+4]
			r1 := cs[(i+1)*ldc+j : (i+1)*ldc+j+4 : (i+1)*ldc+j+4]
			if load {
				c00, c01, c02, c03 = c00+r0[0], c01+r0[1], c02+r0[2], c03+r0[3]
				c10, c11, c12, c13 = c10+r1[0], c11+r1[1], c12+r1[2], c13+r1[3]
			}
			r0[0], r0[1], r0[2], r0[3] = c00, c01, c02, c03
			r1[0], r1[1], r1[2], r1[3] = c10, c11, c12, c13
		}
	}
	if flags&^flagLoad == 0 {
		return
	}
	var e Epilogue
	if flags&flagBias != 0 {
		e.Bias = unsafe.Slice(bias, MR)
	}
	if flags&flagRes != 0 {
		e.Res, e.LdRes = unsafe.Slice(res, (MR-1)*ldr+NR), ldr
	}
	e.ReLU = flags&flagReLU != 0
	ApplyEpilogue(cs, ldc, MR, NR, e)
}
