//go:build ignore

// gen_transform writes transform_amd64.s: the AVX-512 input and output
// transforms of Winograd F(4x4, 3x3), one tile per lane, read and written
// with contiguous masked loads and stores. Run it with
// `go generate` in this directory (with gen_asm.go).
package main

import "fmt"

func main() {
	writeAsm("gen_transform.go", "transform_amd64.s", func(p emitter) {
		inputRows(p)
		inputCols(p)
		outputCols(p)
		outputRows(p)
	})
}

func z(i int) string { return fmt.Sprintf("Z%d", i) }

func broadcast(p func(string, ...any), bits uint32, reg string) {
	p("\tMOVL $0x%08x, AX", bits)
	p("\tVPBROADCASTD AX, %s", reg)
}

// inputRow applies Bt to Z0..Z5 into Z6..Z11 (Z24 = 4, Z25 = 5, Z26 = 2).
func inputRow(p func(string, ...any)) {
	p("\tVMOVAPS Z4, Z12")
	p("\tVFNMADD231PS Z24, Z2, Z12") // t1 = d4 - 4 d2
	p("\tVMOVAPS Z3, Z13")
	p("\tVFNMADD231PS Z24, Z1, Z13") // t2 = d3 - 4 d1
	p("\tVADDPS Z13, Z12, Z7")       // r1 = t1 + t2
	p("\tVSUBPS Z13, Z12, Z8")       // r2 = t1 - t2
	p("\tVSUBPS Z2, Z4, Z14")        // t3 = d4 - d2
	p("\tVSUBPS Z1, Z3, Z15")        // d3 - d1
	p("\tVMULPS Z26, Z15, Z15")      // t4 = 2 (d3 - d1)
	p("\tVADDPS Z15, Z14, Z9")       // r3 = t3 + t4
	p("\tVSUBPS Z15, Z14, Z10")      // r4 = t3 - t4
	p("\tVMOVAPS Z4, Z6")
	p("\tVFMADD231PS Z24, Z0, Z6")  // d4 + 4 d0
	p("\tVFNMADD231PS Z25, Z2, Z6") // r0 = ... - 5 d2
	p("\tVMOVAPS Z5, Z11")
	p("\tVFMADD231PS Z24, Z1, Z11")  // d5 + 4 d1
	p("\tVFNMADD231PS Z25, Z3, Z11") // r5 = ... - 5 d3
}

// outputRow applies At to Z0..Z5 into Z6..Z9 (Z24 = 4, Z26 = 2, Z27 = 8).
func outputRow(p func(string, ...any)) {
	p("\tVADDPS Z2, Z1, Z12") // a = m1 + m2
	p("\tVSUBPS Z2, Z1, Z13") // b = m1 - m2
	p("\tVADDPS Z4, Z3, Z14") // c = m3 + m4
	p("\tVSUBPS Z4, Z3, Z15") // d = m3 - m4
	p("\tVADDPS Z12, Z0, Z6")
	p("\tVADDPS Z14, Z6, Z6") // o0 = m0 + a + c
	p("\tVMOVAPS Z13, Z7")
	p("\tVFMADD231PS Z26, Z15, Z7") // o1 = b + 2 d
	p("\tVMOVAPS Z12, Z8")
	p("\tVFMADD231PS Z24, Z14, Z8") // o2 = a + 4 c
	p("\tVADDPS Z13, Z5, Z9")
	p("\tVFMADD231PS Z27, Z15, Z9") // o3 = b + 8 d + m5
}

// inputRows applies Bt along the rows of one input row for up to 16
// consecutive tiles of a tile row (their columns read with contiguous
// masked loads and split by permutes into the 6 columns of each tile's
// patch), for nc channels.
func inputRows(p func(string, ...any)) {
	p("")
	p("// func inRowsZ(src *float32, off, plane, nc int, masks *[5]uint16, dst *float32, doff, ld, lanes int, tab *[6][16]int32)")
	p("TEXT ·inRowsZ(SB), NOSPLIT, $0-80")
	p("\tMOVQ src+0(FP), SI")
	p("\tMOVQ off+8(FP), AX")
	p("\tLEAQ (SI)(AX*4), SI")
	p("\tMOVQ plane+16(FP), R8")
	p("\tSHLQ $2, R8")
	p("\tMOVQ nc+24(FP), CX")
	p("\tMOVQ masks+32(FP), BX")
	for v := range 5 {
		p("\tKMOVW %d(BX), K%d", 2*v, 1+v)
	}
	p("\tMOVQ dst+40(FP), DI")
	p("\tMOVQ doff+48(FP), AX")
	p("\tLEAQ (DI)(AX*4), DI")
	p("\tMOVQ ld+56(FP), R9")
	p("\tSHLQ $2, R9")
	p("\tIMUL3Q $36, R9, R10")
	p("\tMOVQ lanes+64(FP), AX")
	p("\tKMOVW AX, K6")
	p("\tMOVQ tab+72(FP), DX")
	for i := range 6 {
		p("\tVMOVDQU32 %d(DX), Z%d", 64*i, 16+i)
	}
	broadcast(p, four, "Z24")
	broadcast(p, five, "Z25")
	broadcast(p, two, "Z26")
	p("rowloop:")
	for v := range 5 {
		p("\tVMOVUPS.Z %d(SI), K%d, Z%d", 64*v, 1+v, 27+v)
	}
	for x := range 4 {
		p("\tVMOVAPS Z%d, Z12", 16+x)
		p("\tVPERMI2PS Z28, Z27, Z12")
		p("\tVMOVAPS Z%d, Z13", 16+x)
		p("\tVPERMI2PS Z30, Z29, Z13")
		p("\tVSHUFF32X4 $0x44, Z13, Z12, Z%d", x)
	}
	p("\tVMOVAPS Z20, Z4")
	p("\tVPERMI2PS Z31, Z0, Z4")
	p("\tVMOVAPS Z21, Z5")
	p("\tVPERMI2PS Z31, Z1, Z5")
	inputRow(p)
	for j := range 6 {
		if j == 0 {
			p("\tVMOVUPS Z6, K6, (DI)")
			continue
		}
		p("\tIMUL3Q $%d, R9, AX", j)
		p("\tVMOVUPS Z%d, K6, (DI)(AX*1)", 6+j)
	}
	p("\tADDQ R8, SI")
	p("\tADDQ R10, DI")
	p("\tDECQ CX")
	p("\tJNZ rowloop")
	p("\tVZEROUPPER")
	p("\tRET")
}

