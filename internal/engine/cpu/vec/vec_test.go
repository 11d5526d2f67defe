package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

func data(r *rand.Rand, n int, nan bool) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
		if nan && r.IntN(7) == 0 {
			v[i] = float32(math.NaN())
		}
	}
	return v
}

func same(a, b float32) bool {
	return a == b || (a != a && b != b)
}

// TestMatchesGo checks each function against its Go definition, on
// lengths around the assembly's 8-wide steps, with NaNs.
func TestMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for n := 0; n < 41; n++ {
		a, b := data(r, n, true), data(r, n, true)
		check := func(name string, got, want []float32) {
			t.Helper()
			for i := range want {
				if !same(got[i], want[i]) {
					t.Fatalf("%s n=%d [%d]: got %g, want %g", name, n, i, got[i], want[i])
				}
			}
		}
		got, want := make([]float32, n), make([]float32, n)
		ScaleShift(got, a, 1.5, -0.25)
		scaleShiftGo(want, a, 1.5, -0.25)
		for i := range want { // FMA rounds once; allow that
			if math.Abs(float64(got[i]-want[i])) <= 1e-6*(math.Abs(float64(a[i]*1.5))+0.25) {
				got[i] = want[i]
			}
		}
		check("ScaleShift", got, want)
		copy(got, b)
		copy(want, b)
		Axpy(got, a, 0.75)
		axpyGo(want, a, 0.75)
		for i := range want { // FMA rounds once; allow that
			if math.Abs(float64(got[i]-want[i])) <= 1e-6*(math.Abs(float64(a[i]*0.75))+math.Abs(float64(b[i]))) {
				got[i] = want[i]
			}
		}
		check("Axpy", got, want)
		ReLU(got, a)
		reluGo(want, a)
		check("ReLU", got, want)
		Add(got, a, b)
		addGo(want, a, b)
		check("Add", got, want)
		copy(got, a)
		copy(want, a)
		Max(got, b)
		maxGo(want, b)
		check("Max", got, want)
		c := data(r, n, false)
		if s, w := Sum(c), sumGo(c); math.Abs(float64(s-w)) > 1e-5*float64(n+1) {
			t.Fatalf("Sum n=%d: %g, want %g", n, s, w)
		}
	}
}

func TestNaN(t *testing.T) {
	nan := float32(math.NaN())
	v := []float32{nan, -1, 2, nan, 0, 0, 0, 0, nan}
	out := make([]float32, len(v))
	ReLU(out, v)
	if out[0] == out[0] || out[1] != 0 || out[8] == out[8] {
		t.Errorf("ReLU: %v", out)
	}
	dst := []float32{nan, 1, 1, 1, 1, 1, 1, 1, 1}
	Max(dst, []float32{5, nan, 0, 0, 0, 0, 0, 0, nan})
	if dst[0] == dst[0] || dst[1] == dst[1] || dst[2] != 1 || dst[8] == dst[8] {
		t.Errorf("Max: %v", dst)
	}
}

// TestExp checks Exp (the assembly on amd64) against math.Exp over the
// float32 range, with NaN, infinities and lengths around the 8-wide steps.
func TestExp(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	src := []float32{0, 1, -1, 87.9, 88, 88.8, -86.9, -87, -88, -104, -120,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-8, -1e-8}
	for i := 0; i < 20000; i++ {
		src = append(src, float32(r.Float64()*200-100))
	}
	for _, n := range []int{len(src), 7, 8, 9, 17} {
		x := src[:n]
		got := make([]float32, n)
		Exp(got, x)
		for i, v := range x {
			want := math.Exp(float64(v))
			g := float64(got[i])
			switch w32 := float32(want); {
			case v != v:
				if g == g {
					t.Fatalf("Exp(NaN) = %g", g)
				}
			case math.IsInf(float64(w32), 0) || w32 < math.SmallestNonzeroFloat32*(1<<23):
				if float64(w32) != g {
					t.Fatalf("Exp(%g) = %g, want %g", v, g, w32)
				}
			case math.Abs(g-want)/want > 3e-7:
				t.Fatalf("Exp(%g) = %g, want %g", v, g, want)
			}
		}
	}
}

