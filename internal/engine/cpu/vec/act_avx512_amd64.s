//go:build amd64 && !purego

#include "textflag.h"

// The activations of actAVX2 on 16 lanes (AVX-512F): the same operations
// in the same order per lane, so both paths give the same bits; constants
// are broadcast from actVec and expConst.

#include "exp_avx512_amd64.h"

// func actAVX512(v *float32, n, kind int)
// n is a multiple of 16; kind as in act.go.
TEXT ·actAVX512(SB), NOSPLIT, $0-24
	MOVQ v+0(FP), DI
	MOVQ n+8(FP), CX
	MOVQ kind+16(FP), DX
	SHRQ $4, CX
	EXPCONSTZ
	CMPQ DX, $0
	JEQ  sigmoidZ
	CMPQ DX, $1
	JEQ  siluZ
	CMPQ DX, $2
	JEQ  hardswishZ
	CMPQ DX, $3
	JEQ  tanhZ
	JMP  geluZ

sigmoidZ:
	VMOVUPS (DI), Z0
	VPXORD.BCST ·actVec+0(SB), Z0, Z0
	CLAMPEXPZ
	EXPZ
	VADDPS Z7, Z3, Z3
	VDIVPS Z3, Z7, Z3
	VMOVUPS Z3, (DI)
	ADDQ $64, DI
	DECQ CX
	JNZ  sigmoidZ
	JMP  actdoneZ

siluZ:
	VMOVUPS (DI), Z0
	VPXORD.BCST ·actVec+0(SB), Z0, Z0
	CLAMPEXPZ
	EXPZ
	VADDPS Z7, Z3, Z3
	VMOVUPS (DI), Z0
	VDIVPS Z3, Z0, Z3
	VMOVUPS Z3, (DI)
	ADDQ $64, DI
	DECQ CX
	JNZ  siluZ
	JMP  actdoneZ

hardswishZ:
	VMOVUPS (DI), Z0
	VBROADCASTSS ·actVec+160(SB), Z1
	VFMADD132PS.BCST ·actVec+128(SB), Z1, Z0
	VMAXPS.BCST ·actVec+192(SB), Z0, Z0
	VMINPS Z7, Z0, Z0
	VMULPS (DI), Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ $64, DI
	DECQ CX
	JNZ  hardswishZ
	JMP  actdoneZ

tanhZ:
	VMOVUPS (DI), Z0
	VADDPS Z0, Z0, Z0
	CLAMPEXPZ
	EXPZ
	VADDPS Z7, Z3, Z3
	VADDPS Z7, Z7, Z1
	VDIVPS Z3, Z1, Z3
	VSUBPS Z3, Z7, Z3
	VMOVUPS Z3, (DI)
	ADDQ $64, DI
	DECQ CX
	JNZ  tanhZ
	JMP  actdoneZ

geluZ:
	VMOVUPS (DI), Z0
	VPANDD.BCST ·actVec+32(SB), Z0, Z0
	VMULPS.BCST ·actVec+288(SB), Z0, Z0
	VMINPS.BCST ·actVec+256(SB), Z0, Z0
	VMULPS Z0, Z0, Z0
	VPXORD.BCST ·actVec+0(SB), Z0, Z0
	EXPZ
	VMOVUPS (DI), Z0
	VPANDD.BCST ·actVec+32(SB), Z0, Z1
	VMULPS.BCST ·actVec+288(SB), Z1, Z2
	VMINPS.BCST ·actVec+256(SB), Z2, Z2
	VMULPS.BCST ·actVec+320(SB), Z2, Z4
	VADDPS Z7, Z4, Z4
	VDIVPS Z4, Z7, Z4
	VBROADCASTSS ·actVec+352(SB), Z5
	VFMADD213PS.BCST ·actVec+384(SB), Z4, Z5
	VFMADD213PS.BCST ·actVec+416(SB), Z4, Z5
	VFMADD213PS.BCST ·actVec+448(SB), Z4, Z5
	VFMADD213PS.BCST ·actVec+480(SB), Z4, Z5
	VMULPS Z4, Z5, Z5
	VMULPS Z3, Z5, Z5
	VSUBPS Z5, Z7, Z5
	VFMADD213PS Z0, Z1, Z5
	VMULPS.BCST ·actVec+160(SB), Z5, Z5
	VMOVUPS Z5, (DI)
	ADDQ $64, DI
	DECQ CX
	JNZ  geluZ

actdoneZ:
	VZEROUPPER
	RET


// func tapsAVX512(dst, src *float32, n int, offs *int, w *float32, taps int, bias float32)
// tapsAVX2 on 64 and 16 lanes; n is a multiple of 16.
TEXT ·tapsAVX512(SB), NOSPLIT, $0-52
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ offs+24(FP), R8
	MOVQ w+32(FP), R9
	MOVQ taps+40(FP), R10
	VBROADCASTSS bias+48(FP), Z15

taps64Z:
	CMPQ CX, $64
	JLT  taps16Z
	VMOVAPS Z15, Z0
	VMOVAPS Z15, Z1
	VMOVAPS Z15, Z2
	VMOVAPS Z15, Z3
	XORQ BX, BX

tap64Z:
	MOVQ (R8)(BX*8), AX
	LEAQ (SI)(AX*4), DX
	VBROADCASTSS (R9)(BX*4), Z4
	VFMADD231PS (DX), Z4, Z0
	VFMADD231PS 64(DX), Z4, Z1
	VFMADD231PS 128(DX), Z4, Z2
	VFMADD231PS 192(DX), Z4, Z3
	INCQ BX
	CMPQ BX, R10
	JLT  tap64Z
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	ADDQ $256, DI
	ADDQ $256, SI
	SUBQ $64, CX
	JMP  taps64Z

taps16Z:
	CMPQ CX, $16
	JLT  tapsdoneZ
	VMOVAPS Z15, Z0
	XORQ BX, BX

tap16Z:
	MOVQ (R8)(BX*8), AX
	LEAQ (SI)(AX*4), DX
	VBROADCASTSS (R9)(BX*4), Z4
	VFMADD231PS (DX), Z4, Z0
	INCQ BX
	CMPQ BX, R10
	JLT  tap16Z
	VMOVUPS Z0, (DI)
	ADDQ $64, DI
	ADDQ $64, SI
	SUBQ $16, CX
	JMP  taps16Z

tapsdoneZ:
	VZEROUPPER
	RET

