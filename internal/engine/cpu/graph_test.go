package cpu

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"goinfer/internal/checkpoint"
	"goinfer/internal/engine"
	"goinfer/internal/ir"
	"goinfer/internal/leakcheck"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
	"goinfer/internal/torchvision"
)

// resnet18Graphs returns full-width ResNet-18 with random weights as the
// ResNet engine's graph and as the general graph for size x size images,
// from one state dict.
func resnet18Graphs(t testing.TB, size int) (*model.Graph, *ir.Graph) {
	t.Helper()
	a, err := model.KnownArch("resnet18", 1000)
	if err != nil {
		t.Fatal(err)
	}
	sd, err := model.Init(context.Background(), a, 1)
	if err != nil {
		t.Fatal(err)
	}
	mg, err := model.FromStateDict(sd)
	if err != nil {
		t.Fatal(err)
	}
	ig, err := torchvision.Build("resnet18", sd, torchvision.Options{ImageSize: size})
	if err != nil {
		t.Fatal(err)
	}
	return mg, ig
}

// runModel runs the n samples of in through m and returns the output.
func runModel(t testing.TB, m engine.Model, n int, in []float32) []float32 {
	t.Helper()
	ctx := context.Background()
	inst, err := m.NewInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	info := m.Info()
	src, _ := m.Device().Alloc(n * info.InputBytes())
	dst, _ := m.Device().Alloc(n * info.OutputBytes())
	copy(src.(*Buffer).Bytes(), tensor.F32Bytes(in))
	if err := inst.Forward(src, dst, n); err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), tensor.BytesF32(dst.(*Buffer).Bytes())...)
}

// relDiff is max|got-want| / max|want|.
func relDiff(got, want []float32) float64 {
	var d, ref float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i])-float64(want[i])))
		ref = math.Max(ref, math.Abs(float64(want[i])))
	}
	return d / ref
}

// TestLoadGraphResNet18 runs ResNet-18 as a general graph and checks its
// logits against the ResNet engine's, eager and compiled, at two batch
// sizes of one model.
func TestLoadGraphResNet18(t *testing.T) {
	if testing.Short() {
		t.Skip("full-width ResNet-18 forwards; skipped in -short")
	}
	const size = 64
	mg, ig := resnet18Graphs(t, size)
	r := rand.New(rand.NewPCG(1, 1))
	in := make([]float32, 3*3*size*size)
	for i := range in {
		in[i] = float32(r.NormFloat64())
	}
	for _, compile := range []bool{false, true} {
		opts := engine.Options{Compile: compile, MaxBatch: 3, BatchSizes: []int{1, 3}, Height: size, Width: size}
		ref, err := Engine{}.Load(context.Background(), mg, opts)
		if err != nil {
			t.Fatal(err)
		}
		gm, err := Engine{}.LoadGraph(context.Background(), ig, opts)
		if err != nil {
			t.Fatal(err)
		}
		info := gm.Info()
		if c, h, w, ok := info.ImageInput(); !ok || c != 3 || h != size || w != size || info.OutputElems() != 1000 {
			t.Fatalf("info: input %v, output %v", info.Input(), info.Output())
		}
		for _, n := range []int{1, 3, 2} {
			want := runModel(t, ref, n, in[:n*3*size*size])
			got := runModel(t, gm, n, in[:n*3*size*size])
			if d := relDiff(got, want); d > 1e-4 {
				t.Errorf("compile=%v batch %d: max|got-ref|/max|ref| = %.3g", compile, n, d)
			}
		}
		gm.Close()
		ref.Close()
	}
}