// TestTaps checks Taps against its definition in float64, on lengths
// around the assembly's blocks of 8 and 32, for tap counts from 1 to 25.
func TestTaps(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, taps := range []int{1, 2, 9, 25} {
		for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 24, 31, 32, 33, 40, 63, 64, 65, 100, 130} {
			src := data(r, n+50, false)
			offs := make([]int, taps)
			w := data(r, taps, false)
			for i := range offs {
				offs[i] = r.IntN(51)
			}
			dst := data(r, n, false)
			Taps(dst, src, offs, w, 0.25)
			// The 16-lane loops must give the 8-lane loops' bits.
			wide := useAVX512
			useAVX512 = false
			narrow := data(r, n, false)
			Taps(narrow, src, offs, w, 0.25)
			useAVX512 = wide
			for i := range dst {
				if math.Float32bits(dst[i]) != math.Float32bits(narrow[i]) {
					t.Fatalf("taps %d n %d: dst[%d] = %v (widest path), %v (8 lanes)", taps, n, i, dst[i], narrow[i])
				}
			}
			for i := range dst {
				want := 0.25
				for k, o := range offs {
					want += float64(w[k]) * float64(src[o+i])
				}
				if d := math.Abs(float64(dst[i]) - want); d > 1e-5*(1+math.Abs(want)) {
					t.Fatalf("taps %d n %d: dst[%d] = %v, want %v", taps, n, i, dst[i], want)
				}
			}
		}
	}
}

func TestTapsPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"short source": func() { Taps(make([]float32, 8), make([]float32, 9), []int{2}, []float32{1}, 0) },
		"negative":     func() { Taps(make([]float32, 8), make([]float32, 9), []int{-1}, []float32{1}, 0) },
		"lengths":      func() { Taps(make([]float32, 8), make([]float32, 9), []int{0, 1}, []float32{1}, 0) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// TestActivations checks the in-place activations against float64 math,
// and the assembly against the Go loop, on lengths around 8 lanes, over
// the exponential's clamp and with infinities and NaNs.
func TestActivations(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	ref := map[string]func(float64) float64{
		"Sigmoid":   func(x float64) float64 { return 1 / (1 + math.Exp(-x)) },
		"SiLU":      func(x float64) float64 { return x / (1 + math.Exp(-x)) },
		"HardSwish": func(x float64) float64 { return x * min(max(x/6+0.5, 0), 1) },
		"Tanh":      math.Tanh,
		"GELU":      func(x float64) float64 { return x / 2 * (1 + math.Erf(x/math.Sqrt2)) },
	}
	fns := map[string]func([]float32){"Sigmoid": Sigmoid, "SiLU": SiLU, "HardSwish": HardSwish, "Tanh": Tanh, "GELU": GELU}
	kinds := map[string]int{"Sigmoid": actSigmoid, "SiLU": actSiLU, "HardSwish": actHardSwish, "Tanh": actTanh, "GELU": actGELU}
	special := []float32{0, -0, 1e-6, -1e-6, 3, -3, 87.5, -87.5, 100, -100, float32(math.Inf(1)), float32(math.NaN())}
	for name, f := range fns {
		for _, n := range []int{1, 7, 8, 9, 17, 64, 100} {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(r.NormFloat64() * 8)
				if i < len(special) && r.IntN(2) == 0 {
					v[i] = special[i]
				}
			}
			got := append([]float32(nil), v...)
			f(got)
			// The 16-lane loop must give the 8-lane loop's bits.
			wide := useAVX512
			useAVX512 = false
			narrow := append([]float32(nil), v...)
			f(narrow)
			useAVX512 = wide
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(narrow[i]) && !(got[i] != got[i] && narrow[i] != narrow[i]) {
					t.Fatalf("%s n %d: f(%g) = %g (widest path), %g (8 lanes)", name, n, v[i], got[i], narrow[i])
				}
			}
			goPath := append([]float32(nil), v...)
			activateGo(goPath, kinds[name])
			for i, x := range v {
				want := ref[name](float64(x))
				if x != x {
					if got[i] == got[i] || goPath[i] == goPath[i] {
						t.Fatalf("%s(NaN) = %v (asm), %v (Go)", name, got[i], goPath[i])
					}
					continue
				}
				for path, y := range map[string]float32{"asm": got[i], "Go": goPath[i]} {
					if d := math.Abs(float64(y) - want); float64(y) != want && !(d <= 1e-6*max(1, math.Abs(want))) {
						t.Fatalf("%s (%s) n %d: f(%g) = %g, want %g", name, path, n, x, y, want)
					}
				}
			}
		}
	}
}

