package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRefConvLanes checks that the reference convolution gives the same
// bits with refDot32's blocks of output channels as with the per-channel
// loops: Init's calibrated weights depend on it (TestInitStream pins them).
func TestRefConvLanes(t *testing.T) {
	if !useRefDot32 {
		t.Skip("refDot32 has no vector code on this CPU (it needs AVX or AVX-512F): both paths are the per-channel loops")
	}
	tests := []struct {
		name                           string
		inC, outC, k, stride, pad, grp int
		h, w                           int
		bias, residual, relu           bool
	}{
		{"3x3 pad 1, 64 channels", 16, 64, 3, 1, 1, 1, 9, 7, false, false, true},
		{"stride 2, bias, residual", 8, 40, 3, 2, 1, 1, 8, 8, true, true, true},
		{"7x7 stem", 3, 33, 7, 2, 3, 1, 13, 11, false, false, false},
		{"1x1", 24, 96, 1, 1, 0, 1, 5, 5, true, false, false},
		{"2 groups of 36", 8, 72, 3, 1, 1, 2, 6, 6, false, true, true},
		{"fewer channels than a block", 4, 12, 3, 1, 1, 1, 4, 4, false, false, true},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Conv{InC: tt.inC, OutC: tt.outC, K: tt.k, Stride: tt.stride, Pad: tt.pad, Groups: tt.grp,
				Residual: tt.residual, ReLU: tt.relu}
			c.Weight = make([]float32, tt.outC*tt.inC/tt.grp*tt.k*tt.k)
			for i := range c.Weight {
				c.Weight[i] = float32(rng.NormFloat64())
			}
			if tt.bias {
				c.Bias = make([]float32, tt.outC)
				for i := range c.Bias {
					c.Bias[i] = float32(rng.NormFloat64())
				}
			}
			const n = 2
			id := Dims{tt.inC, tt.h, tt.w}
			od := Dims{tt.outC, (tt.h+2*tt.pad-tt.k)/tt.stride + 1, (tt.w+2*tt.pad-tt.k)/tt.stride + 1}
			in := make([]float64, n*id.Elements())
			for i := range in {
				in[i] = rng.NormFloat64()
			}
			var res []float64
			if tt.residual {
				res = make([]float64, n*od.Elements())
				for i := range res {
					res[i] = rng.NormFloat64()
				}
			}
			run := func(lanes bool, lo, hi int) []float64 {
				defer func(old bool) { useRefDot32 = old }(useRefDot32)
				useRefDot32 = useRefDot32 && lanes
				out := make([]float64, n*od.Elements())
				refConvRange(c, in, res, out, make([]float32, len(c.Weight)), n, id, od, lo, hi)
				return out
			}
			want := run(false, 0, tt.outC)
			for _, r := range [][2]int{{0, tt.outC}, {tt.outC / 3, tt.outC}} {
				got := run(true, r[0], r[1])
				for i := r[0] * od.H * od.W; i < len(got); i++ {
					if b := i / (od.Elements()) * od.Elements(); i-b < r[0]*od.H*od.W {
						continue
					}
					if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
						t.Fatalf("channels [%d,%d): output %d = %v, want %v", r[0], r[1], i, got[i], want[i])
					}
				}
			}
		})
	}
}

// TestRefDot32 checks the vector lanes against their Go definition, as the
// assembly reads them.
func TestRefDot32(t *testing.T) {
	if !useRefDot32 {
		t.Skip("refDot32 has no vector code on this CPU (it needs AVX or AVX-512F); the Go loops run instead")
	}
	for _, avx512 := range []bool{false, true} {
		t.Run(map[bool]string{false: "avx", true: "avx512"}[avx512], func(t *testing.T) {
			if avx512 && !useRefDot32AVX512 {
				t.Skip("this CPU has no AVX-512F")
			}
			defer func(old bool) { useRefDot32AVX512 = old }(useRefDot32AVX512)
			useRefDot32AVX512 = avx512
			rng := rand.New(rand.NewPCG(3, 4))
			for _, m := range []int{1, 5, 64} {
				vals, offs := make([]float64, m), make([]int32, m)
				w := make([]float32, 7*refLanes)
				for i := range vals {
					vals[i], offs[i] = rng.NormFloat64(), int32(rng.IntN(7))
				}
				for i := range w {
					w[i] = float32(rng.NormFloat64())
				}
				var a, b [refLanes]float64
				for i := range a {
					a[i] = rng.NormFloat64()
					b[i] = a[i]
				}
				refDot32(&a, vals, offs, w)
				refDot32Go(&b, vals, offs, w)
				if a != b {
					t.Fatalf("%d taps: refDot32 %v, refDot32Go %v", m, a, b)
				}
			}
		})
	}
}
