//go:build amd64 && !purego

#include "textflag.h"

// func refDot32AVX512(acc *float64, vals *float64, offs *int32, m int, w *float32)
// For each tap t < m in order, acc[j] = acc[j] + vals[t]*w[offs[t]*32+j]
// for the 32 lanes j, the float32 weight widened exactly (VCVTPS2PD): a
// rounded multiply, then a rounded add (VMULPD, VADDPD; no FMA), so each
// lane is the scalar loop's sum bit for bit.
TEXT ·refDot32AVX512(SB), NOSPLIT, $0-40
	MOVQ acc+0(FP), DI
	MOVQ vals+8(FP), SI
	MOVQ offs+16(FP), DX
	MOVQ m+24(FP), CX
	MOVQ w+32(FP), BX
	VMOVUPD 0(DI), Z0
	VMOVUPD 64(DI), Z1
	VMOVUPD 128(DI), Z2
	VMOVUPD 192(DI), Z3
	TESTQ CX, CX
	JEQ  store

loop:
	MOVLQSX (DX), AX
	SHLQ    $7, AX
	VBROADCASTSD (SI), Z4
	VCVTPS2PD 0(BX)(AX*1), Z5
	VCVTPS2PD 32(BX)(AX*1), Z6
	VCVTPS2PD 64(BX)(AX*1), Z7
	VCVTPS2PD 96(BX)(AX*1), Z8
	VMULPD  Z5, Z4, Z5
	VMULPD  Z6, Z4, Z6
	VMULPD  Z7, Z4, Z7
	VMULPD  Z8, Z4, Z8
	VADDPD  Z5, Z0, Z0
	VADDPD  Z6, Z1, Z1
	VADDPD  Z7, Z2, Z2
	VADDPD  Z8, Z3, Z3
	ADDQ    $8, SI
	ADDQ    $4, DX
	DECQ    CX
	JNE     loop

store:
	VMOVUPD Z0, 0(DI)
	VMOVUPD Z1, 64(DI)
	VMOVUPD Z2, 128(DI)
	VMOVUPD Z3, 192(DI)
	VZEROUPPER
	RET

// func refDot32AVX(acc *float64, vals *float64, offs *int32, m int, w *float32)
// refDot32AVX512 with 4 float64 lanes a register: the same multiply, then
// add, per tap and lane, so the same bits.
TEXT ·refDot32AVX(SB), NOSPLIT, $0-40
	MOVQ acc+0(FP), DI
	MOVQ vals+8(FP), SI
	MOVQ offs+16(FP), DX
	MOVQ m+24(FP), CX
	MOVQ w+32(FP), BX
	VMOVUPD 0(DI), Y0
	VMOVUPD 32(DI), Y1
	VMOVUPD 64(DI), Y2
	VMOVUPD 96(DI), Y3
	VMOVUPD 128(DI), Y4
	VMOVUPD 160(DI), Y5
	VMOVUPD 192(DI), Y6
	VMOVUPD 224(DI), Y7
	TESTQ CX, CX
	JEQ  store2

loop2:
	MOVLQSX (DX), AX
	SHLQ    $7, AX
	VBROADCASTSD (SI), Y8
	VCVTPS2PD 0(BX)(AX*1), Y9
	VCVTPS2PD 16(BX)(AX*1), Y10
	VCVTPS2PD 32(BX)(AX*1), Y11
	VCVTPS2PD 48(BX)(AX*1), Y12
	VMULPD  Y9, Y8, Y9
	VMULPD  Y10, Y8, Y10
	VMULPD  Y11, Y8, Y11
	VMULPD  Y12, Y8, Y12
	VADDPD  Y9, Y0, Y0
	VADDPD  Y10, Y1, Y1
	VADDPD  Y11, Y2, Y2
	VADDPD  Y12, Y3, Y3
	VCVTPS2PD 64(BX)(AX*1), Y9
	VCVTPS2PD 80(BX)(AX*1), Y10
	VCVTPS2PD 96(BX)(AX*1), Y11
	VCVTPS2PD 112(BX)(AX*1), Y12
	VMULPD  Y9, Y8, Y9
	VMULPD  Y10, Y8, Y10
	VMULPD  Y11, Y8, Y11
	VMULPD  Y12, Y8, Y12
	VADDPD  Y9, Y4, Y4
	VADDPD  Y10, Y5, Y5
	VADDPD  Y11, Y6, Y6
	VADDPD  Y12, Y7, Y7
	ADDQ    $8, SI
	ADDQ    $4, DX
	DECQ    CX
	JNE     loop2

store2:
	VMOVUPD Y0, 0(DI)
	VMOVUPD Y1, 32(DI)
	VMOVUPD Y2, 64(DI)
	VMOVUPD Y3, 96(DI)
	VMOVUPD Y4, 128(DI)
	VMOVUPD Y5, 160(DI)
	VMOVUPD Y6, 192(DI)
	VMOVUPD Y7, 224(DI)
	VZEROUPPER
	RET