// fixtureConfigs are tools/torchvision_fixtures.py's small models.
var fixtureConfigs = map[string]struct {
	cfg  torchvision.Config
	file string
	size int
}{
	"mobilenet_v2": {torchvision.MobileNetV2Config{WidthMult: 0.25, Setting: [][4]int{{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 2, 2}}, Classes: 10}, "mobilenet_v2.pth", 0},
	"mobilenet_v3": {torchvision.MobileNetV3Config{WidthMult: 1, Setting: []torchvision.V3Block{
		{In: 8, K: 3, Exp: 8, Out: 8, SE: true, HS: false, Stride: 2}, {In: 8, K: 3, Exp: 24, Out: 16, SE: false, HS: false, Stride: 2},
		{In: 16, K: 5, Exp: 32, Out: 16, SE: true, HS: true, Stride: 1}, {In: 16, K: 3, Exp: 48, Out: 24, SE: true, HS: true, Stride: 1},
	}, LastChannel: 32, Classes: 10}, "mobilenet_v3.safetensors", 0},
	"vit": {torchvision.ViTConfig{PatchSize: 8, Layers: 2, Heads: 2, Hidden: 32, MLP: 48, Classes: 10}, "vit.safetensors", 0},
}

// TestLoadGraphTorchvisionFixtures runs the small torchvision models
// (depthwise convolutions, SE blocks, hard-swish, attention, LayerNorm,
// GELU) through the engine and compares with PyTorch's float64 logits.
func TestLoadGraphTorchvisionFixtures(t *testing.T) {
	const dir = "../../../testdata/torchvision"
	for name, fx := range fixtureConfigs {
		for _, compile := range []bool{false, true} {
			mode := "eager"
			if compile {
				mode = "compiled"
			}
			t.Run(name+"/"+mode, func(t *testing.T) {
				in, err := tensor.LoadNPY(filepath.Join(dir, name+".input.npy"))
				if err != nil {
					t.Fatal(err)
				}
				want, err := tensor.LoadNPY(filepath.Join(dir, name+".logits.npy"))
				if err != nil {
					t.Fatal(err)
				}
				sd, err := checkpoint.Load(filepath.Join(dir, fx.file))
				if err != nil {
					t.Fatal(err)
				}
				g, err := torchvision.BuildWith(fx.cfg, sd, torchvision.Options{ImageSize: in.Shape[2]})
				sd.Close()
				if err != nil {
					t.Fatal(err)
				}
				n := in.Shape[0]
				m, err := Engine{}.LoadGraph(context.Background(), g, engine.Options{Compile: compile, MaxBatch: n})
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				x, err := in.ToFloat32()
				if err != nil {
					t.Fatal(err)
				}
				w, err := want.ToFloat32()
				if err != nil {
					t.Fatal(err)
				}
				got := runModel(t, m, n, x)
				d := relDiff(got, w)
				t.Logf("compile=%v: max|got-ref|/max|ref| = %.3g", compile, d)
				if d > 1e-4 {
					t.Errorf("compile=%v: max|got-ref|/max|ref| = %.3g, want <= 1e-4", compile, d)
				}
			})
		}
	}
}

