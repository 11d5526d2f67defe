package jpeg

// The inverse DCT is the Loeffler-Ligtenberg-Moschytz factorisation with
// 13-bit fixed-point constants, computed columns first with two extra bits
// of precision kept between the passes, then rows, each output descaled
// with rounding and range-limited through a 1024-entry wraparound table.
// This is the arithmetic of libjpeg's default ("islow") integer IDCT, so
// that decoded samples are the ones libjpeg-turbo (and so PIL) produces.

const (
	constBits = 13
	pass1Bits = 2

	// round(c * 2^13) of the cosine terms the factorisation needs.
	f0298631336 = 2446
	f0390180644 = 3196
	f0541196100 = 4433
	f0765366865 = 6270
	f0899976223 = 7373
	f1175875602 = 9633
	f1501321110 = 12299
	f1847759065 = 15137
	f1961570560 = 16069
	f2053119869 = 16819
	f2562915447 = 20995
	f3072711026 = 25172
)

// rangeLimit maps (v+128)&1023 for a descaled output v to a sample: the
// range -128..127 to 0..255, further positive values to 255, further
// negative ones to 0. Out-of-range values of corrupt data wrap around the
// 10-bit index exactly as libjpeg's table does.
var rangeLimit = func() (t [1024]uint8) {
	for i := range t {
		switch {
		case i < 256:
			t[i] = uint8(i)
		case i < 640:
			t[i] = 255
		}
	}
	return
}()

func descale(x int32, n uint) int32 { return (x + 1<<(n-1)) >> n }

// idct transforms one block of dequantized coefficients (natural order)
// into 8x8 samples at dst[0], dst[stride], ... The arithmetic wraps
// silently on corrupt coefficients; valid data stays within int32.
func idct(in *[64]int32, dst []uint8, stride int) {
	var ws [64]int32
	// Pass 1: columns, results scaled up by 2^pass1Bits.
	for c := 0; c < 8; c++ {
		if in[8+c]|in[16+c]|in[24+c]|in[32+c]|in[40+c]|in[48+c]|in[56+c] == 0 {
			dc := in[c] << pass1Bits
			for r := 0; r < 64; r += 8 {
				ws[r+c] = dc
			}
			continue
		}
		t0, t1, t2, t3, t10, t11, t12, t13 := evenOdd(in[c], in[8+c], in[16+c], in[24+c], in[32+c], in[40+c], in[48+c], in[56+c])
		const s = constBits - pass1Bits
		ws[c] = descale(t10+t3, s)
		ws[56+c] = descale(t10-t3, s)
		ws[8+c] = descale(t11+t2, s)
		ws[48+c] = descale(t11-t2, s)
		ws[16+c] = descale(t12+t1, s)
		ws[40+c] = descale(t12-t1, s)
		ws[24+c] = descale(t13+t0, s)
		ws[32+c] = descale(t13-t0, s)
	}
	// Pass 2: rows, removing the pass-1 scale and the DCT's factor 8.
	const s = constBits + pass1Bits + 3
	for r := 0; r < 8; r++ {
		w := ws[8*r : 8*r+8 : 8*r+8]
		out := dst[r*stride : r*stride+8 : r*stride+8]
		if w[1]|w[2]|w[3]|w[4]|w[5]|w[6]|w[7] == 0 {
			v := rangeLimit[(descale(w[0], pass1Bits+3)+128)&1023]
			out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7] = v, v, v, v, v, v, v, v
			continue
		}
		t0, t1, t2, t3, t10, t11, t12, t13 := evenOdd(w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7])
		out[0] = rangeLimit[(descale(t10+t3, s)+128)&1023]
		out[7] = rangeLimit[(descale(t10-t3, s)+128)&1023]
		out[1] = rangeLimit[(descale(t11+t2, s)+128)&1023]
		out[6] = rangeLimit[(descale(t11-t2, s)+128)&1023]
		out[2] = rangeLimit[(descale(t12+t1, s)+128)&1023]
		out[5] = rangeLimit[(descale(t12-t1, s)+128)&1023]
		out[3] = rangeLimit[(descale(t13+t0, s)+128)&1023]
		out[4] = rangeLimit[(descale(t13-t0, s)+128)&1023]
	}
}

// evenOdd is the shared butterfly of both passes on one line x0..x7: the
// odd-part terms t0..t3 and the even-part sums t10..t13, all scaled by
// 2^constBits.
func evenOdd(x0, x1, x2, x3, x4, x5, x6, x7 int32) (t0, t1, t2, t3, t10, t11, t12, t13 int32) {
	// Even part: a rotation of (x2, x6) and the sum and difference of x0, x4.
	z1 := (x2 + x6) * f0541196100
	e2 := z1 - x6*f1847759065
	e3 := z1 + x2*f0765366865
	e0 := (x0 + x4) << constBits
	e1 := (x0 - x4) << constBits
	t10, t13 = e0+e3, e0-e3
	t11, t12 = e1+e2, e1-e2

	// Odd part, on x7, x5, x3, x1.
	a1, a2, a3, a4 := x7+x1, x5+x3, x7+x3, x5+x1
	z5 := (a3 + a4) * f1175875602
	t0 = x7 * f0298631336
	t1 = x5 * f2053119869
	t2 = x3 * f3072711026
	t3 = x1 * f1501321110
	a1 *= -f0899976223
	a2 *= -f2562915447
	a3 = a3*-f1961570560 + z5
	a4 = a4*-f0390180644 + z5
	t0 += a1 + a3
	t1 += a2 + a4
	t2 += a2 + a3
	t3 += a1 + a4
	return
}
