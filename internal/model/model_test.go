package model

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"goinfer/internal/checkpoint"
	"goinfer/internal/tensor"
)

func narrow(block BlockKind, layers []int, base, classes int) Arch {
	groups, wpg := 1, 64
	return NewArch(block, layers, base, classes, groups, wpg)
}

func TestKnownArchParamCounts(t *testing.T) {
	// Parameter counts of torchvision's models (weights incl. BN running stats
	// are what a state dict holds; torchvision quotes trainable params only).
	tests := []struct {
		name      string
		trainable int64
	}{
		{"resnet18", 11689512},
		{"resnet34", 21797672},
		{"resnet50", 25557032},
		{"wide_resnet50_2", 68883240},
		{"resnext50_32x4d", 25028904},
	}
	for _, tt := range tests {
		a, err := KnownArch(tt.name, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, p := range a.Params() {
			if p.Optional || strings.HasSuffix(p.Name, "running_mean") || strings.HasSuffix(p.Name, "running_var") {
				continue
			}
			n += int64(p.Shape.NumElements())
		}
		if n != tt.trainable {
			t.Errorf("%s: %d trainable params, want %d", tt.name, n, tt.trainable)
		}
		if got := a.Name(); got != tt.name {
			t.Errorf("Name() = %q, want %q", got, tt.name)
		}
	}
}

func relErr(got []float32, ref []float64) float64 {
	var maxDiff, maxRef float64
	for i := range ref {
		maxDiff = math.Max(maxDiff, math.Abs(float64(got[i])-ref[i]))
		maxRef = math.Max(maxRef, math.Abs(ref[i]))
	}
	return maxDiff / maxRef
}

func randInput(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func TestInferArchRoundTrip(t *testing.T) {
	ctx := context.Background()
	for _, a := range []Arch{
		narrow(Basic, []int{2, 2, 2, 2}, 8, 10),
		narrow(Bottleneck, []int{1, 2, 1, 1}, 8, 7),
		NewArch(Bottleneck, []int{1, 1, 1, 1}, 8, 5, 4, 8),
	} {
		sd, err := Init(ctx, a, 1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := InferArch(sd)
		if err != nil {
			t.Fatal(err)
		}
		if !archEqual(got, a) {
			t.Errorf("inferred %+v, want %+v", got, a)
		}
		if _, err := FromStateDict(sd); err != nil {
			t.Fatalf("%s: %v", a.Name(), err)
		}
	}
}

func TestFuseMatchesEager(t *testing.T) {
	ctx := context.Background()
	for _, a := range []Arch{
		narrow(Basic, []int{2, 2, 2, 2}, 8, 10),
		NewArch(Bottleneck, []int{1, 2, 1, 1}, 8, 7, 2, 64),
	} {
		sd, err := Init(ctx, a, 2)
		if err != nil {
			t.Fatal(err)
		}
		g, err := FromStateDict(sd)
		if err != nil {
			t.Fatal(err)
		}
		f, err := Fuse(g)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range f.Nodes {
			if n.Op == OpBatchNorm || n.Op == OpReLU || n.Op == OpAdd {
				t.Errorf("%s: fused graph still has %s node %s", a.Name(), n.Op, n.Name)
			}
		}
		x := randInput(3, 3*3*40*40)
		ref, err := g.Reference(ctx, x, 3, 40, 40)
		if err != nil {
			t.Fatal(err)
		}
		got, err := f.Reference(ctx, x, 3, 40, 40)
		if err != nil {
			t.Fatal(err)
		}
		g32 := make([]float32, len(got))
		for i, v := range got {
			g32[i] = float32(v)
		}
		if e := relErr(g32, ref); e > 1e-5 {
			t.Errorf("%s: fused vs eager rel err %g", a.Name(), e)
		}
	}
}

func TestCheckParamsErrors(t *testing.T) {
	ctx := context.Background()
	a := narrow(Basic, []int{1, 1, 1, 1}, 8, 10)
	tests := []struct {
		name   string
		mutate func(sd *checkpoint.StateDict)
		want   string
	}{
		{"missing", func(sd *checkpoint.StateDict) {
			n := checkpoint.NewStateDict()
			for _, k := range sd.Names() {
				if k != "layer2.0.bn1.running_var" {
					t, _ := sd.Get(k)
					n.Set(k, t)
				}
			}
			*sd = *n
		}, `missing key "layer2.0.bn1.running_var" (want shape [16])`},
		{"extra", func(sd *checkpoint.StateDict) {
			sd.Set("layer9.extra", tensor.New(tensor.Float32, 3))
		}, `unexpected key "layer9.extra" (shape [3])`},
		{"shape", func(sd *checkpoint.StateDict) {
			sd.Set("layer3.0.conv2.weight", tensor.New(tensor.Float32, 32, 32, 3, 1))
		}, `key "layer3.0.conv2.weight" has shape [32 32 3 1], want [32 32 3 3]`},
		{"notresnet", func(sd *checkpoint.StateDict) {
			*sd = *checkpoint.NewStateDict()
			sd.Set("encoder.weight", tensor.New(tensor.Float32, 3))
		}, `no key "conv1.weight"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sd, err := Init(ctx, a, 1)
			if err != nil {
				t.Fatal(err)
			}
			tt.mutate(sd)
			_, err = FromStateDict(sd)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %s", err, tt.want)
			}
		})
	}
}

func TestShapes(t *testing.T) {
	sd, err := Init(context.Background(), narrow(Basic, []int{1, 1, 1, 1}, 8, 10), 1)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := FromStateDict(sd)
	if _, err := g.Shapes(0, 8); err == nil || !strings.Contains(err.Error(), "not positive") {
		t.Fatalf("want a not-positive error, got %v", err)
	}
	d, err := g.Shapes(224, 224)
	if err != nil {
		t.Fatal(err)
	}
	if out := d[g.Output]; out != (Dims{10, 1, 1}) {
		t.Fatalf("output dims %v", out)
	}
}

func TestResNet18MACs(t *testing.T) {
	a, _ := KnownArch("resnet18", 1000)
	sd := checkpoint.NewStateDict()
	for _, p := range a.Params() {
		sd.Set(p.Name, tensor.New(tensor.Float32, p.Shape...))
	}
	g, err := FromStateDict(sd)
	if err != nil {
		t.Fatal(err)
	}
	m, err := g.MACs(224, 224)
	if err != nil {
		t.Fatal(err)
	}
	// torchvision quotes 1.81 GFLOPS (meaning MACs) for resnet18 at 224.
	if m < 1.80e9 || m > 1.83e9 {
		t.Fatalf("resnet18 MACs at 224 = %d", m)
	}
}

func TestInitGraphMatchesFromStateDict(t *testing.T) {
	ctx := context.Background()
	for _, a := range []Arch{
		narrow(Basic, []int{1, 1, 1, 1}, 8, 10),
		NewArch(Bottleneck, []int{1, 1, 1, 1}, 8, 5, 4, 8),
	} {
		sd, g, err := InitGraph(ctx, a, 4)
		if err != nil {
			t.Fatal(err)
		}
		want, err := FromStateDict(sd)
		if err != nil {
			t.Fatal(err)
		}
		if !archEqual(g.Arch, want.Arch) || len(g.Nodes) != len(want.Nodes) {
			t.Fatalf("%s: InitGraph's graph is %+v with %d nodes, FromStateDict's %+v with %d", a.Name(), g.Arch, len(g.Nodes), want.Arch, len(want.Nodes))
		}
		x := randInput(5, 2*3*32*32)
		got, err := g.Reference(ctx, x, 2, 32, 32)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := want.Reference(ctx, x, 2, 32, 32)
		if err != nil {
			t.Fatal(err)
		}
		for i := range ref {
			if got[i] != ref[i] {
				t.Fatalf("%s: logit %d is %v, want %v", a.Name(), i, got[i], ref[i])
			}
		}
	}
}
