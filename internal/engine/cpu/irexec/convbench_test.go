package irexec

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"goinfer/internal/cputime"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// BenchmarkConvLayers times ResNet-18's direct (non-Winograd) convolutions
// at batch 1 on one thread: the stem, the three stride-2 3x3s and stage
// 4's 3x3 on 7x7 maps. CPU-us/op is the process's CPU time per forward,
// steadier than wall time on a shared machine.
func BenchmarkConvLayers(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		name          string
		c, h, m, k, s int
	}{
		{"stem7x7s2", 3, 224, 64, 7, 2},
		{"3x3s2-64-128", 64, 56, 128, 3, 2},
		{"3x3s2-128-256", 128, 28, 256, 3, 2},
		{"3x3s2-256-512", 256, 14, 512, 3, 2},
		{"3x3-512-7x7", 512, 7, 512, 3, 1},
	} {
		b.Run(c.name, func(b *testing.B) {
			p := c.k / 2
			op := &ir.Conv{Strides: []int{c.s, c.s}, Pads: []int{p, p, p, p}, Epilogue: ir.Epilogue{Act: ir.ActRelu}}
			g := oneNode(op, 1, f32in(1, c.c, c.h, c.h), randConst(r, c.m, c.c, c.k, c.k), randConst(r, c.m))
			bound, err := ir.Bind(g, 1)
			if err != nil {
				b.Fatal(err)
			}
			prog, err := Compile(context.Background(), bound, Options{Threads: 1})
			if err != nil {
				b.Fatal(err)
			}
			x := prog.NewExec()
			cpu := benchRuns(b, x, randTensor(r, bound.Inputs[0].Type))
			b.ReportMetric(float64(cpu)/1e3, "CPU-us/op")
		})
	}
}

// benchRuns times x's forwards of in in b's loop (after one to set up its
// outputs) and returns the process CPU time per forward.
func benchRuns(b *testing.B, x *Exec, in *tensor.Tensor) time.Duration {
	b.Helper()
	outs, err := x.RunTensors(context.Background(), []*tensor.Tensor{in})
	if err != nil {
		b.Fatal(err)
	}
	ib, ob := [][]byte{in.Data}, [][]byte{outs[0].Data}
	cpu0 := cputime.Process()
	for b.Loop() {
		if err := x.Run(context.Background(), ib, ob); err != nil {
			b.Fatal(err)
		}
	}
	return (cputime.Process() - cpu0) / time.Duration(b.N)
}
