package winograd

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkTransforms times the input and output transforms of one panel
// of 16 tiles over 64 channels, operands in cache: the transforms' own
// cost per channel and panel.
// Run: go test -run XXX -bench Transforms ./internal/engine/cpu/winograd/
func BenchmarkTransforms(b *testing.B) {
	const c = 64
	g := Conv{N: 1, C: c, K: c, IH: 56, IW: 56, OH: 56, OW: 56, PT: 1, PL: 1}
	r := rand.New(rand.NewPCG(1, 1))
	in := randSlice(r, c*56*56)
	out := make([]float32, c*56*56)
	v := make([]float32, Points*c*lanes)
	var p Panel
	g.prepare(&p, 20, 1)
	b.Run("input", func(b *testing.B) {
		for b.Loop() {
			input(in, 56*56, &p, c, v, c*lanes)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c), "ns/channel")
	})
	b.Run("output", func(b *testing.B) {
		for b.Loop() {
			output(v, c*lanes, lanes, c, out, nil, 56*56, &p, nil, flagReLU)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c), "ns/channel")
	})
}