// inputCols applies Bt along the columns of the row-transformed patches of
// a panel of 16 tiles (contiguous loads), for nc channels, writing the
// GEMM's B panels.
func inputCols(p func(string, ...any)) {
	p("")
	p("// func inColsZ(r *float32, ld, nc int, v *float32, xs int)")
	p("TEXT ·inColsZ(SB), NOSPLIT, $0-40")
	p("\tMOVQ r+0(FP), SI")
	p("\tMOVQ ld+8(FP), R9")
	p("\tSHLQ $2, R9")
	p("\tIMUL3Q $36, R9, R10")
	p("\tMOVQ nc+16(FP), CX")
	p("\tMOVQ v+24(FP), DI")
	p("\tMOVQ xs+32(FP), R8")
	p("\tSHLQ $2, R8")
	broadcast(p, four, "Z24")
	broadcast(p, five, "Z25")
	broadcast(p, two, "Z26")
	p("colloop:")
	for j := range 6 {
		for y := range 6 {
			q := y*6 + j
			if q == 0 {
				p("\tVMOVUPS (SI), Z0")
				continue
			}
			p("\tIMUL3Q $%d, R9, AX", q)
			p("\tVMOVUPS (SI)(AX*1), Z%d", y)
		}
		inputRow(p)
		for i := range 6 {
			pt := i*6 + j
			if pt == 0 {
				p("\tVMOVUPS Z6, (DI)")
				continue
			}
			p("\tIMUL3Q $%d, R8, AX", pt)
			p("\tVMOVUPS Z%d, (DI)(AX*1)", 6+i)
		}
	}
	p("\tADDQ R10, SI")
	p("\tADDQ $64, DI")
	p("\tDECQ CX")
	p("\tJNZ colloop")
	p("\tVZEROUPPER")
	p("\tRET")
}

// outputCols applies At along the columns and then the rows of a panel's
// GEMM outputs for nk output channels, writing the 16 outputs of each tile
// (row r, column q) as rows r*4+q of ld floats per channel, 16*ld apart.
func outputCols(p func(string, ...any)) {
	p("")
	p("// func outColsZ(m *float32, xs, ld, nk int, y *float32, tmp *[36][16]float32)")
	p("TEXT ·outColsZ(SB), NOSPLIT, $0-48")
	p("\tMOVQ m+0(FP), SI")
	p("\tMOVQ xs+8(FP), R8")
	p("\tSHLQ $2, R8")
	p("\tMOVQ ld+16(FP), R13")
	p("\tSHLQ $2, R13")
	p("\tMOVQ R13, R10")
	p("\tSHLQ $4, R10")
	p("\tMOVQ nk+24(FP), CX")
	p("\tMOVQ y+32(FP), DX")
	p("\tMOVQ tmp+40(FP), DI")
	broadcast(p, four, "Z24")
	broadcast(p, two, "Z26")
	broadcast(p, eight, "Z27")
	p("ocloop:")
	for j := range 6 {
		for i := range 6 {
			pt := i*6 + j
			if pt == 0 {
				p("\tVMOVUPS (SI), Z0")
				continue
			}
			p("\tIMUL3Q $%d, R8, AX", pt)
			p("\tVMOVUPS (SI)(AX*1), %s", z(i))
		}
		outputRow(p)
		for r := range 4 {
			p("\tVMOVUPS %s, %d(DI)", z(6+r), 64*(r*6+j))
		}
	}
	for r := range 4 {
		for x := range 6 {
			p("\tVMOVUPS %d(DI), %s", 64*(r*6+x), z(x))
		}
		outputRow(p)
		for q := range 4 {
			if r == 0 && q == 0 {
				p("\tVMOVUPS Z6, (DX)")
				continue
			}
			p("\tIMUL3Q $%d, R13, AX", r*4+q)
			p("\tVMOVUPS %s, (DX)(AX*1)", z(6+q))
		}
	}
	p("\tADDQ R13, SI")
	p("\tADDQ R10, DX")
	p("\tDECQ CX")
	p("\tJNZ ocloop")
	p("\tVZEROUPPER")
	p("\tRET")
}

