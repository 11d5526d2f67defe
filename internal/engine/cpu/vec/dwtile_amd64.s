//go:build amd64 && !purego

#include "textflag.h"

// DWTile's loops (see dwtile.go). Registers: DI out, SI the input row's
// first pixel, DX the current output's first input pixel, CX outputs left
// in the row, R8 offs, R9 w, R10 the end of w, R11 the tap's offset,
// BX the tap's weights, R12 the row step and R13 the column step in
// bytes, R14 three column steps; oh counts down in its argument slot.
// Block of 4 outputs: each tap's weights are loaded once for 4 FMAs.

// func dwTileAVX2(out, in, w, bias *float32, offs *int, taps, oh, ow, rs, cs int)
TEXT ·dwTileAVX2(SB), NOSPLIT, $0-80
	MOVQ out+0(FP), DI
	MOVQ in+8(FP), SI
	MOVQ w+16(FP), R9
	MOVQ bias+24(FP), AX
	VMOVUPS (AX), Y14
	VMOVUPS 32(AX), Y15
	MOVQ offs+32(FP), R8
	MOVQ taps+40(FP), R10
	SHLQ $6, R10
	ADDQ R9, R10
	MOVQ rs+64(FP), R12
	SHLQ $6, R12
	MOVQ cs+72(FP), R13
	SHLQ $6, R13
	LEAQ (R13)(R13*2), R14

rowY:
	MOVQ ow+56(FP), CX
	MOVQ SI, DX

blk4Y:
	CMPQ CX, $4
	JLT  blk1Y
	VMOVAPS Y14, Y0
	VMOVAPS Y15, Y1
	VMOVAPS Y14, Y2
	VMOVAPS Y15, Y3
	VMOVAPS Y14, Y4
	VMOVAPS Y15, Y5
	VMOVAPS Y14, Y6
	VMOVAPS Y15, Y7
	MOVQ R9, BX
	MOVQ R8, R11

tap4Y:
	MOVQ (R11), AX
	SHLQ $6, AX
	ADDQ DX, AX
	VMOVUPS (BX), Y8
	VMOVUPS 32(BX), Y9
	VFMADD231PS (AX), Y8, Y0
	VFMADD231PS 32(AX), Y9, Y1
	VFMADD231PS (AX)(R13*1), Y8, Y2
	VFMADD231PS 32(AX)(R13*1), Y9, Y3
	VFMADD231PS (AX)(R13*2), Y8, Y4
	VFMADD231PS 32(AX)(R13*2), Y9, Y5
	VFMADD231PS (AX)(R14*1), Y8, Y6
	VFMADD231PS 32(AX)(R14*1), Y9, Y7
	ADDQ $64, BX
	ADDQ $8, R11
	CMPQ BX, R10
	JLT  tap4Y
	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	VMOVUPS Y4, 128(DI)
	VMOVUPS Y5, 160(DI)
	VMOVUPS Y6, 192(DI)
	VMOVUPS Y7, 224(DI)
	ADDQ $256, DI
	LEAQ (DX)(R13*4), DX
	SUBQ $4, CX
	JMP  blk4Y

blk1Y:
	TESTQ CX, CX
	JEQ  rowdoneY
	VMOVAPS Y14, Y0
	VMOVAPS Y15, Y1
	MOVQ R9, BX
	MOVQ R8, R11

tap1Y:
	MOVQ (R11), AX
	SHLQ $6, AX
	ADDQ DX, AX
	VMOVUPS (BX), Y8
	VMOVUPS 32(BX), Y9
	VFMADD231PS (AX), Y8, Y0
	VFMADD231PS 32(AX), Y9, Y1
	ADDQ $64, BX
	ADDQ $8, R11
	CMPQ BX, R10
	JLT  tap1Y
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $64, DI
	ADDQ R13, DX
	DECQ CX
	JMP  blk1Y

rowdoneY:
	ADDQ R12, SI
	DECQ oh+48(FP)
	JNZ  rowY
	VZEROUPPER
	RET

// func dwTileAVX512(out, in, w, bias *float32, offs *int, taps, oh, ow, rs, cs int)
TEXT ·dwTileAVX512(SB), NOSPLIT, $0-80
	MOVQ out+0(FP), DI
	MOVQ in+8(FP), SI
	MOVQ w+16(FP), R9
	MOVQ bias+24(FP), AX
	VMOVUPS (AX), Z15
	MOVQ offs+32(FP), R8
	MOVQ taps+40(FP), R10
	SHLQ $6, R10
	ADDQ R9, R10
	MOVQ rs+64(FP), R12
	SHLQ $6, R12
	MOVQ cs+72(FP), R13
	SHLQ $6, R13
	LEAQ (R13)(R13*2), R14

rowZ:
	MOVQ ow+56(FP), CX
	MOVQ SI, DX

blk4Z:
	CMPQ CX, $4
	JLT  blk1Z
	VMOVAPS Z15, Z0
	VMOVAPS Z15, Z1
	VMOVAPS Z15, Z2
	VMOVAPS Z15, Z3
	MOVQ R9, BX
	MOVQ R8, R11

tap4Z:
	MOVQ (R11), AX
	SHLQ $6, AX
	ADDQ DX, AX
	VMOVUPS (BX), Z4
	VFMADD231PS (AX), Z4, Z0
	VFMADD231PS (AX)(R13*1), Z4, Z1
	VFMADD231PS (AX)(R13*2), Z4, Z2
	VFMADD231PS (AX)(R14*1), Z4, Z3
	ADDQ $64, BX
	ADDQ $8, R11
	CMPQ BX, R10
	JLT  tap4Z
	VMOVUPS Z0, 0(DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	ADDQ $256, DI
	LEAQ (DX)(R13*4), DX
	SUBQ $4, CX
	JMP  blk4Z

blk1Z:
	TESTQ CX, CX
	JEQ  rowdoneZ
	VMOVAPS Z15, Z0
	MOVQ R9, BX
	MOVQ R8, R11

tap1Z:
	MOVQ (R11), AX
	SHLQ $6, AX
	ADDQ DX, AX
	VMOVUPS (BX), Z4
	VFMADD231PS (AX), Z4, Z0
	ADDQ $64, BX
	ADDQ $8, R11
	CMPQ BX, R10
	JLT  tap1Z
	VMOVUPS Z0, (DI)
	ADDQ $64, DI
	ADDQ R13, DX
	DECQ CX
	JMP  blk1Z

rowdoneZ:
	ADDQ R12, SI
	DECQ oh+48(FP)
	JNZ  rowZ
	VZEROUPPER
	RET