// smallGraph is a tiny classifier from the torchvision fixtures.
func smallGraph(t *testing.T) *ir.Graph {
	t.Helper()
	fx := fixtureConfigs["mobilenet_v3"]
	sd, err := checkpoint.Load(filepath.Join("../../../testdata/torchvision", fx.file))
	if err != nil {
		t.Fatal(err)
	}
	defer sd.Close()
	g, err := torchvision.BuildWith(fx.cfg, sd, torchvision.Options{ImageSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestLoadGraphLifecycle(t *testing.T) {
	leakcheck.Check(t)
	ctx := context.Background()
	const pkg = "goinfer/internal/engine/cpu/parallel."
	// Helpers of pools that earlier tests closed may still be on their way
	// out (CI once counted one here, gone by the next count): wait for
	// them, so that the counts below are this test's.
	for deadline := time.Now().Add(5 * time.Second); leakcheck.Count(pkg) > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	before := leakcheck.Count(pkg)
	m, err := Engine{}.LoadGraph(ctx, smallGraph(t), engine.Options{MaxBatch: 2, Threads: 3})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := m.NewInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info := m.Info()
	src, _ := m.Device().Alloc(2 * info.InputBytes())
	dst, _ := m.Device().Alloc(2 * info.OutputBytes())
	for _, n := range []int{1, 2} { // batch 1 compiles on first use
		if err := inst.Forward(src, dst, n); err != nil {
			t.Fatal(err)
		}
	}
	if got := leakcheck.Count(pkg); got < before+2 {
		t.Errorf("%d pool goroutines with an instance of 3 threads, %d before", got, before)
	}
	for _, n := range []int{0, 3} {
		if err := inst.Forward(src, dst, n); err == nil || !strings.Contains(err.Error(), "MaxBatch") {
			t.Errorf("Forward of %d: got %v, want a batch error", n, err)
		}
	}
	small, _ := m.Device().Alloc(7)
	if err := inst.Forward(small, dst, 1); err == nil {
		t.Error("Forward from a 7-byte input succeeded")
	}
	if err := m.Close(); err == nil {
		t.Error("Close with an open instance succeeded")
	}
	if err := inst.Close(); err != nil {
		t.Fatal(err)
	}
	if err := inst.Forward(src, dst, 1); err == nil {
		t.Error("Forward on a closed instance succeeded")
	}
	if got := leakcheck.Count(pkg); got > before {
		t.Errorf("%d pool goroutines after Close, %d before", got, before)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.NewInstance(ctx); err == nil {
		t.Error("NewInstance on a closed model succeeded")
	}
}

// TestLoadGraphArenaGrows runs a batch size compiled after the instance
// was made, whose arena is larger, between runs of a smaller one, and
// checks every result against a model of its own.
func TestLoadGraphArenaGrows(t *testing.T) {
	ctx := context.Background()
	g := smallGraph(t)
	m, err := Engine{}.LoadGraph(ctx, g, engine.Options{MaxBatch: 3, BatchSizes: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ref, err := Engine{}.LoadGraph(ctx, g, engine.Options{MaxBatch: 3, BatchSizes: []int{1, 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	in := randInput(3, 3*m.Info().Input().Elems())
	for _, n := range []int{1, 3, 1, 3} {
		x := in[:n*m.Info().Input().Elems()]
		if d := relDiff(runModel(t, m, n, x), runModel(t, ref, n, x)); d != 0 {
			t.Errorf("batch %d: differs from a fresh model by %g", n, d)
		}
	}
	inst, err := m.NewInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	info := m.Info()
	src, _ := m.Device().Alloc(3 * info.InputBytes())
	dst, _ := m.Device().Alloc(3 * info.OutputBytes())
	copy(src.(*Buffer).Bytes(), tensor.F32Bytes(in))
	var outs [][]float32
	for _, n := range []int{1, 3, 1} {
		if err := inst.Forward(src, dst, n); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, append([]float32(nil), tensor.BytesF32(dst.(*Buffer).Bytes())[:n*info.OutputElems()]...))
	}
	if d := relDiff(outs[2], outs[0]); d != 0 {
		t.Errorf("batch 1 after the arena grew differs by %g", d)
	}
}

func TestLoadGraphRejects(t *testing.T) {
	ctx := context.Background()
	g := smallGraph(t)
	for _, tc := range []struct {
		opts engine.Options
		want string
	}{
		{engine.Options{MaxBatch: 0}, "MaxBatch"},
		{engine.Options{MaxBatch: 1, Precision: engine.FP16}, "fp32 only"},
		{engine.Options{MaxBatch: 1, InputDType: tensor.Uint8}, "float32"},
		{engine.Options{MaxBatch: 1, Height: 64, Width: 64}, "32x32"},
		{engine.Options{MaxBatch: 2, BatchSizes: []int{3}}, "outside"},
	} {
		if _, err := (Engine{}).LoadGraph(ctx, g, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error containing %q", tc.opts, err, tc.want)
		}
	}
	if _, err := (Engine{}).LoadGraph(ctx, nil, engine.Options{MaxBatch: 1}); err == nil {
		t.Error("LoadGraph of nil succeeded")
	}
}
