//go:build amd64 && !purego

#include "textflag.h"

DATA evenIdx<>+0(SB)/4, $0
DATA evenIdx<>+4(SB)/4, $2
DATA evenIdx<>+8(SB)/4, $4
DATA evenIdx<>+12(SB)/4, $6
DATA evenIdx<>+16(SB)/4, $8
DATA evenIdx<>+20(SB)/4, $10
DATA evenIdx<>+24(SB)/4, $12
DATA evenIdx<>+28(SB)/4, $14
DATA evenIdx<>+32(SB)/4, $16
DATA evenIdx<>+36(SB)/4, $18
DATA evenIdx<>+40(SB)/4, $20
DATA evenIdx<>+44(SB)/4, $22
DATA evenIdx<>+48(SB)/4, $24
DATA evenIdx<>+52(SB)/4, $26
DATA evenIdx<>+56(SB)/4, $28
DATA evenIdx<>+60(SB)/4, $30
GLOBL evenIdx<>(SB), RODATA|NOPTR, $64

// func deinterleave2AVX512(even, odd, src *float32, n, rows, srcStride, dstStride int)
//
// Per row, per block of 32 source values: two zmm loads, two permutes
// across both (indices 0, 2, ... 30 and, one more, 1, 3, ... 31). The last
// n mod 32 values of a row go through masked loads and stores, so that
// the short rows of a late stage's planes (14 or 28 values) need no scalar
// loop. The masks are the same for every row: set once.
TEXT ·deinterleave2AVX512(SB), NOSPLIT, $0-56
	MOVQ even+0(FP), DI
	MOVQ odd+8(FP), DX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), R9
	MOVQ rows+32(FP), R10
	MOVQ srcStride+40(FP), R11
	SHLQ $2, R11
	MOVQ dstStride+48(FP), R12
	SHLQ $2, R12
	VMOVDQU32 evenIdx<>(SB), Z4
	MOVL $1, AX
	VPBROADCASTD AX, Z5
	VPADDD Z5, Z4, Z5
	// K1, K2: the rem = n mod 32 last source values over two vectors;
	// K3, K4: their (rem+1)/2 even and rem/2 odd values.
	MOVQ R9, R13
	ANDQ $31, R13
	MOVQ R13, CX
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K1
	SHRL $16, AX
	KMOVW AX, K2
	LEAQ 1(R13), CX
	SHRQ $1, CX
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K3
	MOVQ R13, CX
	SHRQ $1, CX
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K4
	SHRQ $5, R9
row:
	MOVQ SI, R14
	MOVQ DI, R15
	MOVQ DX, R8
	MOVQ R9, BX
	TESTQ BX, BX
	JZ tail
loop:
	VMOVUPS (R14), Z0
	VMOVUPS 64(R14), Z1
	VMOVDQA32 Z4, Z2
	VMOVDQA32 Z5, Z3
	VPERMI2PS Z1, Z0, Z2
	VPERMI2PS Z1, Z0, Z3
	VMOVUPS Z2, (R15)
	VMOVUPS Z3, (R8)
	ADDQ $128, R14
	ADDQ $64, R15
	ADDQ $64, R8
	DECQ BX
	JNZ loop
tail:
	TESTQ R13, R13
	JZ next
	VMOVUPS.Z (R14), K1, Z0
	VMOVUPS.Z 64(R14), K2, Z1
	VMOVDQA32 Z4, Z2
	VMOVDQA32 Z5, Z3
	VPERMI2PS Z1, Z0, Z2
	VPERMI2PS Z1, Z0, Z3
	VMOVUPS Z2, K3, (R15)
	VMOVUPS Z3, K4, (R8)
next:
	ADDQ R11, SI
	ADDQ R12, DI
	ADDQ R12, DX
	DECQ R10
	JNZ row
	VZEROUPPER
	RET

// func deinterleave2AVX2(even, odd, src *float32, blocks, rows, srcStride, dstStride int)
//
// Per row, blocks blocks of 16 source values (blocks >= 1): two ymm loads,
// the even and odd values of each 128-bit lane picked by VSHUFPS, then
// their 64-bit pairs put in order by VPERMPD. The caller does the rest of
// each row.
TEXT ·deinterleave2AVX2(SB), NOSPLIT, $0-56
	MOVQ even+0(FP), DI
	MOVQ odd+8(FP), DX
	MOVQ src+16(FP), SI
	MOVQ blocks+24(FP), R9
	MOVQ rows+32(FP), R10
	MOVQ srcStride+40(FP), R11
	SHLQ $2, R11
	MOVQ dstStride+48(FP), R12
	SHLQ $2, R12
row2:
	MOVQ SI, R14
	MOVQ DI, R15
	MOVQ DX, R8
	MOVQ R9, BX
loop2:
	VMOVUPS (R14), Y0
	VMOVUPS 32(R14), Y1
	VSHUFPS $0x88, Y1, Y0, Y2
	VSHUFPS $0xdd, Y1, Y0, Y3
	VPERMPD $0xd8, Y2, Y2
	VPERMPD $0xd8, Y3, Y3
	VMOVUPS Y2, (R15)
	VMOVUPS Y3, (R8)
	ADDQ $64, R14
	ADDQ $32, R15
	ADDQ $32, R8
	DECQ BX
	JNZ loop2
	ADDQ R11, SI
	ADDQ R12, DI
	ADDQ R12, DX
	DECQ R10
	JNZ row2
	VZEROUPPER
	RET
