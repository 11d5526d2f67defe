//go:build amd64 && !purego

#include "textflag.h"

// func packMaskedAVX2(dst, base *float32, lane0, kc int, offs, mask, masks *int32)
TEXT ·packMaskedAVX2(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ base+8(FP), SI
	MOVQ lane0+16(FP), AX
	LEAQ (SI)(AX*4), SI
	MOVQ kc+24(FP), CX
	MOVQ offs+32(FP), R8
	MOVQ mask+40(FP), R9
	MOVQ masks+48(FP), R10
loop:
	MOVLQSX (R8), AX
	MOVLQSX (R9), BX
	SHLQ $6, BX
	VMOVDQU (R10)(BX*1), Y2
	VMOVDQU 32(R10)(BX*1), Y3
	VMASKMOVPS (SI)(AX*4), Y2, Y0
	VMASKMOVPS 32(SI)(AX*4), Y3, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $4, R8
	ADDQ $4, R9
	ADDQ $64, DI
	DECQ CX
	JNZ loop
	VZEROUPPER
	RET

// func packGatherAVX2(dst, base *float32, kc int, offs, mask, masks, lanes *int32)
TEXT ·packGatherAVX2(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ base+8(FP), SI
	MOVQ kc+16(FP), CX
	MOVQ offs+24(FP), R8
	MOVQ mask+32(FP), R9
	MOVQ masks+40(FP), R10
	MOVQ lanes+48(FP), R11
	VMOVDQU (R11), Y4
	VMOVDQU 32(R11), Y5
loop:
	MOVLQSX (R8), AX
	LEAQ (SI)(AX*4), DX
	MOVLQSX (R9), BX
	SHLQ $6, BX
	VMOVDQU (R10)(BX*1), Y2
	VMOVDQU 32(R10)(BX*1), Y3
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VGATHERDPS Y2, (DX)(Y4*4), Y0
	VGATHERDPS Y3, (DX)(Y5*4), Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $4, R8
	ADDQ $4, R9
	ADDQ $64, DI
	DECQ CX
	JNZ loop
	VZEROUPPER
	RET

// func packMaskedAVX512(dst, base *float32, lane0, kc int, offs, mask, masks *int32)
//
// packMaskedAVX2 with one zmm load per row under a k-mask taken from the
// row's mask vector (VPMOVD2M: lane l reads when masks[l] is -1).
TEXT ·packMaskedAVX512(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ base+8(FP), SI
	MOVQ lane0+16(FP), AX
	LEAQ (SI)(AX*4), SI
	MOVQ kc+24(FP), CX
	MOVQ offs+32(FP), R8
	MOVQ mask+40(FP), R9
	MOVQ masks+48(FP), R10
loop512:
	MOVLQSX (R8), AX
	MOVLQSX (R9), BX
	SHLQ $6, BX
	VMOVDQU32 (R10)(BX*1), Z2
	VPMOVD2M Z2, K1
	VMOVUPS.Z (SI)(AX*4), K1, Z0
	VMOVUPS Z0, (DI)
	ADDQ $4, R8
	ADDQ $4, R9
	ADDQ $64, DI
	DECQ CX
	JNZ loop512
	VZEROUPPER
	RET
