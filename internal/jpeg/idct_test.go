package jpeg

import (
	"math"
	"math/rand"
	"testing"
)

// cosTable[x][u] is C(u)/2 * cos((2x+1)u pi/16), with C(0) = 1/sqrt(2).
var cosTable = func() (t [8][8]float64) {
	for x := range 8 {
		for u := range 8 {
			c := 1.0
			if u == 0 {
				c = 1 / math.Sqrt2
			}
			t[x][u] = c / 2 * math.Cos(float64(2*x+1)*float64(u)*math.Pi/16)
		}
	}
	return
}()

// floatIDCT is the inverse DCT of T.81 A.3.3 in float64, level-shifted,
// rounded and clamped to a sample.
func floatIDCT(in *[64]int32) (out [64]uint8) {
	for y := range 8 {
		for x := range 8 {
			var s float64
			for v := range 8 {
				for u := range 8 {
					s += cosTable[x][u] * cosTable[y][v] * float64(in[8*v+u])
				}
			}
			out[8*y+x] = uint8(min(max(math.Round(s)+128, 0), 255))
		}
	}
	return
}

// TestIDCTAgainstFloat checks the fixed-point transform against the exact
// one: within one level on blocks shaped like real ones (large low
// frequencies, sparse small high ones), including DC-only blocks and
// blocks with a single nonzero row or column that take the shortcuts.
func TestIDCTAgainstFloat(t *testing.T) {
	const blocks = 800
	rng := rand.New(rand.NewSource(14))
	var pix [64]uint8
	worst, off := 0, 0
	for n := range blocks {
		var in [64]int32
		in[0] = int32(rng.Intn(2048) - 1024)
		switch n % 4 {
		case 0: // DC only
		case 1: // first column only
			for v := 1; v < 8; v++ {
				in[8*v] = int32(rng.Intn(201) - 100)
			}
		case 2: // first row only
			for u := 1; u < 8; u++ {
				in[u] = int32(rng.Intn(201) - 100)
			}
		default:
			for k := 1; k < 64; k++ {
				if rng.Intn(4) == 0 {
					lim := 400 / (1 + k/4)
					in[k] = int32(rng.Intn(2*lim+1) - lim)
				}
			}
		}
		idct(&in, pix[:], 8)
		want := floatIDCT(&in)
		for i := range pix {
			d := int(pix[i]) - int(want[i])
			d = max(d, -d)
			worst = max(worst, d)
			if d != 0 {
				off++
			}
		}
	}
	t.Logf("%d of %d samples differ from the float IDCT, by at most %d", off, blocks*64, worst)
	if worst > 1 {
		t.Errorf("a sample differs by %d levels from the float IDCT (want <= 1)", worst)
	}
}

// TestRangeLimitWraps pins the table's three regions and its wraparound:
// an overshoot up to +511 saturates to 255, one beyond wraps to 0, and the
// same 10-bit index arithmetic maps -129..-512 to 0.
func TestRangeLimitWraps(t *testing.T) {
	for _, tc := range []struct {
		v    int32
		want uint8
	}{{-128, 0}, {0, 128}, {127, 255}, {128, 255}, {511, 255}, {512, 0}, {895, 0}, {896, 0}, {-129, 0}, {-512, 0}, {-513, 255}} {
		if got := rangeLimit[(tc.v+128)&1023]; got != tc.want {
			t.Errorf("value %d: %d, want %d", tc.v, got, tc.want)
		}
	}
}
