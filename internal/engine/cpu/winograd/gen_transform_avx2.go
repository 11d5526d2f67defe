//go:build ignore

// gen_transform_avx2 writes transform_avx2_amd64.s: the AVX2/FMA input and
// output transforms of Winograd F(4x4, 3x3), the same four passes as
// gen_transform.go's AVX-512 ones and the same arithmetic in the same
// order, for CPUs without AVX-512. A panel's 16 tiles are two 8-lane
// halves; the stride-4 columns of a row of tiles are split (and joined on
// the way out) by 4x4 transposes within 128-bit lanes, and the bit masks
// the callers pass are widened to vector masks for VMASKMOVPS. Run it with
// `go generate` in this directory (with gen_asm.go).
package main

import "fmt"

func main() {
	writeAsm("gen_transform_avx2.go", "transform_avx2_amd64.s", func(p emitter) {
		data(p)
		inputRows(p)
		inputCols(p)
		outputCols(p)
		outputRows(p)
	})
}

// data defines the constant vectors: the transforms' factors, the lane
// bits that widen a 16-bit mask (lanes 0-7, then 8-15) and the permutes
// that shift a vector down by one lane (lane 7 taking lane 0 or 1 of a
// second vector).
func data(p emitter) {
	vec := func(name string, v [8]uint32) {
		p("")
		for i, x := range v {
			p("DATA %s<>+%d(SB)/4, $0x%08x", name, 4*i, x)
		}
		p("GLOBL %s<>(SB), RODATA|NOPTR, $32", name)
	}
	splat := func(x uint32) (v [8]uint32) {
		for i := range v {
			v[i] = x
		}
		return v
	}
	vec("four", splat(four))
	vec("five", splat(five))
	vec("two", splat(two))
	vec("eight", splat(eight))
	var lo, hi, rot1, rot2 [8]uint32
	for i := range 8 {
		lo[i], hi[i] = 1<<i, 1<<(8+i)
		rot1[i], rot2[i] = uint32((i+1)%8), uint32((i+2)%8)
	}
	vec("bitslo", lo)
	vec("bitshi", hi)
	vec("rot1", rot1)
	vec("rot2", rot2)
}

func y(i int) string { return fmt.Sprintf("Y%d", i) }

// widen writes the vector masks of the 16-bit mask at src (lanes 0-7 at
// dst, 8-15 at dst+32), through Y12 and Y13. half says only lanes 0-7 are
// needed.
func widen(p emitter, src string, dst int, half bool) {
	p("\tVPBROADCASTW %s, Y12", src)
	p("\tVPAND bitslo<>(SB), Y12, Y13")
	p("\tVPCMPEQD bitslo<>(SB), Y13, Y13")
	p("\tVMOVUPS Y13, %d(SP)", dst)
	if half {
		return
	}
	p("\tVPAND bitshi<>(SB), Y12, Y13")
	p("\tVPCMPEQD bitshi<>(SB), Y13, Y13")
	p("\tVMOVUPS Y13, %d(SP)", dst+32)
}

// inputRow applies Bt to Y0..Y5 into Y6..Y11, as gen_transform.go's
// inputRow does, reusing Y0 and Y5 once read: c4, c5 and c2 are the
// factors' operands (registers or memory).
func inputRow(p emitter, c4, c5, c2 string) {
	p("\tVMOVAPS Y4, Y6")
	p("\tVFMADD231PS %s, Y0, Y6", c4)  // d4 + 4 d0
	p("\tVFNMADD231PS %s, Y2, Y6", c5) // r0 = ... - 5 d2
	p("\tVMOVAPS Y5, Y11")
	p("\tVFMADD231PS %s, Y1, Y11", c4)  // d5 + 4 d1
	p("\tVFNMADD231PS %s, Y3, Y11", c5) // r5 = ... - 5 d3
	p("\tVMOVAPS Y4, Y0")
	p("\tVFNMADD231PS %s, Y2, Y0", c4) // t1 = d4 - 4 d2
	p("\tVMOVAPS Y3, Y5")
	p("\tVFNMADD231PS %s, Y1, Y5", c4) // t2 = d3 - 4 d1
	p("\tVADDPS Y5, Y0, Y7")           // r1 = t1 + t2
	p("\tVSUBPS Y5, Y0, Y8")           // r2 = t1 - t2
	p("\tVSUBPS Y2, Y4, Y0")           // t3 = d4 - d2
	p("\tVSUBPS Y1, Y3, Y5")           // d3 - d1
	p("\tVMULPS %s, Y5, Y5", c2)       // t4 = 2 (d3 - d1)
	p("\tVADDPS Y5, Y0, Y9")           // r3 = t3 + t4
	p("\tVSUBPS Y5, Y0, Y10")          // r4 = t3 - t4
}

