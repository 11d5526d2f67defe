package cpu

import (
	"context"
	"strings"
	"testing"

	"goinfer/internal/engine"
	"goinfer/internal/engine/cpu/irexec"
	"goinfer/internal/ir"
	"goinfer/internal/torchvision"
)

// TestLoadGraphSplitBatch checks that SplitBatch gives the whole-batch
// results, for batches it divides (chunks per thread) and ones it does not
// (the whole-batch plan), at thread counts below and above the chunks.
func TestLoadGraphSplitBatch(t *testing.T) {
	ctx := context.Background()
	g := smallGraph(t)
	ref, err := Engine{}.LoadGraph(ctx, g, engine.Options{MaxBatch: 6, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	in := randInput(6, 6*ref.Info().Input().Elems())
	for _, tc := range []struct {
		name           string
		split, threads int
		batches        []int
	}{
		{"chunks of 1, 2 threads", 1, 2, []int{6, 1, 5}},
		{"chunks of 2, 3 threads", 2, 3, []int{4, 3, 6}},
		{"chunks of 3, 4 threads", 3, 4, []int{6, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Engine{}.LoadGraph(ctx, g, engine.Options{MaxBatch: 6, Threads: tc.threads, SplitBatch: tc.split})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			for _, n := range tc.batches {
				x := in[:n*m.Info().Input().Elems()]
				if d := relDiff(runModel(t, m, n, x), runModel(t, ref, n, x)); d > 1e-5 {
					t.Errorf("batch %d: differs from the whole-batch plan by %g", n, d)
				}
			}
		})
	}
}

// TestLoadGraphSplitBatchRefusesMixing: a graph where an op works across
// the images (a softmax over the batch) cannot run in chunks.
func TestLoadGraphSplitBatchRefusesMixing(t *testing.T) {
	g := mixingGraph(t)
	m, err := Engine{}.LoadGraph(context.Background(), g, engine.Options{MaxBatch: 4, Threads: 1})
	if err != nil {
		t.Fatalf("without SplitBatch: %v", err)
	}
	m.Close()
	_, err = Engine{}.LoadGraph(context.Background(), g, engine.Options{MaxBatch: 4, Threads: 1, SplitBatch: 1})
	if err == nil || !strings.Contains(err.Error(), `node "over_batch" (Softmax): it works along dimension 0`) {
		t.Fatalf("SplitBatch on a graph mixing images: %v", err)
	}
}

// mixingGraph is smallGraph with a softmax over the batch at its end.
func mixingGraph(t *testing.T) *ir.Graph {
	g := smallGraph(t)
	n := &ir.Node{Name: "over_batch", Op: &ir.Softmax{Axis: 0}, Inputs: []*ir.Value{g.Outputs[0]}}
	out := &ir.Value{Name: "probs", Producer: n, Type: g.Outputs[0].Type}
	n.Outputs = []*ir.Value{out}
	g.Nodes = append(g.Nodes, n)
	g.Outputs = []*ir.Value{out}
	return g
}

// TestSplitForwardDoesNotAllocate: a split forward runs its chunks on the
// instance's pool with buffers made once.
func TestSplitForwardDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	m, err := Engine{}.LoadGraph(ctx, smallGraph(t), engine.Options{MaxBatch: 4, Threads: 2, SplitBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	inst, err := m.NewInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	forwardAllocs(t, m, inst, 4, "a split Forward")
}

// forwardAllocs fails t if a Forward of n images on inst allocates, after
// a first one that makes its Split.
func forwardAllocs(t *testing.T, m engine.Model, inst engine.Instance, n int, what string) {
	t.Helper()
	src, _ := m.Device().Alloc(n * m.Info().InputBytes())
	dst, _ := m.Device().Alloc(n * m.Info().OutputBytes())
	if err := inst.Forward(src, dst, n); err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(5, func() {
		if err := inst.Forward(src, dst, n); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("%s allocates %v times per call", what, allocs)
	}
}

// TestLoadGraphSplitAuto: SplitAuto splits the batches SplitChunk chooses
// for a graph whose split pays, with the whole-batch results, runs the
// others whole, and splits nothing on one thread or for a graph that mixes
// images (which it loads without complaint).
func TestLoadGraphSplitAuto(t *testing.T) {
	ctx := context.Background()
	g := smallGraph(t)
	if pays, err := irexec.SplitPays(g); err != nil || !pays {
		t.Fatalf("SplitPays(small MobileNetV3) = %v, %v: the test needs a graph whose split pays", pays, err)
	}
	ref, err := Engine{}.LoadGraph(ctx, g, engine.Options{MaxBatch: 8, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	in := randInput(8, 8*ref.Info().Input().Elems())
	m, err := Engine{}.LoadGraph(ctx, g, engine.Options{MaxBatch: 8, Threads: 2, SplitBatch: engine.SplitAuto, BatchSizes: []int{8}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	gm := m.(*graphModel)
	for _, tc := range []struct{ n, chunk int }{{8, 2}, {4, 1}, {3, 0}} {
		if c := gm.chunk(tc.n); c != tc.chunk {
			t.Errorf("batch %d: chunk %d, want %d", tc.n, c, tc.chunk)
		}
		x := in[:tc.n*m.Info().Input().Elems()]
		if d := relDiff(runModel(t, m, tc.n, x), runModel(t, ref, tc.n, x)); d > 1e-5 {
			t.Errorf("batch %d: differs from the whole-batch plan by %g", tc.n, d)
		}
	}
	if len(gm.plans) != 1 || len(gm.chunkPlans) != 2 {
		t.Errorf("%d whole-batch and %d chunk plans, want 1 (batch 3) and 2 (chunks of 2 and 1): batch 8 needs no whole-batch plan", len(gm.plans), len(gm.chunkPlans))
	}

	one, err := Engine{}.LoadGraph(ctx, g, engine.Options{MaxBatch: 8, Threads: 1, SplitBatch: engine.SplitAuto})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	if c := one.(*graphModel).chunk(8); c != 0 {
		t.Errorf("one thread: batch 8 split in chunks of %d", c)
	}

	mix := mixingGraph(t)
	mm, err := Engine{}.LoadGraph(ctx, mix, engine.Options{MaxBatch: 4, Threads: 2, SplitBatch: engine.SplitAuto})
	if err != nil {
		t.Fatalf("SplitAuto on a graph mixing images: %v", err)
	}
	defer mm.Close()
	if c := mm.(*graphModel).chunk(4); c != 0 {
		t.Errorf("a graph mixing images: batch 4 split in chunks of %d", c)
	}
}

// TestLoadGraphSplitTail: a model whose classifier outweighs its
// activations (MobileNetV3-Small's 4 MB at 32x32) runs a split batch's
// chunks up to the global pooling and the classifier once over the batch,
// with the whole-batch results, no allocation per forward, and the tail's
// steps in the profile after the chunks'.
func TestLoadGraphSplitTail(t *testing.T) {
	ctx := context.Background()
	sd, err := torchvision.RandomStateDict("mobilenet_v3_small", 1000, 1)
	if err != nil {
		t.Fatal(err)
	}
	g, err := torchvision.Build("mobilenet_v3_small", sd, torchvision.Options{ImageSize: 32})
	sd.Close()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := Engine{}.LoadGraph(ctx, g, engine.Options{MaxBatch: 6, Threads: 1, Compile: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	m, err := Engine{}.LoadGraph(ctx, g, engine.Options{MaxBatch: 6, Threads: 2, SplitBatch: 1, Compile: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	gm := m.(*graphModel)
	if gm.tailCut == "" {
		t.Fatal("no tail cut: the test needs a model with one")
	}
	in := randInput(5, 6*m.Info().Input().Elems())
	for _, n := range []int{6, 4, 1} {
		x := in[:n*m.Info().Input().Elems()]
		if d := relDiff(runModel(t, m, n, x), runModel(t, ref, n, x)); d > 1e-5 {
			t.Errorf("batch %d: differs from the whole-batch plan by %g", n, d)
		}
	}
	if len(gm.tailPlans) != 2 {
		t.Errorf("%d tail plans, want 2 (batches 6 and 4; batch 1 runs whole)", len(gm.tailPlans))
	}
	inst, err := m.NewInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	forwardAllocs(t, m, inst, 4, "a split Forward with a tail")
	layers, err := inst.(engine.Profiler).ProfileLayers(4, 2)
	if err != nil {
		t.Fatal(err)
	}
	head, _ := gm.splitPlan(ctx, 1)
	tail, _ := gm.tailPlan(ctx, 4)
	if len(layers) != head.Steps()+tail.Steps() {
		t.Errorf("%d layers, want %d chunk steps + %d tail steps", len(layers), head.Steps(), tail.Steps())
	}
	if last := layers[len(layers)-1]; last.Kind != "Gemm" {
		t.Errorf("last layer %+v, want the classifier's Gemm", last)
	}
}
