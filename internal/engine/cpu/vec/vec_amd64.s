//go:build amd64 && !purego

#include "textflag.h"

// func scaleShiftAVX2(dst, src *float32, n int, scale, shift float32)
TEXT ·scaleShiftAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y2
	VBROADCASTSS shift+28(FP), Y3
	SHRQ $3, CX
loop:
	VMOVUPS (SI), Y0
	VFMADD213PS Y3, Y2, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ loop
	VZEROUPPER
	RET

// func reluAVX2(dst, src *float32, n int)
// max(0, x) with x as the second source keeps NaN.
TEXT ·reluAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VXORPS Y2, Y2, Y2
	SHRQ $3, CX
loop:
	VMOVUPS (SI), Y0
	VMAXPS Y0, Y2, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ loop
	VZEROUPPER
	RET

// func addAVX2(dst, a, b *float32, n int)
TEXT ·addAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	SHRQ $3, CX
loop:
	VMOVUPS (SI), Y0
	VADDPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ loop
	VZEROUPPER
	RET

// func maxAVX2(dst, src *float32, n int)
// VMAXPS returns its second source when either is NaN, which keeps a NaN
// from src; a NaN already in dst is kept by the blend, so that NaN
// propagates as with Go's max (and PyTorch's max pooling).
TEXT ·maxAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
loop:
	VMOVUPS (DI), Y1
	VMOVUPS (SI), Y0
	VMAXPS Y0, Y1, Y2
	VCMPPS $3, Y1, Y1, Y3
	VBLENDVPS Y3, Y1, Y2, Y2
	VMOVUPS Y2, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ loop
	VZEROUPPER
	RET

// func sumAVX2(v *float32, n int) float32
TEXT ·sumAVX2(SB), NOSPLIT, $0-20
	MOVQ v+0(FP), SI
	MOVQ n+8(FP), CX
	VXORPS Y0, Y0, Y0
	SHRQ $3, CX
loop:
	VADDPS (SI), Y0, Y0
	ADDQ $32, SI
	DECQ CX
	JNZ loop
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