// outputRow applies At to Y0..Y5 into Y6..Y9, as gen_transform.go's
// outputRow does (Y13 = 4, Y14 = 8, Y15 = 2; Y10..Y12 and Y1 as temps).
func outputRow(p emitter) {
	p("\tVADDPS Y2, Y1, Y10") // a = m1 + m2
	p("\tVSUBPS Y2, Y1, Y11") // b = m1 - m2
	p("\tVADDPS Y4, Y3, Y12") // c = m3 + m4
	p("\tVSUBPS Y4, Y3, Y1")  // d = m3 - m4
	p("\tVADDPS Y10, Y0, Y6")
	p("\tVADDPS Y12, Y6, Y6") // o0 = m0 + a + c
	p("\tVMOVAPS Y11, Y7")
	p("\tVFMADD231PS Y15, Y1, Y7") // o1 = b + 2 d
	p("\tVMOVAPS Y10, Y8")
	p("\tVFMADD231PS Y13, Y12, Y8") // o2 = a + 4 c
	p("\tVADDPS Y11, Y5, Y9")
	p("\tVFMADD231PS Y14, Y1, Y9") // o3 = b + 8 d + m5
}

// off is a scaled row offset: row q of stride reg (bytes), through AX.
func off(p emitter, q int, reg string) string {
	if q == 0 {
		return ""
	}
	p("\tIMUL3Q $%d, %s, AX", q, reg)
	return "(AX*1)"
}

