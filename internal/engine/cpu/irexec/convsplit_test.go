package irexec

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"goinfer/internal/engine/cpu/gemm"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

func TestChooseConvSplit(t *testing.T) {
	for _, c := range []struct {
		groups, ntot, m, workers int
		minTasks, maxTasks       int // 0: no bound
	}{
		{1, 49, 512, 1, 4, 4},     // as many as before: the pool runs them in turn
		{1, 49, 512, 2, 8, 8},     // the first fit: 4 per worker
		{1, 49, 512, 16, 16, 16},  // not 18 (two rounds for two)
		{1, 196, 256, 16, 16, 64}, // 14x14 maps
		{1, 784, 128, 16, 16, 64},
		{1, 3136, 64, 16, 16, 128},
		{4, 49, 64, 16, 4, 64},
		{1, 100352, 64, 16, 392, 0}, // batch 32: columns bound the task width
		{1, 100352, 64, 2, 392, 0},
		{1, 10, 5, 16, 1, 1},
		// Two workers: a task count they divide (the first fit's 3 x 3
		// and 7 x 1 left one worker a task more than the other).
		{1, 196, 672, 2, 8, 16},
		{1, 196, 1152, 2, 8, 16},
		{1, 784, 240, 2, 8, 16},
		{1, 3136, 144, 2, 8, 16},
	} {
		t.Run(fmt.Sprint(c.groups, c.ntot, c.m, c.workers), func(t *testing.T) {
			for _, shared := range []bool{false, true} {
				sp := chooseConvSplit(c.groups, c.ntot, c.m, c.workers, shared)
				np, mp := (c.ntot+gemm.NR-1)/gemm.NR, (c.m+gemm.MR-1)/gemm.MR
				if sp.nch < 1 || sp.nch > np || sp.mch < 1 || sp.mch > mp {
					t.Fatalf("split %+v of %d x %d panels", sp, np, mp)
				}
				if w := (np + sp.nch - 1) / sp.nch * gemm.NR; w > ncMax {
					t.Errorf("split %+v: %d columns a task, over %d", sp, w, ncMax)
				}
				tasks := c.groups * sp.nch * sp.mch
				if tasks < c.minTasks || c.maxTasks > 0 && tasks > c.maxTasks {
					t.Errorf("split %+v: %d tasks, want %d to %d", sp, tasks, c.minTasks, c.maxTasks)
				}
				if c.workers == 2 && tasks%2 != 0 {
					t.Errorf("split %+v: %d tasks for 2 workers", sp, tasks)
				}
			}
		})
	}
}

func TestEvenRanges(t *testing.T) {
	for _, c := range [][2]int{{1, 1}, {3, 10}, {16, 86}, {5, 5}, {7, 100}} {
		n, p := c[0], c[1]
		sum, lo, hi := 0, p, 0
		for i := range n {
			k := evenRange(i, n, p)
			if evenRange0(i, n, p) != sum {
				t.Errorf("range %d of %d over %d starts at %d, want %d", i, n, p, evenRange0(i, n, p), sum)
			}
			sum += k
			lo, hi = min(lo, k), max(hi, k)
		}
		if sum != p || hi-lo > 1 {
			t.Errorf("%d ranges over %d: total %d, sizes %d to %d", n, p, sum, lo, hi)
		}
	}
}

