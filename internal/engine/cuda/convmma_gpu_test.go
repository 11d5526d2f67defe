package cuda

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"goinfer/internal/engine"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
)

// TestConvMMA runs a full-width ResNet-18 (seeded weights, 224 px) with
// every convolution conv_mma can take forced onto it, split and unsplit,
// in fp16 and bf16, batch 1 (a captured graph) and 3 (odd), and checks its
// logits against the float32 eager forward (cuDNN) within the precision's
// tolerance, beside the same model on cuDNN alone; the profile must show
// the kernel in use.
func TestConvMMA(t *testing.T) {
	needGPU(t)
	a, err := model.KnownArch("resnet18", 1000)
	if err != nil {
		t.Fatal(err)
	}
	_, g, err := model.InitGraph(context.Background(), a, 7)
	if err != nil {
		t.Fatal(err)
	}
	const size, n = 224, 3
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, n*3*size*size)
	for k := range x {
		x[k] = float32(r.NormFloat64())
	}
	per := len(x) / n
	load := func(p engine.Precision, compile bool, exp string) (engine.Model, engine.Instance) {
		return withInstance(t)(Engine{}.Load(context.Background(), g, engine.Options{Compile: compile, Precision: p, MaxBatch: n,
			BatchSizes: []int{1, n}, Height: size, Width: size, InputDType: tensor.Float32, GraphExperiments: exp}))
	}
	m32, i32 := load(engine.FP32, false, "")
	ref := runForward(t, m32, i32, tensor.F32Bytes(x), n)
	classes := len(ref) / n
	for _, p := range []engine.Precision{engine.FP16, engine.BF16} {
		for _, exp := range []string{"nomma", "forcemma", "forcemma,mmanosplit"} {
			t.Run(fmt.Sprintf("%s/%s", p, exp), func(t *testing.T) {
				m, inst := load(p, true, exp)
				got := runForward(t, m, inst, tensor.F32Bytes(x), n)
				got1 := runForward(t, m, inst, tensor.F32Bytes(x[:per]), 1)
				e, e1 := relErr(got, ref), relErr(got1, ref[:classes])
				layers, err := inst.(Profiler).ProfileLayers(1, 3)
				if err != nil {
					t.Fatal(err)
				}
				mma := 0
				for _, l := range layers {
					if strings.HasPrefix(l.Algo, "conv_mma") {
						mma++
						if strings.Contains(exp, "mmanosplit") && l.Algo != "conv_mma split 1" {
							t.Errorf("%s runs %s under mmanosplit", l.Name, l.Algo)
						}
					}
				}
				t.Logf("rel err vs fp32: batch %d %.2e, batch 1 %.2e; %d convolutions on conv_mma at batch 1", n, e, e1, mma)
				if tol := tolerance[p]; !(e <= tol && e1 <= tol) {
					t.Errorf("relative error %.3e (batch %d), %.3e (batch 1) > %.0e", e, n, e1, tol)
				}
				switch {
				case exp == "nomma" && mma != 0:
					t.Errorf("%d convolutions on conv_mma under nomma", mma)
				case exp != "nomma" && mma != 20:
					t.Errorf("%d convolutions on conv_mma, want all 20 (the stem included)", mma)
				}
			})
		}
	}
}