// inputRows is inRowsZ for AVX2: 72 columns are read under 9 vector
// masks (widened into the frame: 0-287(SP), the two lane masks of the
// stores at 288-351(SP)).
func inputRows(p emitter) {
	p("")
	p("// func inRowsY(src *float32, off, plane, nc int, masks *[5]uint16, dst *float32, doff, ld, lanes int)")
	p("TEXT ·inRowsY(SB), NOSPLIT, $352-72")
	p("\tMOVQ masks+32(FP), BX")
	for v := range 5 {
		widen(p, fmt.Sprintf("%d(BX)", 2*v), 64*v, v == 4)
	}
	p("\tLEAQ lanes+64(FP), AX") // its low 16 bits
	widen(p, "(AX)", 288, false)
	// The halves' lane bits: a whole half is stored plainly (masked
	// stores are slow on some CPUs), an empty one not at all.
	p("\tVMOVMSKPS Y13, R12")
	p("\tVMOVUPS 288(SP), Y13")
	p("\tVMOVMSKPS Y13, R11")
	p("\tMOVQ src+0(FP), SI")
	p("\tMOVQ off+8(FP), AX")
	p("\tLEAQ (SI)(AX*4), SI")
	p("\tMOVQ plane+16(FP), R8")
	p("\tSHLQ $2, R8")
	p("\tMOVQ nc+24(FP), CX")
	p("\tMOVQ dst+40(FP), DI")
	p("\tMOVQ doff+48(FP), AX")
	p("\tLEAQ (DI)(AX*4), DI")
	p("\tMOVQ ld+56(FP), R9")
	p("\tSHLQ $2, R9")
	p("\tIMUL3Q $36, R9, R10")
	p("rowloop:")
	for h := range 2 {
		mode := []string{"R11", "R12"}[h]
		if h == 1 {
			p("\tTESTQ R12, R12")
			p("\tJZ rownext")
		}
		// Tiles 8h..8h+7: columns 32h..32h+31 as 8 rows of 4.
		for a := range 4 {
			v := 4*h + a
			p("\tVMOVUPS %d(SP), Y12", 32*v)
			p("\tVMASKMOVPS %d(SI), Y12, Y%d", 32*v, a)
		}
		p("\tVPERM2F128 $0x20, Y2, Y0, Y4") // tiles 0 | 4
		p("\tVPERM2F128 $0x31, Y2, Y0, Y5") // 1 | 5
		p("\tVPERM2F128 $0x20, Y3, Y1, Y6") // 2 | 6
		p("\tVPERM2F128 $0x31, Y3, Y1, Y7") // 3 | 7
		p("\tVUNPCKLPS Y5, Y4, Y8")
		p("\tVUNPCKHPS Y5, Y4, Y9")
		p("\tVUNPCKLPS Y7, Y6, Y10")
		p("\tVUNPCKHPS Y7, Y6, Y11")
		p("\tVSHUFPS $0x44, Y10, Y8, Y0") // column 0 of the 8 tiles
		p("\tVSHUFPS $0xee, Y10, Y8, Y1")
		p("\tVSHUFPS $0x44, Y11, Y9, Y2")
		p("\tVSHUFPS $0xee, Y11, Y9, Y3")
		// Columns 4 and 5 are columns 0 and 1 of the next tile: the
		// last tile's come from the next 8 columns.
		v := 4*h + 4
		p("\tVMOVUPS %d(SP), Y12", 32*v)
		p("\tVMASKMOVPS %d(SI), Y12, Y8", 32*v)
		p("\tVMOVUPS rot1<>(SB), Y12")
		p("\tVMOVUPS rot2<>(SB), Y10")
		p("\tVPERMPS Y0, Y12, Y4")
		p("\tVPERMPS Y8, Y12, Y9")
		p("\tVBLENDPS $0x80, Y9, Y4, Y4")
		p("\tVPERMPS Y1, Y12, Y5")
		p("\tVPERMPS Y8, Y10, Y9")
		p("\tVBLENDPS $0x80, Y9, Y5, Y5")
		inputRow(p, "four<>(SB)", "five<>(SB)", "two<>(SB)")
		p("\tCMPQ %s, $0xff", mode)
		p("\tJNE rowmasked%d", h)
		for j := range 6 {
			idx := off(p, j, "R9")
			p("\tVMOVUPS Y%d, %d(DI)%s", 6+j, 32*h, idx)
		}
		p("\tJMP rowdone%d", h)
		p("rowmasked%d:", h)
		p("\tVMOVUPS %d(SP), Y12", 288+32*h)
		for j := range 6 {
			idx := off(p, j, "R9")
			p("\tVMASKMOVPS Y%d, Y12, %d(DI)%s", 6+j, 32*h, idx)
		}
		p("rowdone%d:", h)
	}
	p("rownext:")
	p("\tADDQ R8, SI")
	p("\tADDQ R10, DI")
	p("\tDECQ CX")
	p("\tJNZ rowloop")
	p("\tVZEROUPPER")
	p("\tRET")
}

