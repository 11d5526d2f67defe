//go:build amd64 && !purego

#include "textflag.h"

// EXPZ and CLAMPEXPZ: e^x per lane with the same operations as EXP in
// vec_amd64.s, constants in Z6-Z15.
#include "exp_avx512_amd64.h"

// HREDUCE sets every lane of Z16 to OP over its lanes; clobbers Z1.
#define HREDUCE(OP) \
	VSHUFF32X4 $0x4E, Z16, Z16, Z1; \
	OP Z1, Z16, Z16; \
	VSHUFF32X4 $0xB1, Z16, Z16, Z1; \
	OP Z1, Z16, Z16; \
	VPERMILPS $0x4E, Z16, Z1; \
	OP Z1, Z16, Z16; \
	VPERMILPS $0xB1, Z16, Z1; \
	OP Z1, Z16, Z16

// func softmaxRowAVX512(dst, src *float32, n int)
// n >= 1.
TEXT ·softmaxRowAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	// K1: the lanes of the last, partial vector; BX: whole vectors.
	MOVQ CX, AX
	ANDQ $15, AX
	MOVL $1, DX
	SHLXL AX, DX, DX
	DECL DX
	KMOVW DX, K1
	MOVQ CX, BX
	SHRQ $4, BX

	// Pass 1: the maximum, into every lane of Z16.
	VBROADCASTSS ·softmaxNegInf(SB), Z16
	MOVQ SI, R8
	MOVQ BX, R9
	TESTQ R9, R9
	JZ   maxtail
maxloop:
	VMAXPS (R8), Z16, Z16
	ADDQ $64, R8
	DECQ R9
	JNZ  maxloop
maxtail:
	VBROADCASTSS ·softmaxNegInf(SB), Z0
	VMOVUPS (R8), K1, Z0
	VMAXPS Z0, Z16, Z16
	HREDUCE(VMAXPS)
	VMOVAPS Z16, Z18

	// Pass 2: dst = e^(src - max), summed in Z17.
	EXPCONSTZ
	VPXORD Z17, Z17, Z17
	MOVQ SI, R8
	MOVQ DI, R10
	MOVQ BX, R9
	TESTQ R9, R9
	JZ   exptail
exploop:
	VMOVUPS (R8), Z0
	VSUBPS Z18, Z0, Z0
	CLAMPEXPZ
	EXPZ
	VMOVUPS Z3, (R10)
	VADDPS Z3, Z17, Z17
	ADDQ $64, R8
	ADDQ $64, R10
	DECQ R9
	JNZ  exploop
exptail:
	KORTESTW K1, K1
	JZ   sum
	VMOVUPS.Z (R8), K1, Z0
	VSUBPS Z18, Z0, Z0
	CLAMPEXPZ
	EXPZ
	VMOVUPS Z3, K1, (R10)
	VADDPS Z3, Z17, K1, Z17

sum:
	// Pass 3: dst *= 1/sum.
	VMOVAPS Z17, Z16
	HREDUCE(VADDPS)
	VDIVPS Z16, Z7, Z2
	MOVQ DI, R10
	MOVQ BX, R9
	TESTQ R9, R9
	JZ   scaletail
scaleloop:
	VMULPS (R10), Z2, Z3
	VMOVUPS Z3, (R10)
	ADDQ $64, R10
	DECQ R9
	JNZ  scaleloop
scaletail:
	KORTESTW K1, K1
	JZ   done
	VMOVUPS.Z (R10), K1, Z3
	VMULPS Z3, Z2, Z3
	VMOVUPS Z3, K1, (R10)
done:
	VZEROUPPER
	RET
