package cpu

import (
	"context"
	"math/rand/v2"
	"testing"

	"goinfer/internal/engine"
)

// TestWinogradParity runs full-width ResNet-18 (random weights, 112x112,
// where the planner picks Winograd for the first two stages at batch 1
// and 3) on both executors with and without Winograd, and holds the
// logits to the engine's parity bound. Under the race detector it runs the
// ResNet engine only, at 64x64 (stage 1 Winograd at batch 1, stages 1-2
// at batch 3).
func TestWinogradParity(t *testing.T) {
	if testing.Short() {
		t.Skip("full-width ResNet-18 forwards; skipped in -short")
	}
	size, graphs := 112, []bool{false, true}
	if raceOn {
		size, graphs = 64, []bool{false}
	}
	mg, ig := resnet18Graphs(t, size)
	r := rand.New(rand.NewPCG(3, 3))
	in := make([]float32, 3*3*size*size)
	for i := range in {
		in[i] = float32(r.NormFloat64())
	}
	load := func(graph, noWino bool) engine.Model {
		opts := engine.Options{Compile: true, MaxBatch: 3, BatchSizes: []int{1, 3}, Height: size, Width: size, NoWinograd: noWino}
		var m engine.Model
		var err error
		if graph {
			m, err = Engine{}.LoadGraph(context.Background(), ig, opts)
		} else {
			m, err = Engine{}.Load(context.Background(), mg, opts)
		}
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, graph := range graphs {
		wino, direct := load(graph, false), load(graph, true)
		for _, n := range []int{1, 3} {
			want := runModel(t, direct, n, in[:n*3*size*size])
			got := runModel(t, wino, n, in[:n*3*size*size])
			d := relDiff(got, want)
			t.Logf("graph=%v batch %d: max|winograd-direct|/max|direct| = %.3g", graph, n, d)
			if d > 1e-4 {
				t.Errorf("graph=%v batch %d: max|winograd-direct|/max|direct| = %.3g, want <= 1e-4", graph, n, d)
			}
		}
		wino.Close()
		direct.Close()
	}
}