// inputCols is inColsZ for AVX2, both 8-lane halves of each point in turn.
func inputCols(p emitter) {
	p("")
	p("// func inColsY(r *float32, ld, nc int, v *float32, xs int)")
	p("TEXT ·inColsY(SB), NOSPLIT, $0-40")
	p("\tMOVQ r+0(FP), SI")
	p("\tMOVQ ld+8(FP), R9")
	p("\tSHLQ $2, R9")
	p("\tIMUL3Q $36, R9, R10")
	p("\tMOVQ nc+16(FP), CX")
	p("\tMOVQ v+24(FP), DI")
	p("\tMOVQ xs+32(FP), R8")
	p("\tSHLQ $2, R8")
	p("\tVMOVUPS four<>(SB), Y13")
	p("\tVMOVUPS five<>(SB), Y14")
	p("\tVMOVUPS two<>(SB), Y15")
	p("colloop:")
	// Both halves of a point's line in turn: the 36 points' lines are
	// xs apart, often in one cache set.
	for j := range 6 {
		for h := range 2 {
			for r := range 6 {
				idx := off(p, r*6+j, "R9")
				p("\tVMOVUPS %d(SI)%s, Y%d", 32*h, idx, r)
			}
			inputRow(p, "Y13", "Y14", "Y15")
			for i := range 6 {
				idx := off(p, i*6+j, "R8")
				p("\tVMOVUPS Y%d, %d(DI)%s", 6+i, 32*h, idx)
			}
		}
	}
	p("\tADDQ R10, SI")
	p("\tADDQ $64, DI")
	p("\tDECQ CX")
	p("\tJNZ colloop")
	p("\tVZEROUPPER")
	p("\tRET")
}

// outputCols is outColsZ for AVX2, both 8-lane halves of each point in turn.
func outputCols(p emitter) {
	p("")
	p("// func outColsY(m *float32, xs, ld, nk int, y *float32, tmp *[36][16]float32)")
	p("TEXT ·outColsY(SB), NOSPLIT, $0-48")
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
	p("\tVMOVUPS four<>(SB), Y13")
	p("\tVMOVUPS eight<>(SB), Y14")
	p("\tVMOVUPS two<>(SB), Y15")
	p("ocloop:")
	// Both halves of a point's line in turn: the 36 points' lines are
	// xs apart, often in one cache set.
	for j := range 6 {
		for h := range 2 {
			for i := range 6 {
				idx := off(p, i*6+j, "R8")
				p("\tVMOVUPS %d(SI)%s, %s", 32*h, idx, y(i))
			}
			outputRow(p)
			for r := range 4 {
				p("\tVMOVUPS %s, %d(DI)", y(6+r), 64*(r*6+j)+32*h)
			}
		}
	}
	for h := range 2 {
		for r := range 4 {
			for x := range 6 {
				p("\tVMOVUPS %d(DI), %s", 64*(r*6+x)+32*h, y(x))
			}
			outputRow(p)
			for q := range 4 {
				idx := off(p, r*4+q, "R13")
				p("\tVMOVUPS %s, %d(DX)%s", y(6+q), 32*h, idx)
			}
		}
	}
	p("\tADDQ R13, SI")
	p("\tADDQ R10, DX")
	p("\tDECQ CX")
	p("\tJNZ ocloop")
	p("\tVZEROUPPER")
	p("\tRET")
}