// outputRows interleaves the 4 output columns of up to 16 consecutive
// tiles of a tile row into 64 contiguous output values of one output row,
// adds the bias and the residual, applies ReLU and stores them under the
// column masks, for nk output channels.
func outputRows(p func(string, ...any)) {
	p("")
	p("// func outRowsZ(y *float32, ld, nk, lanes int, dst *float32, doff int, res *float32, plane int, masks *[4]uint16, bias *float32, flags int, tab *[4][16]int32)")
	p("TEXT ·outRowsZ(SB), NOSPLIT, $0-96")
	p("\tMOVQ y+0(FP), SI")
	p("\tMOVQ ld+8(FP), R13")
	p("\tSHLQ $2, R13")
	p("\tMOVQ R13, R10")
	p("\tSHLQ $4, R10")
	p("\tMOVQ nk+16(FP), CX")
	p("\tMOVQ lanes+24(FP), AX")
	p("\tKMOVW AX, K5")
	p("\tMOVQ doff+40(FP), AX")
	p("\tMOVQ dst+32(FP), DX")
	p("\tLEAQ (DX)(AX*4), DX")
	p("\tMOVQ res+48(FP), R11")
	p("\tLEAQ (R11)(AX*4), R11")
	p("\tMOVQ plane+56(FP), R14")
	p("\tSHLQ $2, R14")
	p("\tMOVQ masks+64(FP), BX")
	for v := range 4 {
		p("\tKMOVW %d(BX), K%d", 2*v, 1+v)
	}
	p("\tMOVQ bias+72(FP), BX")
	p("\tMOVQ flags+80(FP), R9")
	p("\tMOVQ tab+88(FP), AX")
	for i := range 4 {
		p("\tVMOVDQU32 %d(AX), Z%d", 64*i, 16+i)
	}
	p("\tVPXORD Z29, Z29, Z29")
	p("\tVPXORD Z28, Z28, Z28")
	p("orloop:")
	p("\tVMOVUPS.Z (SI), K5, Z0")
	p("\tVMOVUPS.Z (SI)(R13*1), K5, Z1")
	p("\tLEAQ (SI)(R13*2), AX")
	p("\tVMOVUPS.Z (AX), K5, Z2")
	p("\tVMOVUPS.Z (AX)(R13*1), K5, Z3")
	// Pairs of columns interleaved (tiles 0-7 and 8-15), then the pairs.
	p("\tVMOVAPS Z16, Z4")
	p("\tVPERMI2PS Z1, Z0, Z4")
	p("\tVMOVAPS Z17, Z5")
	p("\tVPERMI2PS Z1, Z0, Z5")
	p("\tVMOVAPS Z16, Z6")
	p("\tVPERMI2PS Z3, Z2, Z6")
	p("\tVMOVAPS Z17, Z7")
	p("\tVPERMI2PS Z3, Z2, Z7")
	p("\tVMOVAPS Z18, Z8")
	p("\tVPERMI2PS Z6, Z4, Z8")
	p("\tVMOVAPS Z19, Z9")
	p("\tVPERMI2PS Z6, Z4, Z9")
	p("\tVMOVAPS Z18, Z10")
	p("\tVPERMI2PS Z7, Z5, Z10")
	p("\tVMOVAPS Z19, Z11")
	p("\tVPERMI2PS Z7, Z5, Z11")
	p("\tTESTQ $1, R9")
	p("\tJZ orbias")
	p("\tVBROADCASTSS (BX), Z28")
	p("orbias:")
	for v := range 4 {
		acc := z(8 + v)
		p("\tVADDPS Z28, %s, %s", acc, acc)
		p("\tTESTQ $2, R9")
		p("\tJZ orres%d", v)
		p("\tVMOVUPS.Z %d(R11), K%d, Z12", 64*v, 1+v)
		p("\tVADDPS Z12, %s, %s", acc, acc)
		p("orres%d:", v)
		p("\tTESTQ $4, R9")
		p("\tJZ orrelu%d", v)
		p("\tVMAXPS %s, Z29, %s", acc, acc)
		p("orrelu%d:", v)
		p("\tVMOVUPS %s, K%d, %d(DX)", acc, 1+v, 64*v)
	}
	p("\tADDQ R10, SI")
	p("\tADDQ R14, DX")
	p("\tADDQ R14, R11")
	p("\tADDQ $4, BX")
	p("\tDECQ CX")
	p("\tJNZ orloop")
	p("\tVZEROUPPER")
	p("\tRET")
}