func TestDeinterleave2(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for _, n := range []int{0, 1, 7, 8, 9, 16, 23, 40} {
		src := data(r, 2*n+1, true)
		even, odd := make([]float32, n), make([]float32, n)
		Deinterleave2(even, odd, src)
		for i := range even {
			if !same(even[i], src[2*i]) || !same(odd[i], src[2*i+1]) {
				t.Fatalf("n %d: pair %d = %v, %v; want %v, %v", n, i, even[i], odd[i], src[2*i], src[2*i+1])
			}
		}
	}
}

func TestMulExpShift(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	for _, n := range []int{0, 1, 7, 8, 9, 33, 197} {
		a, b := data(r, n, true), data(r, n, true)
		d := make([]float32, n)
		Mul(d, a, b)
		for i := range d {
			if !same(d[i], a[i]*b[i]) {
				t.Fatalf("Mul n %d: [%d] = %v, want %v", n, i, d[i], a[i]*b[i])
			}
		}
		for i := range a {
			a[i] *= 30 // past the clamp
		}
		ExpShift(d, a, 2)
		for i, x := range a {
			want := math.Exp(float64(max(x-2, -87))) // of the float32 difference
			if x != x {
				if d[i] == d[i] {
					t.Fatalf("ExpShift(NaN) = %v", d[i])
				}
				continue
			}
			if math.Abs(float64(d[i])-want) > 3e-7*want {
				t.Fatalf("ExpShift n %d: e^(%v-2) = %v, want %v", n, x, d[i], want)
			}
		}
	}
}

func TestDot(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, n := range []int{0, 1, 7, 8, 9, 16, 24, 33, 768} {
		a, b := data(r, n, false), data(r, n, false)
		want := 0.0
		for i := range a {
			want += float64(a[i]) * float64(b[i])
		}
		if got := Dot(a, b); math.Abs(float64(got)-want) > 1e-5*(1+math.Abs(want))*math.Sqrt(float64(n+1)) {
			t.Fatalf("Dot n %d = %v, want %v", n, got, want)
		}
	}
}

func TestClamp(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 10))
	for _, n := range []int{0, 1, 7, 8, 9, 17, 40} {
		v := data(r, n, true)
		for i := range v {
			v[i] *= 8
		}
		for _, p := range [][4]float32{{1, 0, 0, 6}, {0.2, 0.5, 0, 1}, {1, 0, -0.5, 1.5}} {
			got := append([]float32(nil), v...)
			Clamp(got, p[0], p[1], p[2], p[3])
			for i, x := range v {
				want := min(max(p[0]*x+p[1], p[2]), p[3])
				if !same(got[i], want) && math.Abs(float64(got[i]-want)) > 1e-6 {
					t.Fatalf("Clamp%v n %d: f(%v) = %v, want %v", p, n, x, got[i], want)
				}
			}
		}
	}
}