// TestConvManyThreads runs convolutions split for many workers (on
// however many cores there are) and checks them against the reference and,
// with K splits off, bit for bit against one thread: a split of rows and
// columns moves no sum across tasks (a K split does, see TestConvKSplit).
func TestConvManyThreads(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		name                     string
		n, c, h, w, m, k, stride int
	}{
		{"3x3 7x7 deep", 1, 300, 7, 7, 200, 3, 1},
		{"3x3 s2 to 7x7", 1, 64, 14, 14, 130, 3, 2},
		{"1x1 s2 to 7x7", 1, 96, 14, 14, 200, 1, 2},
		{"3x3 14x14", 2, 32, 14, 14, 70, 3, 1},
		{"1x1 28x28", 1, 24, 28, 28, 40, 1, 1},
		{"7x7 s2 stem (direct taps)", 1, 3, 60, 60, 20, 7, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			op := &ir.Conv{Strides: []int{c.stride, c.stride}, Pads: []int{c.k / 2, c.k / 2, c.k / 2, c.k / 2}, Epilogue: ir.Epilogue{Act: ir.ActRelu}}
			g := oneNode(op, 1, f32in(c.n, c.c, c.h, c.w), randConst(r, c.m, c.c, c.k, c.k), randConst(r, c.m))
			var outs [][]byte
			defer func() { kSplitForce = nil }()
			for _, threads := range []int{1, 3, 16} {
				kSplitForce = nil
				checkOpts(t, g, 1e-5, 5, Options{Threads: threads})
				kSplitForce = &[2]int{}
				outs = append(outs, runRandom(t, checkOpts(t, g, 1e-5, 5, Options{Threads: threads}), 9))
			}
			for i := 1; i < len(outs); i++ {
				if !bytes.Equal(outs[0], outs[i]) {
					t.Errorf("run %d differs from one thread's", i)
				}
			}
		})
	}
}

// runRandom runs p on seeded random inputs and returns its first output's
// bytes.
func runRandom(t *testing.T, p *Plan, seed uint64) []byte {
	t.Helper()
	x := p.NewExec()
	defer x.Close()
	got, err := x.RunTensors(context.Background(), randomInputs(p, seed))
	if err != nil {
		t.Fatal(err)
	}
	return got[0].Data
}

// TestConvKSplit runs convolutions whose reduction is split into K ranges
// (forced, and as chosen for 16 workers) against the reference, with
// every epilogue the reduction applies.
func TestConvKSplit(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	defer func() { kSplitForce = nil }()
	for _, c := range []struct {
		name                        string
		n, c, h, w, m, k, stride, p int
		ep                          ir.Epilogue
		force                       *[2]int
	}{
		{"7x7 deep, chosen", 1, 300, 7, 7, 200, 3, 1, 1, ir.Epilogue{Act: ir.ActRelu}, nil},
		{"7x7 deep residual, 2 K ranges", 1, 300, 7, 7, 200, 3, 1, 1, ir.Epilogue{Act: ir.ActRelu, Residual: true}, &[2]int{4, 2}},
		{"7x7 deep, a K range a block", 1, 300, 7, 7, 200, 3, 1, 1, ir.Epilogue{}, &[2]int{1, 99}},
		{"s2 to 7x7 hardswish, 3 K ranges", 1, 100, 14, 14, 130, 3, 2, 1, ir.Epilogue{Act: ir.ActHardSwish, Residual: true}, &[2]int{3, 3}},
		{"two images, 5 K ranges", 2, 300, 5, 5, 40, 3, 1, 1, ir.Epilogue{Act: ir.ActRelu}, &[2]int{2, 5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			kSplitForce = c.force
			op := &ir.Conv{Strides: []int{c.stride, c.stride}, Pads: []int{c.p, c.p, c.p, c.p}, Epilogue: c.ep}
			ins := []in{f32in(c.n, c.c, c.h, c.w), randConst(r, c.m, c.c, c.k, c.k), randConst(r, c.m)}
			if c.ep.Residual {
				oh := (c.h+2*c.p-c.k)/c.stride + 1
				ins = append(ins, f32in(c.n, c.m, oh, (c.w+2*c.p-c.k)/c.stride+1))
			}
			g := oneNode(op, 1, ins...)
			p := checkOpts(t, g, 1e-5, 5, Options{Threads: 16})
			x := p.NewExec()
			defer x.Close()
			if _, err := x.RunTensors(context.Background(), randomInputs(p, 3)); err != nil {
				t.Fatal(err)
			}
			split := false
			for s, sp := range x.convSplits {
				split = split || sp.kch > 1 && s.groups == 1
			}
			if !split {
				t.Errorf("no convolution split its reduction: %v", x.convSplits)
			}
		})
	}
}

