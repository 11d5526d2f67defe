package winograd

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkTransforms times the input and output transforms of one panel
// of 16 tiles (spanning two tile rows) over 64 channels of a 56x56 layer,
// operands in cache: the transforms' own cost per channel and panel.
// Run: go test -run XXX -bench Transforms ./internal/engine/cpu/winograd/
func BenchmarkTransforms(b *testing.B) {
	if !useAsm {
		b.Skip("no SIMD transforms on this CPU (they need AVX2 and FMA, or AVX-512F)")
	}
	const c = 64
	g := Conv{N: 1, C: c, K: c, IH: 56, IW: 56, OH: 56, OW: 56, PT: 1, PL: 1}
	u, err := TransformWeights(make([]float32, c*c*9), c, c)
	if err != nil {
		b.Fatal(err)
	}
	l, err := NewLayer(g, u, nil, true)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	in := randSlice(r, c*56*56)
	out := make([]float32, c*56*56)
	blk := l.newBlock(make([]float32, l.WorkerFloats()), 3*lanes, 4*lanes, 1)
	var p Panel
	b.Run("input", func(b *testing.B) {
		for b.Loop() {
			l.inTransform(&blk, in, 0, c)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c), "ns/channel")
	})
	b.Run("output", func(b *testing.B) {
		for b.Loop() {
			l.outTransform(&blk, &p, out, nil, 0, c)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c), "ns/channel")
	})
}
