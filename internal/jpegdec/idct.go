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
func descale(x int32, n uint) int32 { return (x + 1<<(n-1)) >> n }

// idct1 is one 1-D pass of jpeg_idct_islow on eight values of a column
// or row, returning its eight outputs before descaling. libjpeg computes
// in its 64-bit JLONG; the products of a valid stream's coefficients fit
// in 32 bits (libjpeg-turbo's SIMD code relies on the same bound), and an
// invalid one only decodes to other garbage, Go's arithmetic wrapping.
func idct1(in0, in1, in2, in3, in4, in5, in6, in7 int32) (o0, o1, o2, o3, o4, o5, o6, o7 int32) {
	// Even part: the rotator is sqrt(2)*c(-6).
	z1 := (in2 + in6) * fix0541196100
	tmp2 := z1 + in6*-fix1847759065
	tmp3 := z1 + in2*fix0765366865
	tmp0 := (in0 + in4) << constBits
	tmp1 := (in0 - in4) << constBits
	tmp10, tmp13 := tmp0+tmp3, tmp0-tmp3
	tmp11, tmp12 := tmp1+tmp2, tmp1-tmp2

	// Odd part: y7, y5, y3, y1.
	tmp0, tmp1, tmp2, tmp3 = in7, in5, in3, in1
	z1 = tmp0 + tmp3
	z2 := tmp1 + tmp2
	z3 := tmp0 + tmp2
	z4 := tmp1 + tmp3
	z5 := (z3 + z4) * fix1175875602
	tmp0 *= fix0298631336
	tmp1 *= fix2053119869
	tmp2 *= fix3072711026
	tmp3 *= fix1501321110
	z1 *= -fix0899976223
	z2 *= -fix2562915447
	z3 = z3*-fix1961570560 + z5
	z4 = z4*-fix0390180644 + z5
	tmp0 += z1 + z3
	tmp1 += z2 + z4
	tmp2 += z2 + z3
	tmp3 += z1 + z4

	return tmp10 + tmp3, tmp11 + tmp2, tmp12 + tmp1, tmp13 + tmp0,
		tmp13 - tmp0, tmp12 - tmp1, tmp11 - tmp2, tmp10 - tmp3
}

// rangeLimit is libjpeg's post-IDCT range limit table (jdmaster.c
// prepare_range_limit_table) indexed by an IDCT output: +128 and clamp to
// 0..255 for outputs in [-512, 511], which is all a valid stream makes;
// others wrap as libjpeg's masked lookup does.
var rangeLimit = func() (t [1024]uint8) {
	for i := range t {
		switch {
		case i < 128:
			t[i] = uint8(i + 128)
		case i < 512:
			t[i] = 255
		case i < 896:
			t[i] = 0
		default:
			t[i] = uint8(i - 896)
		}
	}
	return t
}()

// idctInto transforms the dequantized coefficients b and writes the 8x8
// samples to dst (rows stride apart).
func idctInto(b *block, dst []byte, stride int) {
	var ws block
	// Pass 1: columns, into ws with pass1Bits of extra precision.
	const d1 = constBits - pass1Bits
	for c := range 8 {
		if b[8+c]|b[16+c]|b[24+c]|b[32+c]|b[40+c]|b[48+c]|b[56+c] == 0 {
			// As libjpeg does: the same result, faster.
			dc := b[c] << pass1Bits
			ws[c], ws[8+c], ws[16+c], ws[24+c], ws[32+c], ws[40+c], ws[48+c], ws[56+c] = dc, dc, dc, dc, dc, dc, dc, dc
			continue
		}
		o0, o1, o2, o3, o4, o5, o6, o7 := idct1(b[c], b[8+c], b[16+c], b[24+c], b[32+c], b[40+c], b[48+c], b[56+c])
		ws[c], ws[8+c], ws[16+c], ws[24+c] = descale(o0, d1), descale(o1, d1), descale(o2, d1), descale(o3, d1)
		ws[32+c], ws[40+c], ws[48+c], ws[56+c] = descale(o4, d1), descale(o5, d1), descale(o6, d1), descale(o7, d1)
	}
	// Pass 2: rows, descaled by 8 (the DCT's scale) and the extra bits.
	const d2 = constBits + pass1Bits + 3
	for r := range 8 {
		w := (*[8]int32)(ws[8*r : 8*r+8])
		row := (*[8]byte)(dst[r*stride : r*stride+8])
		if w[1]|w[2]|w[3]|w[4]|w[5]|w[6]|w[7] == 0 {
			v := rangeLimit[descale(w[0], pass1Bits+3)&1023]
			*row = [8]byte{v, v, v, v, v, v, v, v}
			continue
		}
		o0, o1, o2, o3, o4, o5, o6, o7 := idct1(w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7])
		row[0], row[1], row[2], row[3] = rangeLimit[descale(o0, d2)&1023], rangeLimit[descale(o1, d2)&1023], rangeLimit[descale(o2, d2)&1023], rangeLimit[descale(o3, d2)&1023]
		row[4], row[5], row[6], row[7] = rangeLimit[descale(o4, d2)&1023], rangeLimit[descale(o5, d2)&1023], rangeLimit[descale(o6, d2)&1023], rangeLimit[descale(o7, d2)&1023]
	}
}