// outputRows is outRowsZ for AVX2: the column masks (0-255(SP)) and lane
// masks (256-319(SP)) widened into the frame.
func outputRows(p emitter) {
	p("")
	p("// func outRowsY(y *float32, ld, nk, lanes int, dst *float32, doff int, res *float32, plane int, masks *[4]uint16, bias *float32, flags int)")
	p("TEXT ·outRowsY(SB), NOSPLIT, $320-88")
	p("\tMOVQ masks+64(FP), BX")
	for v := range 4 {
		widen(p, fmt.Sprintf("%d(BX)", 2*v), 64*v, false)
	}
	p("\tLEAQ lanes+24(FP), AX") // its low 16 bits
	widen(p, "(AX)", 256, false)
	p("\tVMOVMSKPS Y13, R12") // tiles 8-15: none means half 1 is skipped
	p("\tMOVQ y+0(FP), SI")
	p("\tMOVQ ld+8(FP), R13")
	p("\tSHLQ $2, R13")
	p("\tMOVQ R13, R10")
	p("\tSHLQ $4, R10")
	p("\tMOVQ nk+16(FP), CX")
	p("\tMOVQ doff+40(FP), AX")
	p("\tMOVQ dst+32(FP), DX")
	p("\tLEAQ (DX)(AX*4), DX")
	p("\tMOVQ res+48(FP), R11")
	p("\tLEAQ (R11)(AX*4), R11")
	p("\tMOVQ plane+56(FP), R14")
	p("\tSHLQ $2, R14")
	p("\tMOVQ bias+72(FP), BX")
	p("\tMOVQ flags+80(FP), R9")
	p("\tVXORPS Y15, Y15, Y15")
	p("\tVXORPS Y14, Y14, Y14")
	p("orloop:")
	p("\tTESTQ $1, R9")
	p("\tJZ orbias")
	p("\tVBROADCASTSS (BX), Y14")
	p("orbias:")
	for h := range 2 {
		if h == 1 {
			p("\tTESTQ R12, R12")
			p("\tJZ ornext")
		}
		p("\tVMOVUPS %d(SP), Y12", 256+32*h)
		for q := range 4 {
			idx := off(p, q, "R13")
			p("\tVMASKMOVPS %d(SI)%s, Y12, Y%d", 32*h, idx, q)
		}
		// Columns q of 8 tiles to 4 consecutive columns per tile.
		p("\tVUNPCKLPS Y1, Y0, Y4")
		p("\tVUNPCKHPS Y1, Y0, Y5")
		p("\tVUNPCKLPS Y3, Y2, Y6")
		p("\tVUNPCKHPS Y3, Y2, Y7")
		p("\tVSHUFPS $0x44, Y6, Y4, Y8")  // tiles 0 | 4
		p("\tVSHUFPS $0xee, Y6, Y4, Y9")  // 1 | 5
		p("\tVSHUFPS $0x44, Y7, Y5, Y10") // 2 | 6
		p("\tVSHUFPS $0xee, Y7, Y5, Y11") // 3 | 7
		p("\tVPERM2F128 $0x20, Y9, Y8, Y0")
		p("\tVPERM2F128 $0x20, Y11, Y10, Y1")
		p("\tVPERM2F128 $0x31, Y9, Y8, Y2")
		p("\tVPERM2F128 $0x31, Y11, Y10, Y3")
		for v := range 4 {
			acc := y(v)
			c := 4*h + v
			// Columns outside the image are skipped; whole vectors are
			// read and stored plainly (AVX2's masked stores are slow on
			// some CPUs), partial ones under the mask.
			p("\tVMOVUPS %d(SP), Y12", 32*c)
			p("\tVMOVMSKPS Y12, AX")
			p("\tTESTQ AX, AX")
			p("\tJZ ordone%d", c)
			p("\tVADDPS Y14, %s, %s", acc, acc)
			p("\tTESTQ $2, R9")
			p("\tJZ orres%d", c)
			p("\tCMPQ AX, $0xff")
			p("\tJNE orresm%d", c)
			p("\tVADDPS %d(R11), %s, %s", 32*c, acc, acc)
			p("\tJMP orres%d", c)
			p("orresm%d:", c)
			p("\tVMASKMOVPS %d(R11), Y12, Y13", 32*c)
			p("\tVADDPS Y13, %s, %s", acc, acc)
			p("orres%d:", c)
			p("\tTESTQ $4, R9")
			p("\tJZ orrelu%d", c)
			p("\tVMAXPS %s, Y15, %s", acc, acc)
			p("orrelu%d:", c)
			p("\tCMPQ AX, $0xff")
			p("\tJNE ormasked%d", c)
			p("\tVMOVUPS %s, %d(DX)", acc, 32*c)
			p("\tJMP ordone%d", c)
			p("ormasked%d:", c)
			p("\tVMASKMOVPS %s, Y12, %d(DX)", acc, 32*c)
			p("ordone%d:", c)
		}
	}
	p("ornext:")
	p("\tADDQ R10, SI")
	p("\tADDQ R14, DX")
	p("\tADDQ R14, R11")
	p("\tADDQ $4, BX")
	p("\tDECQ CX")
	p("\tJNZ orloop")
	p("\tVZEROUPPER")
	p("\tRET")
}
