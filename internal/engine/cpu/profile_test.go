package cpu

import (
	"context"
	"strings"
	"testing"

	"goinfer/internal/engine"
	"goinfer/internal/engine/cpu/vec"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
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

// TestProfileLayersResNet checks the ResNet plan's per-layer profile: one
// entry per graph node, named after it with its op and kernel (Winograd,
// fused epilogues and the linear layer included), over several chunks and
// input types, and Forward's logits unchanged by profiling.
func TestProfileLayersResNet(t *testing.T) {
	ctx := context.Background()
	g := narrowGraph(t, model.NewArch(model.Basic, []int{1, 1, 1, 1}, 8, 10, 1, 64), 3)
	for _, tc := range []struct {
		name           string
		batch, threads int
		dt             tensor.DType
		compile        bool
	}{
		{"batch 1, 2 threads", 1, 2, tensor.Float32, true},
		{"two chunks, 1 thread", microBatch + 3, 1, tensor.Float32, true},
		{"uint8 input, 3 threads", 2, 3, tensor.Uint8, true},
		{"float16 input, eager", 1, 2, tensor.Float16, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fg := g
			if tc.compile {
				var err error
				if fg, err = model.Fuse(g); err != nil {
					t.Fatal(err)
				}
			}
			opts := engine.Options{Compile: tc.compile, MaxBatch: tc.batch, Height: 56, Width: 56, Threads: tc.threads, InputDType: tc.dt}
			m, err := Engine{}.Load(ctx, g, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			inst, err := m.NewInstance(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer inst.Close()
			raw := noiseInput(tc.batch*m.Info().Input().Elems(), tc.dt)
			logits := runInstance(t, m, inst, raw, tc.batch)
			layers, err := inst.(engine.Profiler).ProfileLayers(tc.batch, 3)
			if err != nil {
				t.Fatal(err)
			}
			if len(layers) != len(fg.Nodes) {
				t.Fatalf("%d layers for %d nodes", len(layers), len(fg.Nodes))
			}
			kernels := map[string]int{}
			for i, l := range layers {
				nd := fg.Nodes[i]
				if l.Name != nd.Name || l.Kind != nd.Op.String() || l.Time < 0 {
					t.Errorf("layer %d: %+v, want node %q (%s) and a time", i, l, nd.Name, nd.Op)
				}
				kernels[strings.Fields(l.Algo)[0]]++
			}
			want := []string{"convStep", "linearStep"}
			if !tc.compile {
				want = append(want, "eltStep")
			}
			for _, k := range want {
				if kernels[k] == 0 {
					t.Errorf("no %s among the layers: %v", k, kernels)
				}
			}
			if got := runInstance(t, m, inst, raw, tc.batch); relDiff(got, logits) > 0 {
				t.Errorf("Forward after profiling differs by %g", relDiff(got, logits))
			}
		})
	}
}

// TestStepDescribe checks the kernel names the ResNet plan's profile
// prints for each kind of step.
func TestStepDescribe(t *testing.T) {
	for _, tc := range []struct {
		s    step
		want string
	}{
		{&convStep{k: 3, stride: 2, inC: 64, outC: 128, oh: 28, ow: 28, groups: 1, layout: layoutPhases, res: -1, relu: true}, "convStep 3x3/2 64->128 28x28 phases +relu"},
		{&convStep{k: 1, stride: 1, inC: 64, outC: 64, oh: 56, ow: 56, groups: 2, layout: layoutShift, res: 3}, "convStep 1x1/1 64->64 56x56 groups 2 +add"},
		{&convStep{k: 7, stride: 2, inC: 3, outC: 64, oh: 112, ow: 112, groups: 1, layout: layoutGather, res: -1}, "convStep 7x7/2 3->64 112x112 gather"},
		{&linearStep{in: 512, out: 1000}, "linearStep 512->1000"},
		{&eltStep{kind: eltAvgPool, c: 512}, "eltStep avgpool 512ch"},
		{&eltStep{kind: eltMaxPool, c: 64, mp: vec.MaxPool2D{KH: 3, KW: 3, SH: 2, OutH: 56, OutW: 56}}, "eltStep maxpool 3x3/2 64ch 56x56"},
	} {
		if got := tc.s.describe(); got != tc.want {
			t.Errorf("describe() = %q, want %q", got, tc.want)
		}
	}
}
