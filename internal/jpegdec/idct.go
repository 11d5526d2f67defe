package jpegdec

// A block is an 8x8 block of DCT coefficients, in natural order.
type block [blockSize]int32

const blockSize = 8 * 8

// libjpeg's jidctint.c (the accurate integer IDCT, JDCT_ISLOW): 13-bit
// fixed-point constants, two extra bits kept between the column and row
// passes, and the output level-shifted and range-limited through
// libjpeg's table. libjpeg-turbo's SIMD versions give the same samples.
const (
	constBits = 13
	pass1Bits = 2

	fix0298631336 = 2446  // FIX(0.298631336)
	fix0390180644 = 3196  // FIX(0.390180644)
	fix0541196100 = 4433  // FIX(0.541196100)
	fix0765366865 = 6270  // FIX(0.765366865)
	fix0899976223 = 7373  // FIX(0.899976223)
	fix1175875602 = 9633  // FIX(1.175875602)
	fix1501321110 = 12299 // FIX(1.501321110)
	fix1847759065 = 15137 // FIX(1.847759065)
	fix1961570560 = 16069 // FIX(1.961570560)
	fix2053119869 = 16819 // FIX(2.053119869)
	fix2562915447 = 20995 // FIX(2.562915447)
	fix3072711026 = 25172 // FIX(3.072711026)
)

// descale is libjpeg's DESCALE: x / 2^n rounded half up (arithmetic
// shift).
func descale(x int64, n uint) int64 { return (x + 1<<(n-1)) >> n }

// idct1 is one 1-D pass of jpeg_idct_islow on eight values of a column
// or row, returning its eight outputs before descaling.
func idct1(in0, in1, in2, in3, in4, in5, in6, in7 int64) (o [8]int64) {
	// Even part: the rotator is sqrt(2)*c(-6).
	z2, z3 := in2, in6
	z1 := (z2 + z3) * fix0541196100
	tmp2 := z1 + z3*-fix1847759065
	tmp3 := z1 + z2*fix0765366865
	tmp0 := (in0 + in4) << constBits
	tmp1 := (in0 - in4) << constBits
	tmp10, tmp13 := tmp0+tmp3, tmp0-tmp3
	tmp11, tmp12 := tmp1+tmp2, tmp1-tmp2

	// Odd part: y7, y5, y3, y1.
	tmp0, tmp1, tmp2, tmp3 = in7, in5, in3, in1
	z1 = tmp0 + tmp3
	z2 = tmp1 + tmp2
	z3 = tmp0 + tmp2
	z4 := tmp1 + tmp3
	z5 := (z3 + z4) * fix1175875602
	tmp0 *= fix0298631336
	tmp1 *= fix2053119869
	tmp2 *= fix3072711026
	tmp3 *= fix1501321110
	z1 *= -fix0899976223
	z2 *= -fix2562915447
	z3 *= -fix1961570560
	z4 *= -fix0390180644
	z3 += z5
	z4 += z5
	tmp0 += z1 + z3
	tmp1 += z2 + z4
	tmp2 += z2 + z3
	tmp3 += z1 + z4

	o[0], o[7] = tmp10+tmp3, tmp10-tmp3
	o[1], o[6] = tmp11+tmp2, tmp11-tmp2
	o[2], o[5] = tmp12+tmp1, tmp12-tmp1
	o[3], o[4] = tmp13+tmp0, tmp13-tmp0
	return o
}

// rangeLimit is libjpeg's post-IDCT range limit table (jdmaster.c
// prepare_range_limit_table) indexed by an IDCT output: +128 and clamp to
// 0..255 for outputs in [-512, 511], which is all a valid stream makes;
// others wrap as libjpeg's masked lookup does.
func rangeLimit(v int64) uint8 {
	switch i := v & 1023; {
	case i < 128:
		return uint8(i + 128)
	case i < 512:
		return 255
	case i < 896:
		return 0
	default:
		return uint8(i - 896)
	}
}

// idctInto transforms the dequantized coefficients b and writes the 8x8
// samples to dst (rows stride apart).
func idctInto(b *block, dst []byte, stride int) {
	var ws [blockSize]int64
	// Pass 1: columns, into ws with pass1Bits of extra precision.
	for c := range 8 {
		o := idct1(int64(b[c]), int64(b[8+c]), int64(b[16+c]), int64(b[24+c]),
			int64(b[32+c]), int64(b[40+c]), int64(b[48+c]), int64(b[56+c]))
		for r, v := range o {
			// libjpeg's work array holds ints.
			ws[8*r+c] = int64(int32(descale(v, constBits-pass1Bits)))
		}
	}
	// Pass 2: rows, descaled by 8 (the DCT's scale) and the extra bits.
	for r := range 8 {
		w := ws[8*r : 8*r+8]
		o := idct1(w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7])
		row := dst[r*stride : r*stride+8]
		for x, v := range o {
			row[x] = rangeLimit(descale(v, constBits+pass1Bits+3))
		}
	}
}
