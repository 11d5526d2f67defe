// The AVX-512 exponential shared by act_avx512_amd64.s and
// softmax_avx512_amd64.s (one copy, so that both give the same bits).

// EXPCONSTZ broadcasts EXPZ's constants (expConst) into Z6-Z15.
#define EXPCONSTZ \
	VBROADCASTSS ·expConst+0(SB), Z8; \
	VBROADCASTSS ·expConst+4(SB), Z9; \
	VBROADCASTSS ·expConst+8(SB), Z10; \
	VBROADCASTSS ·expConst+12(SB), Z11; \
	VBROADCASTSS ·expConst+16(SB), Z12; \
	VBROADCASTSS ·expConst+20(SB), Z13; \
	VBROADCASTSS ·expConst+24(SB), Z14; \
	VBROADCASTSS ·expConst+28(SB), Z15; \
	VBROADCASTSS ·expConst+32(SB), Z6; \
	VBROADCASTSS ·expConst+36(SB), Z7

// EXPZ sets Z3 = e^Z0 as EXP does, with its constants in Z6-Z15;
// clobbers Z1, Z2, Z4, Z5 and keeps Z0.
#define EXPZ \
	VMOVAPS Z15, Z1; \
	VFMADD231PS Z8, Z0, Z1; \
	VSUBPS Z15, Z1, Z4; \
	VMOVAPS Z0, Z2; \
	VFNMADD231PS Z9, Z4, Z2; \
	VFNMADD231PS Z10, Z4, Z2; \
	VMOVAPS Z11, Z3; \
	VFMADD213PS Z12, Z2, Z3; \
	VFMADD213PS Z13, Z2, Z3; \
	VFMADD213PS Z14, Z2, Z3; \
	VMULPS Z2, Z2, Z4; \
	VADDPS Z7, Z2, Z5; \
	VFMADD213PS Z5, Z4, Z3; \
	VPSLLD $23, Z1, Z1; \
	VMULPS Z1, Z3, Z3

// CLAMPEXPZ clamps Z0 to [-87, 88] keeping NaNs; clobbers Z1.
#define CLAMPEXPZ \
	VBROADCASTSS ·actVec+64(SB), Z1; \
	VMAXPS Z0, Z1, Z0; \
	VBROADCASTSS ·actVec+96(SB), Z1; \
	VMINPS Z0, Z1, Z0
