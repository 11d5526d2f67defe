package vec

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkActivations times the in-place activations and Exp over 8192
// values (a 14x14 map of ~42 channels), in cache.
func BenchmarkActivations(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 3))
	src := make([]float32, 8192)
	for i := range src {
		src[i] = float32(r.NormFloat64() * 4)
	}
	v := make([]float32, len(src))
	for _, c := range []struct {
		name string
		f    func([]float32)
	}{
		{"SiLU", SiLU}, {"Sigmoid", Sigmoid}, {"HardSwish", HardSwish}, {"Tanh", Tanh}, {"GELU", GELU},
		{"Exp", func(v []float32) { Exp(v, src) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(4 * len(v)))
			for b.Loop() {
				copy(v, src)
				c.f(v)
			}
		})
	}
}
