package winograd

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"goinfer/internal/engine/cpu/parallel"
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

// BenchmarkResNet18Layers times whole layers of ResNet-18's four stages
// (64 to 512 channels, 63x63 to 8x8 maps: the default bench's 250x250
// images) at batch 4 on two workers: the small maps run tile rows narrower
// than a vector, whose transforms the per-panel benchmark does not see.
func BenchmarkResNet18Layers(b *testing.B) {
	for _, sh := range []struct{ c, hw int }{{64, 63}, {128, 32}, {256, 16}, {512, 8}} {
		b.Run(fmt.Sprintf("c%d_%d", sh.c, sh.hw), func(b *testing.B) {
			const n = 4
			g := Conv{N: n, C: sh.c, K: sh.c, IH: sh.hw, IW: sh.hw, OH: sh.hw, OW: sh.hw, PT: 1, PL: 1}
			r := rand.New(rand.NewPCG(1, 1))
			u, err := TransformWeights(randSlice(r, sh.c*sh.c*9), sh.c, sh.c)
			if err != nil {
				b.Fatal(err)
			}
			l, err := NewLayer(g, u, randSlice(r, sh.c), true)
			if err != nil {
				b.Fatal(err)
			}
			pool := parallel.New(2)
			defer pool.Close()
			s := NewScratch(2, make([]float32, l.BufferFloats(n)), l.WorkerFloats())
			in := randSlice(r, n*sh.c*sh.hw*sh.hw)
			res := randSlice(r, n*sh.c*sh.hw*sh.hw)
			out := make([]float32, n*sh.c*sh.hw*sh.hw)
			for b.Loop() {
				l.Run(pool, s, in, res, out, n)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms")
		})
	}
}
