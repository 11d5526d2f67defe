//go:build amd64 && !purego

#include "textflag.h"

// func colsDot1(n int, a, b, out *float32)
//
// Six accumulators, two chunks (of MR x 8 A values, 48 lanes) a loop, so
// that the FMAs' latency is hidden; the FMAs read the expanded B from
// memory.
TEXT ·colsDot1(SB), NOSPLIT, $0-32
	MOVQ n+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ out+24(FP), DX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	SUBQ $2, CX
	JLT  single

pair:
	VMOVUPS 0(SI), Z26
	VMOVUPS 64(SI), Z27
	VMOVUPS 128(SI), Z28
	VMOVUPS 192(SI), Z29
	VMOVUPS 256(SI), Z30
	VMOVUPS 320(SI), Z31
	VFMADD231PS 0(DI), Z26, Z0
	VFMADD231PS 64(DI), Z27, Z1
	VFMADD231PS 128(DI), Z28, Z2
	VFMADD231PS 192(DI), Z29, Z3
	VFMADD231PS 256(DI), Z30, Z4
	VFMADD231PS 320(DI), Z31, Z5
	ADDQ $384, SI
	ADDQ $384, DI
	SUBQ $2, CX
	JGE  pair

single:
	// CX is -2 with no chunk left, -1 with one.
	CMPQ CX, $-1
	JNE  done
	VMOVUPS 0(SI), Z26
	VMOVUPS 64(SI), Z27
	VMOVUPS 128(SI), Z28
	VFMADD231PS 0(DI), Z26, Z0
	VFMADD231PS 64(DI), Z27, Z1
	VFMADD231PS 128(DI), Z28, Z2

done:
	VADDPS Z3, Z0, Z0
	VADDPS Z4, Z1, Z1
	VADDPS Z5, Z2, Z2
	VMOVUPS Z0, 0(DX)
	VMOVUPS Z1, 64(DX)
	VMOVUPS Z2, 128(DX)
	VZEROUPPER
	RET
