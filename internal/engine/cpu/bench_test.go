package cpu

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"goinfer/internal/cputime"
	"goinfer/internal/engine"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
	"goinfer/internal/torchvision"
)

var resnet18 = sync.OnceValues(func() (*model.Graph, error) {
	a, err := model.KnownArch("resnet18", 1000)
	if err != nil {
		return nil, err
	}
	sd, err := model.Init(context.Background(), a, 1)
	if err != nil {
		return nil, err
	}
	return model.FromStateDict(sd)
})

// BenchmarkResNet18 measures full-width ResNet-18 (random weights) forwards
// and reports images/s and effective GFLOP/s (2 FLOPs per MAC of g.MACs).
// Run: go test -run XXX -bench ResNet18 ./internal/engine/cpu/
func BenchmarkResNet18(b *testing.B) {
	if testing.Short() {
		b.Skip("full ResNet-18 forwards take seconds; skipped in -short")
	}
	g, err := resnet18()
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{224, 250} {
		for _, n := range []int{1, 8} {
			for _, mode := range []string{"eager", "compiled", "direct"} {
				// direct: compiled, every convolution a direct GEMM (no
				// Winograd), for A/B in one process.
				opts := engine.Options{Compile: mode != "eager", MaxBatch: n, Height: size, Width: size, NoWinograd: mode == "direct"}
				b.Run(fmt.Sprintf("%d/bs%d/%s", size, n, mode), func(b *testing.B) {
					benchForward(b, g, n, opts)
				})
			}
		}
	}
}

func benchForward(b *testing.B, g *model.Graph, n int, opts engine.Options) {
	ctx := context.Background()
	size := opts.Height
	m, err := Engine{}.Load(ctx, g, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	inst, err := m.NewInstance(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer inst.Close()
	info := m.Info()
	in, _ := m.Device().Alloc(n * info.InputBytes())
	out, _ := m.Device().Alloc(n * info.OutputBytes())
	copy(in.(*Buffer).Bytes(), tensor.F32Bytes(randInput(1, n*3*size*size)))
	macs, err := g.MACs(size, size)
	if err != nil {
		b.Fatal(err)
	}
	if err := inst.Forward(in, out, n); err != nil { // warm caches and pages
		b.Fatal(err)
	}
	cpu0 := cputime.Process()
	b.ResetTimer()
	for b.Loop() {
		if err := inst.Forward(in, out, n); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds()
	flops := 2 * float64(macs) * float64(n*b.N)
	b.ReportMetric(float64(n*b.N)/sec, "img/s")
	b.ReportMetric(flops/sec/1e9, "GFLOP/s")
	// Work per CPU-second (all threads) tells the code's efficiency apart
	// from what other processes on a shared machine take.
	if cpu := (cputime.Process() - cpu0).Seconds(); cpu > 0 {
		b.ReportMetric(flops/cpu/1e9, "GFLOP/cpu-s")
	}
}

// BenchmarkResNet18Graph is BenchmarkResNet18 for the same network built
// as a general graph (internal/torchvision) and run by LoadGraph (irexec),
// so that the two executors compare like for like.
// Run: go test -run XXX -bench ResNet18 ./internal/engine/cpu/
func BenchmarkResNet18Graph(b *testing.B) {
	if testing.Short() {
		b.Skip("full ResNet-18 forwards take seconds; skipped in -short")
	}
	for _, size := range []int{224} {
		mg, ig := resnet18Graphs(b, size)
		macs, err := mg.MACs(size, size)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{1, 8, 32} {
			for _, mode := range []string{"eager", "compiled", "direct"} {
				// direct: compiled, every convolution a direct GEMM (no
				// Winograd), for A/B in one process.
				opts := engine.Options{Compile: mode != "eager", MaxBatch: n, NoWinograd: mode == "direct"}
				b.Run(fmt.Sprintf("%d/bs%d/%s", size, n, mode), func(b *testing.B) {
					m, err := Engine{}.LoadGraph(context.Background(), ig, opts)
					if err != nil {
						b.Fatal(err)
					}
					defer m.Close()
					benchModel(b, m, n, macs)
				})
			}
		}
	}
}

// benchModel times Forward of n samples on m.
func benchModel(b *testing.B, m engine.Model, n int, macs int64) {
	ctx := context.Background()
	inst, err := m.NewInstance(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer inst.Close()
	info := m.Info()
	in, _ := m.Device().Alloc(n * info.InputBytes())
	out, _ := m.Device().Alloc(n * info.OutputBytes())
	copy(in.(*Buffer).Bytes(), tensor.F32Bytes(randInput(1, n*info.Input().Elems())))
	if err := inst.Forward(in, out, n); err != nil {
		b.Fatal(err)
	}
	cpu0 := cputime.Process()
	b.ResetTimer()
	for b.Loop() {
		if err := inst.Forward(in, out, n); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(n*b.N)/sec, "img/s")
	cpu := (cputime.Process() - cpu0).Seconds()
	if cpu > 0 {
		// Images per CPU-second tell the code's efficiency apart from what
		// other processes on a shared machine take.
		b.ReportMetric(float64(n*b.N)/cpu, "img/cpu-s")
	}
	if macs > 0 {
		flops := 2 * float64(macs) * float64(n*b.N)
		b.ReportMetric(flops/sec/1e9, "GFLOP/s")
		if cpu > 0 {
			b.ReportMetric(flops/cpu/1e9, "GFLOP/cpu-s")
		}
	}
}

// BenchmarkGraphArchs times full-size torchvision architectures the ResNet
// engine cannot run (random weights) on LoadGraph: depthwise-heavy
// MobileNetV2 and EfficientNet-B0, grouped RegNetY, and ViT-B/16's
// attention and MLPs.
// Run: go test -run XXX -bench GraphArchs ./internal/engine/cpu/
func BenchmarkGraphArchs(b *testing.B) {
	if testing.Short() {
		b.Skip("full-size forwards take seconds; skipped in -short")
	}
	for _, arch := range []string{"mobilenet_v2", "efficientnet_b0", "regnet_y_400mf", "vit_b_16"} {
		sd, err := torchvision.RandomStateDict(arch, 1000, 1)
		if err != nil {
			b.Fatal(err)
		}
		g, err := torchvision.Build(arch, sd, torchvision.Options{ImageSize: 224})
		sd.Close()
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/bs%d/compiled", arch, n), func(b *testing.B) {
				m, err := Engine{}.LoadGraph(context.Background(), g, engine.Options{Compile: true, MaxBatch: n})
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				benchModel(b, m, n, 0)
			})
		}
	}
}
