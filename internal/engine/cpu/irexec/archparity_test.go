package irexec

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// TestArchParity runs full-size torchvision architectures (random
// weights, batch 1, the plan compiled for IREXEC_THREADS threads, default
// 16, whatever the cores: the many-worker splits run on any machine)
// against ir's float64 reference of the same graph, and reports the
// largest error relative to the largest output. It is a tool, not a
// check (the reference takes tens of seconds): it runs only with
// IREXEC_PARITY=arch[,arch] set, and fails past 1e-4.
func TestArchParity(t *testing.T) {
	archs := os.Getenv("IREXEC_PARITY")
	if archs == "" {
		t.Skip("a parity tool: set IREXEC_PARITY=resnet18,... to run it")
	}
	threads := envInt("IREXEC_THREADS", 16)
	ctx := context.Background()
	for _, arch := range strings.Split(archs, ",") {
		g, err := profileGraph(arch)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := ir.Bind(g, 1)
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := ir.Optimize(g, 1)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Compile(ctx, b, Options{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(1, 2))
		x := randTensor(r, ref.Inputs[0].Type)
		arr, err := ir.ArrayFromTensor(x)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ir.Evaluate(ctx, ref, map[string]*ir.Array{ref.Inputs[0].Name: arr})
		if err != nil {
			t.Fatal(err)
		}
		ex := p.NewExec()
		got, err := ex.RunTensors(ctx, []*tensor.Tensor{x})
		ex.Close()
		if err != nil {
			t.Fatal(err)
		}
		gv := f32(got[0].Data)
		scale, diff := 0.0, 0.0
		for i, w := range want[0].Data {
			scale = max(scale, math.Abs(w))
			diff = max(diff, math.Abs(float64(gv[i])-w))
		}
		t.Logf("%s, %d threads: max |got-ref| / max |ref| = %.3g (max |ref| %.3g)", arch, threads, diff/scale, scale)
		if diff > 1e-4*scale {
			t.Errorf("%s: relative error %.3g past 1e-4", arch, diff/scale)
		}
	}
}
