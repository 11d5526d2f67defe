package irexec

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// linearGraph is a classifier's Linear layer as PyTorch exports it: Gemm
// of rows x k inputs with n x k weights (transB), a bias, an activation.
func linearGraph(r *rand.Rand, rows, k, n int, a ir.Activation) *ir.Graph {
	return oneNode(&ir.Gemm{Alpha: 1, Beta: 1, TransB: true, Epilogue: ir.Epilogue{Act: a}}, 1,
		f32in(rows, k), randConst(r, n, k), randConst(r, n))
}

// BenchmarkGemv times MobileNetV3-Large's classifier layers (960 -> 1280
// with hard-swish, 1280 -> 1000) at a few rows on one and two threads, as
// dot products (mmGemvStep) and on mmStep. The weights are 4.9 and 5.1
// MB: the figure to read is the weight stream, GB/s.
func BenchmarkGemv(b *testing.B) {
	type shape struct {
		k, n int
		a    ir.Activation
	}
	for _, sh := range []shape{{960, 1280, ir.ActHardSwish}, {1280, 1000, ir.ActNone}} {
		for _, rows := range []int{1, 2, 3, 4, 6, 8} {
			for _, threads := range []int{1, 2} {
				for _, gemv := range []bool{false, true} {
					b.Run(fmt.Sprintf("%dx%dx%d/threads=%d/gemv=%v", rows, sh.k, sh.n, threads, gemv), func(b *testing.B) {
						g := linearGraph(rand.New(rand.NewPCG(1, 2)), rows, sh.k, sh.n, sh.a)
						bg, err := ir.Bind(g, 1)
						if err != nil {
							b.Fatal(err)
						}
						p, err := Compile(context.Background(), bg, Options{Threads: threads, mmOnly: !gemv})
						if err != nil {
							b.Fatal(err)
						}
						if _, ok := p.steps[0].s.(*mmGemvStep); ok != gemv {
							b.Skipf("planned as %s", describeStep(p.steps[0].s))
						}
						x := p.NewExec()
						defer x.Close()
						in := [][]byte{make([]byte, 4*rows*sh.k)}
						out := [][]byte{make([]byte, 4*rows*sh.n)}
						for b.Loop() {
							if err := x.Run(context.Background(), in, out); err != nil {
								b.Fatal(err)
							}
						}
						b.ReportMetric(float64(4*sh.k*sh.n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
					})
				}
			}
		}
	}
}

// TestGemvPlan checks which products the planner runs as dot products:
// few rows of an L read along its rows against constant weights, with
// any epilogue; not a transposed L of several rows, weights computed at
// run time or batched, or more than gemvMaxRows rows.
func TestGemvPlan(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	gemm := func(op ir.Gemm, ins ...in) *ir.Graph { return oneNode(&op, 1, ins...) }
	mm := func(e ir.Epilogue, ins ...in) *ir.Graph { return oneNode(&ir.MatMul{Epilogue: e}, 1, ins...) }
	lin := ir.Gemm{Alpha: 1, Beta: 1, TransB: true}
	cases := []struct {
		name string
		g    *ir.Graph
		gemv bool
	}{
		{"linear batch 1", linearGraph(r, 1, 960, 1280, ir.ActHardSwish), true},
		{"linear 2 rows", linearGraph(r, gemvMaxRows, 64, 30, ir.ActNone), true},
		{"linear past the rows bound", linearGraph(r, gemvMaxRows+1, 64, 30, ir.ActNone), false},
		{"linear large M", linearGraph(r, 197, 64, 30, ir.ActNone), false},
		{"weights k x n", gemm(ir.Gemm{Alpha: 1, Beta: 1}, f32in(1, 40), randConst(r, 40, 30)), true},
		{"alpha and beta, bias", gemm(ir.Gemm{Alpha: 0.5, Beta: 2, TransB: true}, f32in(2, 40), randConst(r, 30, 40), randConst(r, 30)), true},
		{"beta, runtime C", gemm(ir.Gemm{Alpha: 1, Beta: -1}, f32in(2, 40), randConst(r, 40, 30), f32in(2, 30)), true},
		{"beta, C per row", gemm(ir.Gemm{Alpha: 1, Beta: 0.5}, f32in(2, 40), randConst(r, 40, 30), randConst(r, 2, 1)), true},
		{"residual", gemm(ir.Gemm{Alpha: 1, Beta: 1, Epilogue: ir.Epilogue{Residual: true}}, f32in(1, 40), randConst(r, 40, 30), randConst(r, 30), f32in(1, 30)), true},
		// A transposed 1 x k L is one contiguous row.
		{"transposed L, one row", gemm(ir.Gemm{Alpha: 1, Beta: 1, TransA: true}, f32in(40, 1), randConst(r, 40, 30)), true},
		{"transposed L", gemm(ir.Gemm{Alpha: 1, Beta: 1, TransA: true}, f32in(40, 2), randConst(r, 40, 30)), false},
		{"runtime weights", gemm(lin, f32in(1, 40), f32in(30, 40)), false},
		{"matmul 2-D", mm(ir.Epilogue{}, f32in(1, 40), randConst(r, 40, 30)), true},
		{"matmul rows over batch dims", mm(ir.Epilogue{}, f32in(2, 1, 40), randConst(r, 40, 30)), true},
		{"matmul vector left", mm(ir.Epilogue{}, f32in(40), randConst(r, 40, 30)), true},
		{"matmul vector right", mm(ir.Epilogue{}, f32in(2, 40), randConst(r, 40)), true},
		{"matmul bias residual", mm(ir.Epilogue{Residual: true, Act: ir.ActGELU}, f32in(1, 1, 40), randConst(r, 40, 30), randConst(r, 30), f32in(1, 1, 30)), true},
		{"matmul too many rows", mm(ir.Epilogue{}, f32in(3, 1, 40), randConst(r, 40, 30)), false},
		{"matmul batched weights", mm(ir.Epilogue{}, f32in(2, 1, 40), randConst(r, 2, 40, 30)), false},
		{"matmul runtime weights", mm(ir.Epilogue{}, f32in(1, 40), f32in(40, 30)), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := ir.Bind(c.g, 1)
			if err != nil {
				t.Fatal(err)
			}
			for _, opts := range []Options{{Threads: 2}, {Threads: 2, mmOnly: true}} {
				p, err := Compile(context.Background(), b, opts)
				if err != nil {
					t.Fatal(err)
				}
				if len(p.steps) != 1 {
					t.Fatalf("%d steps, want 1", len(p.steps))
				}
				_, gemv := p.steps[0].s.(*mmGemvStep)
				_, mm := p.steps[0].s.(*mmStep)
				if want := c.gemv && !opts.mmOnly; gemv != want || mm == want {
					t.Errorf("mmOnly %v: planned %s, want mmGemvStep %v", opts.mmOnly, describeStep(p.steps[0].s), want)
				}
			}
		})
	}
}

// TestGemv checks the dot-product path's outputs against ir's float64
// reference and against mmStep on the same inputs, on 1 to 3 threads:
// odd sizes, more columns than a task, every activation, bias, Gemm's
// addends and a residual.
func TestGemv(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 7))
	acts := []ir.Epilogue{
		{Act: ir.ActNone}, {Act: ir.ActRelu}, {Act: ir.ActRelu6}, {Act: ir.ActClip, Lo: -0.5, Hi: 1.5},
		{Act: ir.ActSigmoid}, {Act: ir.ActSiLU}, {Act: ir.ActHardSwish}, {Act: ir.ActHardSigmoid, Alpha: 0.2, Beta: 0.5},
		{Act: ir.ActGELU}, {Act: ir.ActGELUTanh}, {Act: ir.ActLeakyRelu, Alpha: 0.01}, {Act: ir.ActTanh},
	}
	type tc struct {
		name string
		g    *ir.Graph
	}
	var cases []tc
	for _, e := range acts {
		cases = append(cases,
			tc{fmt.Sprintf("linear 1x37x29 act%d", e.Act), oneNode(&ir.Gemm{Alpha: 1, Beta: 1, TransB: true, Epilogue: e}, 1, f32in(1, 37), randConst(r, 29, 37), randConst(r, 29))},
			tc{fmt.Sprintf("matmul 2x300x70 act%d", e.Act), oneNode(&ir.MatMul{Epilogue: e}, 1, f32in(2, 1, 300), randConst(r, 300, 70), randConst(r, 70))})
	}
	cases = append(cases,
		tc{"classifier 1x960x1280", linearGraph(r, 1, 960, 1280, ir.ActHardSwish)},
		tc{"classifier 2x1280x1000", linearGraph(r, 2, 1280, 1000, ir.ActNone)},
		tc{"k below a vector", oneNode(&ir.Gemm{Alpha: 1, Beta: 1}, 1, f32in(2, 5), randConst(r, 5, 301))},
		tc{"one column", oneNode(&ir.MatMul{}, 1, f32in(2, 33), randConst(r, 33))},
		tc{"alpha beta bias", oneNode(&ir.Gemm{Alpha: 0.5, Beta: 2, TransB: true, Epilogue: ir.Epilogue{Act: ir.ActGELU}}, 1, f32in(2, 300), randConst(r, 20, 300), randConst(r, 20))},
		tc{"beta runtime C", oneNode(&ir.Gemm{Alpha: 1.5, Beta: -0.5}, 1, f32in(2, 300), randConst(r, 300, 20), f32in(2, 20))},
		tc{"beta C per row", oneNode(&ir.Gemm{Alpha: 1, Beta: 0.5}, 1, f32in(2, 300), randConst(r, 300, 20), randConst(r, 2, 1))},
		tc{"beta runtime C per column", oneNode(&ir.Gemm{Alpha: 1, Beta: 3}, 1, f32in(1, 64), randConst(r, 64, 150), f32in(150))},
		tc{"bias and residual", oneNode(&ir.Gemm{Alpha: 1, Beta: 1, TransB: true, Epilogue: ir.Epilogue{Residual: true, Act: ir.ActRelu}}, 1, f32in(2, 100), randConst(r, 230, 100), randConst(r, 230), f32in(2, 230))},
		tc{"matmul runtime bias residual", oneNode(&ir.MatMul{Epilogue: ir.Epilogue{Residual: true, Act: ir.ActTanh}}, 1, f32in(1, 2, 64), randConst(r, 64, 90), f32in(90), f32in(1, 2, 90))},
		tc{"transposed L one row", oneNode(&ir.Gemm{Alpha: 1, Beta: 1, TransA: true}, 1, f32in(77, 1), randConst(r, 77, 45))},
	)
	for _, c := range cases {
		for _, threads := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/threads=%d", c.name, threads), func(t *testing.T) {
				p := checkOpts(t, c.g, 1e-5, 1, Options{Threads: threads})
				if _, ok := p.steps[0].s.(*mmGemvStep); !ok {
					t.Fatalf("planned as %s", describeStep(p.steps[0].s))
				}
				sameAsMM(t, c.g, threads)
			})
		}
	}
}

// sameAsMM runs g (batch 1) as planned and on mmStep alone over the same
// random inputs and compares the outputs within float32 rounding of
// sums of k products.
func sameAsMM(t *testing.T, g *ir.Graph, threads int) {
	t.Helper()
	ctx := context.Background()
	b, err := ir.Bind(g, 1)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(11, 13))
	var ins []*tensor.Tensor
	for _, v := range b.Inputs {
		ins = append(ins, randTensor(r, v.Type))
	}
	var outs [2][]*tensor.Tensor
	for i, mmOnly := range []bool{false, true} {
		p, err := Compile(ctx, b, Options{Threads: threads, mmOnly: mmOnly})
		if err != nil {
			t.Fatal(err)
		}
		x := p.NewExec()
		outs[i], err = x.RunTensors(ctx, ins)
		x.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	got, want := f32(outs[0][0].Data), f32(outs[1][0].Data)
	scale := 1.0
	for _, v := range want {
		scale = max(scale, math.Abs(float64(v)))
	}
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*scale {
			t.Fatalf("output %d: %v, mmStep %v", i, got[i], want[i])
		}
	}
}
