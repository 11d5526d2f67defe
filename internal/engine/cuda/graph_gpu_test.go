package cuda

import (
	"context"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
	"goinfer/internal/engine/cpu"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// These tests run general graphs on the GPU (they skip without one) and
// compare them with the float64 reference (per-op graphs) or the cpu
// engine's irexec (torchvision models, random weights): every precision,
// eager and compiled, batch 1 and an odd batch.

// graphKernelsFile is an nvcc-built graph.cu for the GPU tests to load
// instead of the embedded kernels (goinfer compute's --graph_kernels), so
// that a kernel change can be tested with nvcc's code before its fatbin is
// committed.
var graphKernelsFile = flag.String("graph_kernels", "", "graph.cu fatbin for the GPU tests to load (default: the embedded kernels)")

// runGraph loads g on the cuda engine and returns the first output of a
// forward of the first n samples of x (batch sizes 1 and maxBatch
// prepared).
func runGraph(t *testing.T, g *ir.Graph, p engine.Precision, compile bool, maxBatch int, x []float32, ns ...int) [][]float32 {
	t.Helper()
	return runGraphWith(t, g, engine.Options{Precision: p, Compile: compile, MaxBatch: maxBatch, BatchSizes: []int{1, maxBatch},
		// GOINFER_GRAPH_CHAINS=1 runs the same checks with elementwise chains fused.
		FuseChains: os.Getenv("GOINFER_GRAPH_CHAINS") == "1"}, x, ns...)
}

// runGraphWith is runGraph with the engine's options given.
func runGraphWith(t *testing.T, g *ir.Graph, opts engine.Options, x []float32, ns ...int) [][]float32 {
	t.Helper()
	if opts.GraphKernelFile == "" {
		opts.GraphKernelFile = *graphKernelsFile
	}
	m, err := Engine{}.LoadGraph(context.Background(), g, opts)
	if err != nil {
		t.Fatalf("%s: LoadGraph %s compile=%v: %v", g.Name, opts.Precision, opts.Compile, err)
	}
	defer m.Close()
	inst, err := m.NewInstance(context.Background())
	if err != nil {
		t.Fatalf("%s: NewInstance %s compile=%v: %v", g.Name, opts.Precision, opts.Compile, err)
	}
	defer inst.Close()
	per := m.Info().Input().Elems()
	var outs [][]float32
	for _, n := range ns {
		outs = append(outs, runForward(t, m, inst, tensor.F32Bytes(x[:n*per]), n))
	}
	return outs
}

// singleOutput returns g with only output k (the engine's Forward writes
// the first).
func singleOutput(g *ir.Graph, k int) *ir.Graph {
	c := *g
	c.Outputs = []*ir.Value{g.Outputs[k]}
	return &c
}

func TestGraphGPUOps(t *testing.T) {
	needGPU(t)
	for _, c := range append(opCases(), concatCases()...) {
		for k := range c.g.Outputs {
			g := singleOutput(c.g, k)
			const batch = 3
			x, ref, per := refInputs(t, g, batch)
			for _, p := range allPrecisions {
				for _, compile := range []bool{false, true} {
					outs := runGraph(t, g, p, compile, batch, x, 1, batch)
					for j, n := range []int{1, batch} {
						e := relErr64(f64s(outs[j]), ref[:n*per])
						if e > tolerance[p] {
							t.Errorf("%s output %d %s compile=%v batch %d: relative error %.3g > %.3g", c.name, k, p, compile, n, e, tolerance[p])
						}
					}
				}
			}
		}
	}
}

func f64s(f []float32) []float64 {
	out := make([]float64, len(f))
	for i, v := range f {
		out[i] = float64(v)
	}
	return out
}

// TestGraphGPULayerNormGroup runs the layer-norm cases with graph.cu's
// layernorm_group forced ("lngroup"): the engine takes it for many rows
// only (batch 256's), which the small cases do not reach.
func TestGraphGPULayerNormGroup(t *testing.T) {
	needGPU(t)
	ran := 0
	for _, c := range opCases() {
		if c.name != "layernorm_groups" && c.name != "layernorm_mlp_gelu" && c.name != "convnext_block" {
			continue
		}
		ran++
		const batch = 3
		x, ref, per := refInputs(t, c.g, batch)
		for _, p := range allPrecisions {
			for _, compile := range []bool{false, true} {
				opts := engine.Options{Precision: p, Compile: compile, MaxBatch: batch, BatchSizes: []int{1, batch}, GraphExperiments: "lngroup"}
				outs := runGraphWith(t, c.g, opts, x, 1, batch)
				for j, n := range []int{1, batch} {
					if e := relErr64(f64s(outs[j]), ref[:n*per]); e > tolerance[p] {
						t.Errorf("%s %s compile=%v batch %d: relative error %.3g > %.3g", c.name, p, compile, n, e, tolerance[p])
					}
				}
			}
		}
	}
	if ran != 3 {
		t.Fatalf("ran %d layer-norm cases, want 3", ran)
	}
}

// gpuModels are the architectures of the GPU comparison; GOINFER_GRAPH_MODELS
// (comma-separated) narrows them.
var gpuModels = []string{"resnet50", "mobilenet_v3_large", "efficientnet_b0", "regnet_y_800mf", "convnext_tiny", "vit_b_16", "densenet121"}

func TestGraphGPUModels(t *testing.T) {
	needGPU(t)
	models := gpuModels
	if s := os.Getenv("GOINFER_GRAPH_MODELS"); s != "" {
		models = strings.Split(s, ",")
	}
	precs := allPrecisions
	if s := os.Getenv("GOINFER_GRAPH_PRECISIONS"); s != "" {
		precs = nil
		for _, f := range strings.Split(s, ",") {
			p, err := engine.ParsePrecision(f)
			if err != nil {
				t.Fatal(err)
			}
			precs = append(precs, p)
		}
	}
	const batch = 3
	for _, arch := range models {
		t.Run(arch, func(t *testing.T) {
			g, err := buildModel(modelCase{arch: arch})
			if err != nil {
				t.Fatal(err)
			}
			shape := append([]int{batch}, []int(g.Inputs[0].Type.Shape[1:])...)
			in := randInput(shape, 11)
			x := make([]float32, len(in.Data))
			for i, v := range in.Data {
				x[i] = float32(v)
			}
			t0 := time.Now()
			ref := cpuReference(t, g, batch, x)
			t.Logf("%s: cpu reference in %v", arch, time.Since(t0).Round(time.Millisecond))
			per := len(ref) / batch
			for _, p := range precs {
				for _, compile := range []bool{false, true} {
					t0 := time.Now()
					outs := runGraph(t, g, p, compile, batch, x, 1, batch)
					for j, n := range []int{1, batch} {
						e := relErr(outs[j], ref[:n*per])
						top := top1Same(outs[j], ref[:n*per], per)
						status := "ok"
						if e > tolerance[p] || (p == engine.FP32 && !top) {
							status = "FAIL"
							t.Errorf("%s %s compile=%v batch %d: relative error %.3g (tolerance %.3g), top-1 identical %v", arch, p, compile, n, e, tolerance[p], top)
						}
						t.Logf("RESULT %s %s compile=%v batch=%d relerr=%.3g top1same=%v %s (%v)", arch, p, compile, n, e, top, status, time.Since(t0).Round(time.Millisecond))
					}
				}
			}
		})
	}
}

// cpuReference runs g on the cpu engine (irexec, float32) at batch n.
func cpuReference(t *testing.T, g *ir.Graph, n int, x []float32) []float32 {
	t.Helper()
	m, err := cpu.LoadGraph(context.Background(), g, engine.Options{Precision: engine.FP32, MaxBatch: n})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	inst, err := m.NewInstance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	dev := m.Device()
	in, err := dev.Alloc(len(x) * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Free()
	out, err := dev.Alloc(n * m.Info().OutputBytes())
	if err != nil {
		t.Fatal(err)
	}
	defer out.Free()
	s := inst.Stream()
	if err := s.CopyToDevice(in, 0, tensor.F32Bytes(x)); err != nil {
		t.Fatal(err)
	}
	if err := inst.Forward(in, out, n); err != nil {
		t.Fatal(err)
	}
	res := make([]byte, n*m.Info().OutputBytes())
	if err := s.CopyToHost(res, out, 0); err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), tensor.BytesF32(res)...)
}

