package cuda

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"goinfer/internal/engine"
	"goinfer/internal/tensor"
)

// TestForwardHost checks engine.HostIO on both instance kinds (the ResNet
// engine's and the general graph's): a forward from and to page-locked
// host memory gives Forward's logits exactly, batch 1 and 2, and host
// memory the device cannot address is refused with ErrNotHostMapped.
func TestForwardHost(t *testing.T) {
	needGPU(t)
	graphModel := func(t *testing.T) (engine.Model, engine.Instance) {
		g := singleOutput(opCases()[0].g, 0)
		return withInstance(t)(Engine{}.LoadGraph(context.Background(), g, engine.Options{Precision: engine.FP16, Compile: true, MaxBatch: 2, BatchSizes: []int{1, 2}}))
	}
	for _, c := range []struct {
		name string
		load func(t *testing.T) (engine.Model, engine.Instance)
	}{
		{"resnet", func(t *testing.T) (engine.Model, engine.Instance) { return compiledFP16(t, 2, 32) }},
		{"graph", graphModel},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, inst := c.load(t)
			hio, ok := inst.(engine.HostIO)
			if !ok {
				t.Fatalf("%T does not implement engine.HostIO", inst)
			}
			info := m.Info()
			inBytes, outBytes := info.InputBytes(), info.OutputBytes()
			hin, err := m.Device().AllocHost(2 * inBytes)
			if err != nil {
				t.Fatal(err)
			}
			defer hin.Free()
			hout, err := m.Device().AllocHost(2 * outBytes)
			if err != nil {
				t.Fatal(err)
			}
			defer hout.Free()
			x := tensor.BytesF32(hin.Bytes())
			r := rand.New(rand.NewPCG(5, 6))
			for k := range x {
				x[k] = float32(r.NormFloat64())
			}
			for _, n := range []int{1, 2} {
				want := runForward(t, m, inst, hin.Bytes()[:n*inBytes], n)
				clear(hout.Bytes())
				if err := hio.ForwardHost(hin.Bytes()[:n*inBytes], hout.Bytes(), n); err != nil {
					t.Fatal(err)
				}
				if err := inst.Stream().Synchronize(); err != nil {
					t.Fatal(err)
				}
				if got := tensor.BytesF32(hout.Bytes()[:n*outBytes]); !slices.Equal(got, want) {
					t.Errorf("batch %d: in-place logits differ from Forward's (relative %.2e)", n, relErr(got, want))
				}
			}
			heap := make([]byte, inBytes)
			if err := hio.ForwardHost(heap, hout.Bytes(), 1); !errors.Is(err, engine.ErrNotHostMapped) {
				t.Errorf("ForwardHost from Go heap memory: %v, want ErrNotHostMapped", err)
			}
		})
	}
}
