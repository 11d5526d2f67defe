//go:build amd64 && !purego

#include "textflag.h"

// MAXNAN folds v into m keeping NaNs of both: VMAXPS returns its second
// source (v) when either is NaN, and the blend restores a NaN already in
// m. t is clobbered.
#define MAXNAN(v, m, t) \
	VCMPPS $3, m, m, t; \
	VMAXPS v, m, v; \
	VBLENDVPS t, m, v, m

// func maxWin1AVX2(dst, src *float32, n, k, dil int)
// n is a multiple of 8: eight outputs at a time, one unaligned load per
// tap.
TEXT ·maxWin1AVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ k+24(FP), R8
	MOVQ dil+32(FP), R9
	SHLQ $2, R9
	SHRQ $3, CX

w1block:
	VMOVUPS (SI), Y1
	MOVQ    SI, AX
	MOVQ    R8, BX
	DECQ    BX
	JZ      w1store

w1tap:
	ADDQ    R9, AX
	VMOVUPS (AX), Y0
	MAXNAN(Y0, Y1, Y3)
	DECQ    BX
	JNZ     w1tap

w1store:
	VMOVUPS Y1, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     w1block
	VZEROUPPER
	RET

// func maxWin2AVX2(dst, src *float32, n, k, dil int)
// n is a multiple of 8. Per eight outputs and tap, the 16 floats from the
// tap's first column hold its eight values at even positions: VSHUFPS
// $0x88 gathers them in the order 0 2 8 10 | 4 6 12 14, the same for
// every tap, so one VPERMPD puts the maxima in order at the end. With
// dil 1 the odd positions ($0xDD) are the next tap's values, so a pair of
// taps shares its loads.
TEXT ·maxWin2AVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ k+24(FP), R8
	MOVQ dil+32(FP), R9
	SHLQ $2, R9
	SHRQ $3, CX
	CMPQ R9, $4
	JEQ  w2pairs

w2block:
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VSHUFPS $0x88, Y5, Y4, Y1
	MOVQ    SI, AX
	MOVQ    R8, BX
	DECQ    BX
	JZ      w2store

w2tap:
	ADDQ    R9, AX
	VMOVUPS (AX), Y4
	VMOVUPS 32(AX), Y5
	VSHUFPS $0x88, Y5, Y4, Y0
	MAXNAN(Y0, Y1, Y3)
	DECQ    BX
	JNZ     w2tap

w2store:
	VPERMPD $0xD8, Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ    $64, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     w2block
	VZEROUPPER
	RET

w2pairs:
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VSHUFPS $0x88, Y5, Y4, Y1
	MOVQ    SI, AX
	MOVQ    R8, BX
	DECQ    BX
	JZ      w2pstore
	VSHUFPS $0xDD, Y5, Y4, Y0
	MAXNAN(Y0, Y1, Y3)
	DECQ    BX
	JZ      w2pstore

w2ptap:
	ADDQ    $8, AX
	VMOVUPS (AX), Y4
	VMOVUPS 32(AX), Y5
	VSHUFPS $0x88, Y5, Y4, Y0
	MAXNAN(Y0, Y1, Y3)
	DECQ    BX
	JZ      w2pstore
	VSHUFPS $0xDD, Y5, Y4, Y0
	MAXNAN(Y0, Y1, Y3)
	DECQ    BX
	JNZ     w2ptap

w2pstore:
	VPERMPD $0xD8, Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ    $64, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     w2pairs
	VZEROUPPER
	RET

// func maxRowsAVX2(dst, src *float32, n, rows, stride int)
// n is a multiple of 8; rows >= 1; stride is in bytes. Eight columns at a
// time, all rows folded in registers: each row is read once and dst
// written once.
TEXT ·maxRowsAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ rows+24(FP), R8
	MOVQ stride+32(FP), R9
	SHRQ $3, CX

mrblock:
	VMOVUPS (SI), Y1
	MOVQ    SI, AX
	MOVQ    R8, BX
	DECQ    BX
	JZ      mrstore

mrrow:
	ADDQ    R9, AX
	VMOVUPS (AX), Y0
	MAXNAN(Y0, Y1, Y3)
	DECQ    BX
	JNZ     mrrow

mrstore:
	VMOVUPS Y1, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     mrblock
	VZEROUPPER
	RET