// top1Same reports whether every sample's arg-max agrees.
func top1Same(got, ref []float32, per int) bool {
	for s := 0; s+per <= len(ref); s += per {
		a := slices.Index(got[s:s+per], slices.Max(got[s:s+per]))
		b := slices.Index(ref[s:s+per], slices.Max(ref[s:s+per]))
		if a != b {
			return false
		}
	}
	return true
}

// TestGraphGPUSpeed measures compiled forwards of the GPU models (fp16
// unless GOINFER_GRAPH_PRECISIONS says otherwise) at batch 256 and 1 and,
// with GOINFER_GRAPH_PROFILE set, prints each model's slowest steps. It
// runs only when GOINFER_GRAPH_SPEED is set: it takes minutes.
func TestGraphGPUSpeed(t *testing.T) {
	needGPU(t)
	if os.Getenv("GOINFER_GRAPH_SPEED") == "" {
		t.Skip("set GOINFER_GRAPH_SPEED=1 to measure the general-graph models")
	}
	models := gpuModels
	if s := os.Getenv("GOINFER_GRAPH_MODELS"); s != "" {
		models = strings.Split(s, ",")
	}
	p := engine.FP16
	if s := os.Getenv("GOINFER_GRAPH_PRECISIONS"); s != "" {
		var err error
		if p, err = engine.ParsePrecision(strings.Split(s, ",")[0]); err != nil {
			t.Fatal(err)
		}
	}
	const big = 256
	for _, arch := range models {
		g, err := buildModel(modelCase{arch: arch})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		m, err := Engine{}.LoadGraph(context.Background(), g, engine.Options{Precision: p, Compile: true, MaxBatch: big, BatchSizes: []int{1, big}})
		if err != nil {
			t.Fatal(err)
		}
		inst, err := m.NewInstance(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		load := time.Since(t0)
		dev := m.Device()
		in, err := dev.Alloc(big * m.Info().InputBytes())
		if err != nil {
			t.Fatal(err)
		}
		out, err := dev.Alloc(big * m.Info().OutputBytes())
		if err != nil {
			t.Fatal(err)
		}
		timeIt := func(n, iters int) time.Duration {
			for k := 0; k < 3; k++ {
				if err := inst.Forward(in, out, n); err != nil {
					t.Fatal(err)
				}
			}
			if err := inst.Stream().Synchronize(); err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			for k := 0; k < iters; k++ {
				if err := inst.Forward(in, out, n); err != nil {
					t.Fatal(err)
				}
			}
			if err := inst.Stream().Synchronize(); err != nil {
				t.Fatal(err)
			}
			return time.Since(t0) / time.Duration(iters)
		}
		d256 := timeIt(big, 20)
		d1 := timeIt(1, 200)
		t.Logf("SPEED %s %s batch %d: %.0f img/s (%.2f ms); batch 1: %.3f ms; load+compile %v",
			arch, p, big, float64(big)/d256.Seconds(), float64(d256.Microseconds())/1000, float64(d1.Microseconds())/1000, load.Round(time.Millisecond))
		for _, pn := range []int{big, 1} {
			if os.Getenv("GOINFER_GRAPH_PROFILE") == "" {
				break
			}
			lts, err := inst.(Profiler).ProfileLayers(pn, 3)
			if err != nil {
				t.Fatal(err)
			}
			byKind := map[string]time.Duration{}
			var total time.Duration
			for _, lt := range lts {
				byKind[lt.Kind] += lt.Time
				total += lt.Time
			}
			slices.SortFunc(lts, func(a, b LayerTime) int { return int(b.Time - a.Time) })
			t.Logf("PROFILE %s batch %d: %d steps, sum %v, by kind %v", arch, pn, len(lts), total.Round(time.Microsecond), byKind)
			for _, lt := range lts[:min(8, len(lts))] {
				t.Logf("PROFILE   %-40s %-12s %-22s %v", lt.Name, lt.Kind, lt.Algo, lt.Time.Round(time.Microsecond))
			}
		}
		in.Free()
		out.Free()
		inst.Close()
		m.Close()
	}
}

// TestGraphGPUFusedChecks checks that the load-time checks pass on this
// GPU: the cuBLASLt epilogues and the fused attention kernels are used in
// every precision (a failing check only slows the models down, so the
// other tests would not notice it).
func TestGraphGPUFusedChecks(t *testing.T) {
	needGPU(t)
	var g *ir.Graph
	for _, c := range opCases() {
		if c.name == "attention" {
			g = c.g
		}
	}
	for _, p := range allPrecisions {
		m, err := Engine{}.LoadGraph(context.Background(), g, engine.Options{Precision: p, MaxBatch: 2, GraphKernelFile: *graphKernelsFile})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		gm := m.(*graphModel)
		if !gm.fused.lt || !gm.fused.attn || (gm.prec.elem == 2 && !gm.fused.ldm) {
			t.Errorf("%s: fused paths off: %v", p, gm.fused.why)
		}
		// nvcc's code for this GPU (not the driver's compile of the PTX)
		// launches as programmatic dependents from compute capability 9.0.
		if major, err := gm.dev.rt.DeviceAttribute(cu.AttrComputeCapabilityMajor, gm.dev.ordinal); err == nil &&
			major >= pdlMajor && *graphKernelsFile != "" && !gm.fused.pdl {
			t.Errorf("%s: no dependent launches with %s on compute capability %d: %v", p, *graphKernelsFile, major, gm.fused.why)
		}
		t.Logf("%s: dependent launches %v", p, gm.fused.pdl)
		m.Close()
	}
}

// TestGraphGPUAttentionKernels runs attentions of ViT's head size (64,
// vector loads; 70 and 197 tokens: the key-split kernel's last warp
// without keys, and ViT-B/16's sequence) with both tensor-core kernels
// (the key-split one at batch 1 and 3, and the plain one) against the
// float64 reference, eager and compiled.
func TestGraphGPUAttentionKernels(t *testing.T) {
	needGPU(t)
	for _, g := range []*ir.Graph{attentionGraph("attention_vit_heads", 70, 2, 64), attentionGraph("attention_vit_seq", 197, 2, 64)} {
		const batch = 3
		x, ref, per := refInputs(t, g, batch)
		for _, exp := range []string{"", "noattnsplit"} {
			for _, p := range []engine.Precision{engine.FP16, engine.BF16} {
				for _, compile := range []bool{false, true} {
					opts := engine.Options{Precision: p, Compile: compile, MaxBatch: batch, BatchSizes: []int{1, batch}, GraphExperiments: exp}
					outs := runGraphWith(t, g, opts, x, 1, batch)
					for j, n := range []int{1, batch} {
						if e := relErr64(f64s(outs[j]), ref[:n*per]); e > tolerance[p] {
							t.Errorf("%s %s experiments %q compile=%v batch %d: relative error %.3g > %.3g", g.Name, p, exp, compile, n, e, tolerance[p])
						}
					}
				}
			}
		}
	}
}

// refInputs is a seeded input of batch samples for g, as float32, with
// g's float64 reference output and the output's elements per sample.
func refInputs(t *testing.T, g *ir.Graph, batch int) (x []float32, ref []float64, per int) {
	t.Helper()
	in := randInput(append([]int{batch}, []int(g.Inputs[0].Type.Shape[1:])...), 5)
	ref = evalRef(t, g, batch, in)[0].Data
	x = make([]float32, len(in.Data))
	for i, v := range in.Data {
		x[i] = float32(v)
	}
	return x, ref, len(ref) / batch
}