// randomInputs is seeded random inputs for p.
func randomInputs(p *Plan, seed uint64) []*tensor.Tensor {
	r := rand.New(rand.NewPCG(seed, 1))
	var ins []*tensor.Tensor
	for _, v := range p.inputs {
		x := tensor.New(tensor.Float32, p.vals[v].shape...)
		for i := range f32(x.Data) {
			f32(x.Data)[i] = float32(r.NormFloat64())
		}
		ins = append(ins, x)
	}
	return ins
}

func TestChooseKSplit(t *testing.T) {
	for _, c := range []struct {
		name                       string
		ntot, m, nb, maxK, workers int
		wantK                      bool
		maxRows                    int // the most row ranges a K split may have
	}{
		{"stage 4, 16 workers", 49, 512, 18, 18, 16, true, kSplitMaxRows},
		{"stage 4, 8 workers", 49, 512, 18, 18, 8, true, kSplitMaxRows},
		{"stage 4, 2 workers", 49, 512, 18, 18, 2, true, 1},
		{"stage 4, 3 workers", 49, 512, 18, 18, 3, true, 1},
		{"stage 4, 1 worker", 49, 512, 18, 18, 1, false, 0},
		{"stride-2 into stage 4, 2 workers", 49, 512, 9, 18, 2, true, 2},
		{"stride-2 into stage 4, 3 workers", 49, 512, 9, 18, 3, true, 1},
		{"partial sums do not fit", 49, 512, 18, 1, 16, false, 0},
		{"one K-block", 49, 512, 1, 18, 16, false, 0},
		{"14x14 map", 196, 256, 5, 5, 16, false, 0},
		{"batch 2 of 7x7", 98, 512, 18, 18, 16, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			sp := chooseConvSplit(1, c.ntot, c.m, c.workers, true)
			ks := chooseKSplit(sp, c.ntot, c.m, c.nb, c.maxK, c.workers)
			if got := ks.kch > 1; got != c.wantK {
				t.Fatalf("split %+v from %+v: K split %v, want %v", ks, sp, got, c.wantK)
			}
			if !c.wantK {
				if ks != sp {
					t.Errorf("split %+v, want %+v unchanged", ks, sp)
				}
				return
			}
			if ks.kch > min(c.nb, c.maxK) || ks.mch < 1 || ks.mch > c.maxRows || ks.nch != sp.nch {
				t.Errorf("split %+v from %+v: K ranges over %d blocks (at most %d), rows at most %d", ks, sp, c.nb, c.maxK, c.maxRows)
			}
			if tasks := ks.nch * ks.mch * ks.kch; tasks < c.workers {
				t.Errorf("split %+v: %d tasks for %d workers", ks, tasks, c.workers)
			}
			if tasks := ks.nch * ks.mch * ks.kch; c.workers < kSplitMinWorkers && (c.nb%ks.kch != 0 || tasks%c.workers != 0) {
				t.Errorf("split %+v: K ranges of unequal blocks (%d) or tasks (%d) the %d workers do not divide", ks, c.nb, tasks, c.workers)
			}
		})
	}
	defer func() { kSplitForce = nil }()
	kSplitForce = &[2]int{}
	if ks := chooseKSplit(convSplit{1, 16, 1}, 49, 512, 18, 18, 16); ks.kch != 1 {
		t.Errorf("K splits off: got %+v", ks)
	}
	kSplitForce = &[2]int{2, 50}
	if ks := chooseKSplit(convSplit{1, 16, 1}, 49, 512, 18, 18, 16); ks != (convSplit{1, 2, 18}) {
		t.Errorf("forced 2 row ranges, 50 K ranges: got %+v, want {1 2 18}", ks)
	}
}