// func axpyAVX2(dst, src *float32, n int, a float32)
TEXT ·axpyAVX2(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS a+24(FP), Y2
	SHRQ $3, CX
loop:
	VMOVUPS (DI), Y0
	VFMADD231PS (SI), Y2, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ loop
	VZEROUPPER
	RET

// func expAVX2(dst, src *float32, n int)
// e^x eight lanes at a time: x*log2e + expMagic rounds n = round(x*log2e)
// into the low mantissa bits as n+127 (so shifting them to the exponent
// field gives 2^n with no conversion), r = x - n*ln2 (in two parts), e^r
// = 1 + r + r^2 q(r) with q cubic (a relative error of about 1e-7 on
// |r| <= ln2/2). Only inputs in [-87, 88] are meant to reach it; Exp
// redoes the others.
TEXT ·expAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS ·expConst+0(SB), Y8
	VBROADCASTSS ·expConst+4(SB), Y9
	VBROADCASTSS ·expConst+8(SB), Y10
	VBROADCASTSS ·expConst+12(SB), Y11
	VBROADCASTSS ·expConst+16(SB), Y12
	VBROADCASTSS ·expConst+20(SB), Y13
	VBROADCASTSS ·expConst+24(SB), Y14
	VBROADCASTSS ·expConst+28(SB), Y15
	VBROADCASTSS ·expConst+32(SB), Y6
	VBROADCASTSS ·expConst+36(SB), Y7
	SHRQ $3, CX
loop:
	VMOVUPS (SI), Y0
	VMOVAPS Y15, Y1
	VFMADD231PS Y8, Y0, Y1
	VSUBPS Y15, Y1, Y4
	VMOVAPS Y0, Y2
	VFNMADD231PS Y9, Y4, Y2
	VFNMADD231PS Y10, Y4, Y2
	VMOVAPS Y11, Y3
	VFMADD213PS Y12, Y2, Y3
	VFMADD213PS Y13, Y2, Y3
	VFMADD213PS Y14, Y2, Y3
	VMULPS Y2, Y2, Y4
	VADDPS Y7, Y2, Y5
	VFMADD213PS Y5, Y4, Y3
	VPSLLD $23, Y1, Y1
	VMULPS Y1, Y3, Y3
	VMOVUPS Y3, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ loop
	VZEROUPPER
	RET

// func tapsAVX2(dst, src *float32, n int, offs *int, w *float32, taps int, bias float32)
// n is a multiple of 8. Blocks of 32 outputs keep four accumulators in
// registers across all taps, so each output is stored once; a block of 8
// finishes the rest.
TEXT ·tapsAVX2(SB), NOSPLIT, $0-52
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ offs+24(FP), R8
	MOVQ w+32(FP), R9
	MOVQ taps+40(FP), R10
	VBROADCASTSS bias+48(FP), Y15

taps32:
	CMPQ CX, $32
	JLT  taps8
	VMOVAPS Y15, Y0
	VMOVAPS Y15, Y1
	VMOVAPS Y15, Y2
	VMOVAPS Y15, Y3
	XORQ BX, BX

tap32:
	MOVQ (R8)(BX*8), AX
	LEAQ (SI)(AX*4), DX
	VBROADCASTSS (R9)(BX*4), Y4
	VFMADD231PS (DX), Y4, Y0
	VFMADD231PS 32(DX), Y4, Y1
	VFMADD231PS 64(DX), Y4, Y2
	VFMADD231PS 96(DX), Y4, Y3
	INCQ BX
	CMPQ BX, R10
	JLT  tap32
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ $128, DI
	ADDQ $128, SI
	SUBQ $32, CX
	JMP  taps32

taps8:
	CMPQ CX, $8
	JLT  tapsdone
	VMOVAPS Y15, Y0
	XORQ BX, BX

tap8:
	MOVQ (R8)(BX*8), AX
	LEAQ (SI)(AX*4), DX
	VBROADCASTSS (R9)(BX*4), Y4
	VFMADD231PS (DX), Y4, Y0
	INCQ BX
	CMPQ BX, R10
	JLT  tap8
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	SUBQ $8, CX
	JMP  taps8

tapsdone:
	VZEROUPPER
	RET

// EXP sets Y3 = e^Y0 as expAVX2 does, with its constants in Y6-Y15;
// clobbers Y1, Y2, Y4, Y5 and keeps Y0.
#define EXP \
	VMOVAPS Y15, Y1; \
	VFMADD231PS Y8, Y0, Y1; \
	VSUBPS Y15, Y1, Y4; \
	VMOVAPS Y0, Y2; \
	VFNMADD231PS Y9, Y4, Y2; \
	VFNMADD231PS Y10, Y4, Y2; \
	VMOVAPS Y11, Y3; \
	VFMADD213PS Y12, Y2, Y3; \
	VFMADD213PS Y13, Y2, Y3; \
	VFMADD213PS Y14, Y2, Y3; \
	VMULPS Y2, Y2, Y4; \
	VADDPS Y7, Y2, Y5; \
	VFMADD213PS Y5, Y4, Y3; \
	VPSLLD $23, Y1, Y1; \
	VMULPS Y1, Y3, Y3

// CLAMPEXP clamps Y0 to [-87, 88] keeping NaNs (x is the operand MAXPS and
// MINPS return when one is NaN); clobbers Y1.
#define CLAMPEXP \
	VMOVUPS ·actVec+64(SB), Y1; \
	VMAXPS Y0, Y1, Y0; \
	VMOVUPS ·actVec+96(SB), Y1; \
	VMINPS Y0, Y1, Y0

// func actAVX2(v *float32, n, kind int)
// n is a multiple of 8; kind as in act.go.
TEXT ·actAVX2(SB), NOSPLIT, $0-24
	MOVQ v+0(FP), DI
	MOVQ n+8(FP), CX
	MOVQ kind+16(FP), DX
	SHRQ $3, CX
	VBROADCASTSS ·expConst+0(SB), Y8
	VBROADCASTSS ·expConst+4(SB), Y9
	VBROADCASTSS ·expConst+8(SB), Y10
	VBROADCASTSS ·expConst+12(SB), Y11
	VBROADCASTSS ·expConst+16(SB), Y12
	VBROADCASTSS ·expConst+20(SB), Y13
	VBROADCASTSS ·expConst+24(SB), Y14
	VBROADCASTSS ·expConst+28(SB), Y15
	VBROADCASTSS ·expConst+32(SB), Y6
	VBROADCASTSS ·expConst+36(SB), Y7
	CMPQ DX, $0
	JEQ  sigmoid
	CMPQ DX, $1
	JEQ  silu
	CMPQ DX, $2
	JEQ  hardswish
	CMPQ DX, $3
	JEQ  tanh
	JMP  gelu

sigmoid:
	VMOVUPS (DI), Y0
	VXORPS ·actVec+0(SB), Y0, Y0
	CLAMPEXP
	EXP
	VADDPS Y7, Y3, Y3
	VDIVPS Y3, Y7, Y3
	VMOVUPS Y3, (DI)
	ADDQ $32, DI
	DECQ CX
	JNZ  sigmoid
	JMP  actdone

silu:
	VMOVUPS (DI), Y0
	VXORPS ·actVec+0(SB), Y0, Y0
	CLAMPEXP
	EXP
	VADDPS Y7, Y3, Y3
	VMOVUPS (DI), Y0
	VDIVPS Y3, Y0, Y3
	VMOVUPS Y3, (DI)
	ADDQ $32, DI
	DECQ CX
	JNZ  silu
	JMP  actdone

hardswish:
	VMOVUPS (DI), Y0
	VMOVUPS ·actVec+160(SB), Y1
	VFMADD132PS ·actVec+128(SB), Y1, Y0
	VMAXPS ·actVec+192(SB), Y0, Y0
	VMINPS Y7, Y0, Y0
	VMULPS (DI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	DECQ CX
	JNZ  hardswish
	JMP  actdone

tanh:
	VMOVUPS (DI), Y0
	VADDPS Y0, Y0, Y0
	CLAMPEXP
	EXP
	VADDPS Y7, Y3, Y3
	VADDPS Y7, Y7, Y1
	VDIVPS Y3, Y1, Y3
	VSUBPS Y3, Y7, Y3
	VMOVUPS Y3, (DI)
	ADDQ $32, DI
	DECQ CX
	JNZ  tanh
	JMP  actdone

gelu:
	VMOVUPS (DI), Y0
	VANDPS ·actVec+32(SB), Y0, Y0
	VMULPS ·actVec+288(SB), Y0, Y0
	VMINPS ·actVec+256(SB), Y0, Y0
	VMULPS Y0, Y0, Y0
	VXORPS ·actVec+0(SB), Y0, Y0
	EXP
	VMOVUPS (DI), Y0
	VANDPS ·actVec+32(SB), Y0, Y1
	VMULPS ·actVec+288(SB), Y1, Y2
	VMINPS ·actVec+256(SB), Y2, Y2
	VMULPS ·actVec+320(SB), Y2, Y4
	VADDPS Y7, Y4, Y4
	VDIVPS Y4, Y7, Y4
	VMOVUPS ·actVec+352(SB), Y5
	VFMADD213PS ·actVec+384(SB), Y4, Y5
	VFMADD213PS ·actVec+416(SB), Y4, Y5
	VFMADD213PS ·actVec+448(SB), Y4, Y5
	VFMADD213PS ·actVec+480(SB), Y4, Y5
	VMULPS Y4, Y5, Y5
	VMULPS Y3, Y5, Y5
	VSUBPS Y5, Y7, Y5
	VFMADD213PS Y0, Y1, Y5
	VMULPS ·actVec+160(SB), Y5, Y5
	VMOVUPS Y5, (DI)
	ADDQ $32, DI
	DECQ CX
	JNZ  gelu

actdone:
	VZEROUPPER
	RET

// func deinterleave2AVX2(even, odd, src *float32, n int)
// n is a multiple of 8: per 16 source floats, SHUFPS picks the even and
// odd ones of each 128-bit lane and PERMPD puts the lanes' halves in
// order.
TEXT ·deinterleave2AVX2(SB), NOSPLIT, $0-32
	MOVQ even+0(FP), DI
	MOVQ odd+8(FP), DX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	SHRQ $3, CX

deint:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VSHUFPS $0x88, Y1, Y0, Y2
	VSHUFPS $0xDD, Y1, Y0, Y3
	VPERMPD $0xD8, Y2, Y2
	VPERMPD $0xD8, Y3, Y3
	VMOVUPS Y2, (DI)
	VMOVUPS Y3, (DX)
	ADDQ $64, SI
	ADDQ $32, DI
	ADDQ $32, DX
	DECQ CX
	JNZ  deint
	VZEROUPPER
	RET

// func mulAVX2(dst, a, b *float32, n int)
TEXT ·mulAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	SHRQ $3, CX

mulloop:
	VMOVUPS (SI), Y0
	VMULPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ  mulloop
	VZEROUPPER
	RET

// func expShiftAVX2(dst, src *float32, n int, m float32)
// dst = e^max(src-m, -87), NaNs kept; n is a multiple of 8.
TEXT ·expShiftAVX2(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	VBROADCASTSS ·expConst+0(SB), Y8
	VBROADCASTSS ·expConst+4(SB), Y9
	VBROADCASTSS ·expConst+8(SB), Y10
	VBROADCASTSS ·expConst+12(SB), Y11
	VBROADCASTSS ·expConst+16(SB), Y12
	VBROADCASTSS ·expConst+20(SB), Y13
	VBROADCASTSS ·expConst+24(SB), Y14
	VBROADCASTSS ·expConst+28(SB), Y15
	VBROADCASTSS ·expConst+32(SB), Y6
	VBROADCASTSS ·expConst+36(SB), Y7

expshift:
	VMOVUPS (SI), Y0
	VBROADCASTSS m+24(FP), Y1
	VSUBPS Y1, Y0, Y0
	CLAMPEXP
	EXP
	VMOVUPS Y3, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  expshift
	VZEROUPPER
	RET

// func dotAVX2(a, b *float32, n int) float32
// n is a multiple of 8. Four accumulators over runs of 32 keep two FMAs
// a cycle in flight (one chain would wait out the FMA latency between
// them); runs of 8 finish the rest.
TEXT ·dotAVX2(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DX
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	SHRQ $3, CX

dot32:
	CMPQ CX, $4
	JLT  dot8
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VFMADD231PS (DX), Y4, Y0
	VFMADD231PS 32(DX), Y5, Y1
	VFMADD231PS 64(DX), Y6, Y2
	VFMADD231PS 96(DX), Y7, Y3
	ADDQ $128, SI
	ADDQ $128, DX
	SUBQ $4, CX
	JMP  dot32

dot8:
	TESTQ CX, CX
	JZ    dotdone
	VMOVUPS (SI), Y4
	VFMADD231PS (DX), Y4, Y0
	ADDQ $32, SI
	ADDQ $32, DX
	DECQ CX
	JMP  dot8

dotdone:
	VADDPS Y2, Y0, Y0
	VADDPS Y3, Y1, Y1
	VADDPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func clampAVX2(v *float32, n int, a, b, lo, hi float32)
// n is a multiple of 8. The value is MAXPS's and MINPS's last (Intel)
// operand, which they return when either is NaN.
TEXT ·clampAVX2(SB), NOSPLIT, $0-32
	MOVQ v+0(FP), DI
	MOVQ n+8(FP), CX
	VBROADCASTSS a+16(FP), Y4
	VBROADCASTSS b+20(FP), Y5
	VBROADCASTSS lo+24(FP), Y6
	VBROADCASTSS hi+28(FP), Y7
	SHRQ $3, CX

clamploop:
	VMOVUPS (DI), Y0
	VFMADD213PS Y5, Y4, Y0
	VMAXPS Y0, Y6, Y0
	VMINPS Y0, Y7, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	DECQ CX
	JNZ  clamploop
	VZEROUPPER
	RET
