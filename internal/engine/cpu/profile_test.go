package cpu

import (
	"context"
	"strings"
	"testing"

	"goinfer/internal/engine"
)

// TestProfileLayers checks the cpu engine's per-layer profile of a small
// MobileNetV3, run whole and as a split batch: one entry per planned step,
// each named after its nodes and kernel, times that add up, and Forward's
// results unchanged by profiling.
func TestProfileLayers(t *testing.T) {
	ctx := context.Background()
	g := smallGraph(t)
	for _, tc := range []struct {
		name                  string
		batch, threads, split int
	}{
		{"whole batch, 2 threads", 1, 2, 0},
		{"whole batch, 1 thread", 2, 1, 0},
		{"chunks of 1, 2 threads", 4, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Engine{}.LoadGraph(ctx, g, engine.Options{MaxBatch: 4, Threads: tc.threads, SplitBatch: tc.split, Compile: true})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			in := randInput(3, tc.batch*m.Info().Input().Elems())
			want := runModel(t, m, tc.batch, in)
			inst, err := m.NewInstance(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer inst.Close()
			layers, err := inst.(engine.Profiler).ProfileLayers(tc.batch, 3)
			if err != nil {
				t.Fatal(err)
			}
			gm := m.(*graphModel)
			var steps int
			if c := gm.chunk(tc.batch); c > 0 {
				p, _ := gm.splitPlan(ctx, c)
				steps = p.Steps()
			} else {
				p, _ := gm.plan(ctx, tc.batch)
				steps = p.Steps()
			}
			if len(layers) != steps {
				t.Fatalf("%d layers, the plan has %d steps", len(layers), steps)
			}
			var convs, total int64
			for i, l := range layers {
				if l.Kind == "" || l.Algo == "" || l.Time < 0 {
					t.Errorf("layer %d: %+v: kind, algorithm or time missing", i, l)
				}
				if strings.Contains(l.Kind, "Conv") {
					convs++
				}
				total += int64(l.Time)
			}
			if convs == 0 || total <= 0 {
				t.Errorf("%d convolution steps, %d ns in all: %+v", convs, total, layers)
			}
			if d := relDiff(runModel(t, m, tc.batch, in), want); d > 0 {
				t.Errorf("Forward after profiling differs by %g", d)
			}
		})
	}
}

// TestProfileLayersRejects checks the arguments ProfileLayers refuses.
func TestProfileLayersRejects(t *testing.T) {
	ctx := context.Background()
	m, err := Engine{}.LoadGraph(ctx, smallGraph(t), engine.Options{MaxBatch: 2, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	inst, err := m.NewInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pr := inst.(engine.Profiler)
	for _, tc := range []struct{ n, iters int }{{0, 3}, {3, 3}, {1, 0}} {
		if _, err := pr.ProfileLayers(tc.n, tc.iters); err == nil {
			t.Errorf("ProfileLayers(%d, %d): no error", tc.n, tc.iters)
		}
	}
	inst.Close()
	if _, err := pr.ProfileLayers(1, 1); err == nil {
		t.Error("ProfileLayers on a closed instance: no error")
	}
}
