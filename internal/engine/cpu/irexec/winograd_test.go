package irexec

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"goinfer/internal/engine/cpu/winograd"
	"goinfer/internal/ir"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
	"goinfer/internal/torchvision"
)

// TestWinogradConv runs 3x3 convolutions with Winograd forced on (and off,
// and by the planner's choice) against ir's float64 evaluation: odd sizes,
// zero, symmetric and asymmetric padding, batches 1 and 3, with and
// without bias, residual and ReLU; and checks that only eligible ones
// become Winograd steps.
func TestWinogradConv(t *testing.T) {
	cases := []struct {
		n, c, k, h, w int
		pads          []int
		act           ir.Activation
		bias, res     bool
		strides       []int
		eligible      bool
	}{
		{1, 16, 24, 9, 11, []int{1, 1, 1, 1}, ir.ActRelu, true, true, nil, true},
		{3, 20, 8, 7, 7, []int{1, 1, 1, 1}, ir.ActNone, false, true, nil, true},
		{3, 8, 16, 6, 13, []int{0, 0, 0, 0}, ir.ActRelu, true, false, nil, true},
		{1, 5, 3, 5, 5, []int{1, 0, 2, 1}, ir.ActNone, true, false, nil, true},
		{1, 32, 32, 17, 3, []int{1, 1, 1, 1}, ir.ActRelu, false, false, nil, true},
		{1, 8, 8, 8, 8, []int{1, 1, 1, 1}, ir.ActSiLU, true, false, nil, false},
		{1, 8, 8, 8, 8, []int{1, 1, 1, 1}, ir.ActRelu, true, false, []int{2, 2}, false},
	}
	for i, tc := range cases {
		for _, mode := range []winograd.Mode{winograd.On, winograd.Off, winograd.Auto} {
			t.Run(fmt.Sprintf("%d/mode%d", i, mode), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(i), 3))
				oh := (tc.h+tc.pads[0]+tc.pads[2]-3)/max(1, len(tc.strides)) + 1
				ow := (tc.w+tc.pads[1]+tc.pads[3]-3)/max(1, len(tc.strides)) + 1
				op := &ir.Conv{Pads: tc.pads, Strides: tc.strides, Epilogue: ir.Epilogue{Act: tc.act, Residual: tc.res}}
				ins := []in{f32in(tc.n, tc.c, tc.h, tc.w), randConst(r, tc.k, tc.c, 3, 3), absent}
				if tc.bias {
					ins[2] = randConst(r, tc.k)
				}
				if tc.res {
					ins = append(ins, f32in(tc.n, tc.k, oh, ow))
				}
				p := checkOpts(t, oneNode(op, 1, ins...), 1e-5, 1, Options{Threads: 2, Winograd: mode})
				_, isWino := p.steps[0].s.(*winoStep)
				if want := mode == winograd.On && tc.eligible; mode != winograd.Auto && isWino != want {
					t.Errorf("Winograd step %v, want %v", isWino, want)
				}
			})
		}
	}
}

// TestWinogradResNet18 runs full-width ResNet-18 (random weights, 64x64,
// batch 2) with every 3x3 stride-1 convolution as Winograd and with none,
// and holds the logits to the parity bound of the engine's checks.
func TestWinogradResNet18(t *testing.T) {
	if testing.Short() || raceOn {
		t.Skip("full-width ResNet-18 forwards (a minute under the race detector, which TestWinogradConv runs the kernels under); skipped in -short and -race")
	}
	ctx := context.Background()
	a, err := model.KnownArch("resnet18", 1000)
	if err != nil {
		t.Fatal(err)
	}
	sd, err := model.Init(ctx, a, 1)
	if err != nil {
		t.Fatal(err)
	}
	g, err := torchvision.Build("resnet18", sd, torchvision.Options{ImageSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	b, err := ir.Bind(g, 2)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 5))
	x := randTensor(r, b.Inputs[0].Type)
	var outs [2][]float32
	for i, mode := range []winograd.Mode{winograd.On, winograd.Off} {
		p, err := Compile(ctx, b, Options{Threads: 2, Winograd: mode})
		if err != nil {
			t.Fatal(err)
		}
		wino := 0
		for _, s := range p.steps {
			if _, ok := s.s.(*winoStep); ok {
				wino++
			}
		}
		if want := map[winograd.Mode]int{winograd.On: 13, winograd.Off: 0}[mode]; wino != want {
			t.Errorf("mode %d: %d Winograd steps, want %d", mode, wino, want)
		}
		e := p.NewExec()
		got, err := e.RunTensors(ctx, []*tensor.Tensor{x})
		e.Close()
		if err != nil {
			t.Fatal(err)
		}
		outs[i] = f32(got[0].Data)
	}
	var d, scale float64
	for i, w := range outs[1] {
		d = max(d, math.Abs(float64(outs[0][i]-w)))
		scale = max(scale, math.Abs(float64(w)))
	}
	t.Logf("max|winograd-direct|/max|direct| = %.3g", d/scale)
	if d > 1e-4*scale {
		t.Errorf("max|winograd-direct|/max|direct| = %.3g, want <= 1e-4", d/scale)
	}
}

// BenchmarkWinogradLayers times ResNet-18's 3x3 stride-1 convolutions
// (bias and ReLU fused) as Winograd and as direct GEMMs, per layer shape
// and batch, and reports CPU time per forward next to wall time.
// Run: go test -run XXX -bench WinogradLayers -cpu 1 ./internal/engine/cpu/irexec/
func BenchmarkWinogradLayers(b *testing.B) {
	for _, n := range []int{1, 32} {
		for _, l := range []struct{ c, hw int }{{64, 56}, {128, 28}, {256, 14}, {512, 7}} {
			for _, mode := range []winograd.Mode{winograd.On, winograd.Off} {
				name := map[winograd.Mode]string{winograd.On: "winograd", winograd.Off: "direct"}[mode]
				b.Run(fmt.Sprintf("bs%d/%dc%d/%s", n, l.c, l.hw, name), func(b *testing.B) {
					r := rand.New(rand.NewPCG(1, 1))
					op := &ir.Conv{Pads: []int{1, 1, 1, 1}, Epilogue: ir.Epilogue{Act: ir.ActRelu}}
					g := oneNode(op, 1, f32in(n, l.c, l.hw, l.hw), randConst(r, l.c, l.c, 3, 3), randConst(r, l.c))
					bg, err := ir.Bind(g, n)
					if err != nil {
						b.Fatal(err)
					}
					p, err := Compile(context.Background(), bg, Options{Winograd: mode})
					if err != nil {
						b.Fatal(err)
					}
					x := p.NewExec()
					defer x.Close()
					cpu := benchRuns(b, x, randTensor(r, bg.Inputs[0].Type))
					b.ReportMetric(float64(cpu)/1e6, "cpu-ms/op")
				})
			}
		}
	}
}
