package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestSoftmaxRow checks SoftmaxRow against float64 on rows of every tail
// length around the vector widths, in place and not, on both paths, and
// that a NaN or +Inf makes the row NaN.
func TestSoftmaxRow(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	for _, wide := range []bool{false, true} {
		restore := useAVX512
		useAVX512 = useAVX512 && wide
		for _, n := range []int{1, 2, 7, 8, 15, 16, 17, 31, 33, 64, 100, 197, 260} {
			for _, inPlace := range []bool{false, true} {
				t.Run(fmt.Sprintf("avx512=%v/n%d/inplace=%v", useAVX512, n, inPlace), func(t *testing.T) {
					src := make([]float32, n+1) // one past the row: must stay
					for i := range src {
						src[i] = float32(r.NormFloat64() * 8)
					}
					src[n] = 12345
					m := math.Inf(-1)
					for _, v := range src[:n] {
						m = math.Max(m, float64(v))
					}
					var s float64
					for _, v := range src[:n] {
						s += math.Exp(float64(v) - m)
					}
					want := make([]float64, n)
					for i, v := range src[:n] {
						want[i] = math.Exp(float64(v)-m) / s
					}
					dst := make([]float32, n+1)
					dst[n] = 777
					if inPlace {
						dst = src
					}
					SoftmaxRow(dst[:n], src[:n])
					for i, w := range want {
						if d := math.Abs(float64(dst[i]) - w); d > 1e-6*math.Max(w, 1e-30)+1e-12 {
							t.Fatalf("[%d] = %g, want %g", i, dst[i], w)
						}
					}
					if !inPlace && dst[n] != 777 || src[n] != 12345 {
						t.Fatalf("wrote past the row: %g %g", dst[n], src[n])
					}
				})
			}
		}
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
			for _, n := range []int{5, 16, 37} {
				row := make([]float32, n)
				row[n/2] = bad
				SoftmaxRow(row, row)
				for i, v := range row {
					if !math.IsNaN(float64(v)) {
						t.Fatalf("avx512=%v n%d with %g: [%d] = %g, want NaN", useAVX512, n, bad, i, v)
					}
				}
			}
		}
		useAVX512 = restore
	}
}

func BenchmarkSoftmaxRow(b *testing.B) {
	row := make([]float32, 197)
	for i := range row {
		row[i] = float32(i%13) * 0.3
	}
	dst := make([]float32, 197)
	for b.Loop() {
		SoftmaxRow(dst, row)
	}
}

func BenchmarkSoftmaxRowGo(b *testing.B) {
	row := make([]float32, 197)
	dst := make([]float32, 197)
	for b.Loop() {
		softmaxRowGo(dst, row)
	}
}
