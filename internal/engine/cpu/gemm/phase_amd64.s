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

// func deinterleave2AVX512(even, odd, src *float32, blocks int)
//
// Per block: two zmm loads of 32 values, two permutes across both (indices
// 0, 2, ... 30 and, one more, 1, 3, ... 31).
TEXT ·deinterleave2AVX512(SB), NOSPLIT, $0-32
	MOVQ even+0(FP), DI
	MOVQ odd+8(FP), DX
	MOVQ src+16(FP), SI
	MOVQ blocks+24(FP), CX
	VMOVDQU32 evenIdx<>(SB), Z4
	MOVL $1, AX
	VPBROADCASTD AX, Z5
	VPADDD Z5, Z4, Z5
loop:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVDQA32 Z4, Z2
	VMOVDQA32 Z5, Z3
	VPERMI2PS Z1, Z0, Z2
	VPERMI2PS Z1, Z0, Z3
	VMOVUPS Z2, (DI)
	VMOVUPS Z3, (DX)
	ADDQ $128, SI
	ADDQ $64, DI
	ADDQ $64, DX
	DECQ CX
	JNZ loop
	VZEROUPPER
	RET
