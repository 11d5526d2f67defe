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

// pwdwCase is an inverted residual block's front: a pointwise expansion
// (inC -> exp, act1) read by a depthwise convolution (k x k, stride,
// act2), optionally followed by a global average pooling (an SE block's
// squeeze) and the projection 1x1 back to inC with the block's input
// added where the shapes allow.
type pwdwCase struct {
	name           string
	n, inC, exp    int
	h, w, k, s     int
	act1, act2     ir.Activation
	pool, residual bool
	// expOut also makes the expansion's output a graph output; k1 gives
	// the expansion a 3x3 kernel instead (not pointwise).
	expOut, k1 bool
	// poolOnly makes the pooling the only output (a benchmark's single
	// output).
	poolOnly bool
}

func pwdwGraph(r *rand.Rand, c pwdwCase) *ir.Graph {
	g := &ir.Graph{Name: "pwdw"}
	cst := func(name string, shape ...int) *ir.Value {
		k := randConst(r, shape...)
		return &ir.Value{Name: name, Type: ir.Type{DType: tensor.Float32, Shape: k.c.Shape}, Const: k.c}
	}
	node := func(name string, op ir.Op, ins ...*ir.Value) *ir.Value {
		y := &ir.Value{Name: name + "_out"}
		n := &ir.Node{Name: name, Op: op, Inputs: ins, Outputs: []*ir.Value{y}}
		y.Producer = n
		g.Nodes = append(g.Nodes, n)
		return y
	}
	x := &ir.Value{Name: "x", Type: ir.Type{DType: tensor.Float32, Shape: tensor.Shape{c.n, c.inC, c.h, c.w}}}
	g.Inputs = []*ir.Value{x}
	ek, ep := 1, []int(nil)
	if c.k1 {
		ek, ep = 3, []int{1, 1, 1, 1}
	}
	e := node("expand", &ir.Conv{Group: 1, Pads: ep, Epilogue: ir.Epilogue{Act: c.act1}}, x, cst("we", c.exp, c.inC, ek, ek), cst("be", c.exp))
	p := c.k / 2
	d := node("dw", &ir.Conv{Group: c.exp, Strides: []int{c.s, c.s}, Pads: []int{p, p, p, p}, Epilogue: ir.Epilogue{Act: c.act2}},
		e, cst("wd", c.exp, 1, c.k, c.k), cst("bd", c.exp))
	out := d
	if c.pool {
		g.Outputs = append(g.Outputs, node("pool", &ir.GlobalPool{}, d))
	}
	if c.residual {
		ins := []*ir.Value{d, cst("wp", c.inC, c.exp, 1, 1), cst("bp", c.inC)}
		ep := ir.Epilogue{}
		if c.s == 1 {
			ins, ep.Residual = append(ins, x), true
		}
		out = node("project", &ir.Conv{Group: 1, Epilogue: ep}, ins...)
	}
	if !c.poolOnly {
		g.Outputs = append(g.Outputs, out)
	}
	if c.expOut {
		g.Outputs = append(g.Outputs, e)
	}
	return g
}

// TestPWDW checks the fused expansion + depthwise step against ir and
// against the two steps it replaces (same inputs, the fusion switched
// off), on 1, 2 and 3 threads: odd map sizes, strides 1 and 2, 3x3 and
// 5x5 kernels, every activation kind on either side, the SE pooling
// fused into the depthwise step, a following projection with and without
// the residual, batches of 1 and 3; and that the planner fuses exactly
// where the expansion is a pointwise convolution whose output only the
// depthwise step reads and whose map is large enough.
func TestPWDW(t *testing.T) {
	cases := []struct {
		pwdwCase
		fused bool
	}{
		{pwdwCase{name: "mnv3 features.2 shape", n: 1, inC: 16, exp: 64, h: 56, w: 56, k: 3, s: 2, act1: ir.ActRelu, act2: ir.ActRelu, residual: true}, true},
		{pwdwCase{name: "stride 1 odd 37x29 residual", n: 1, inC: 24, exp: 72, h: 37, w: 29, k: 3, s: 1, act1: ir.ActRelu, act2: ir.ActRelu, residual: true}, true},
		{pwdwCase{name: "5x5/2 odd 41x45 pool hardswish", n: 1, inC: 24, exp: 40, h: 41, w: 45, k: 5, s: 2, act1: ir.ActHardSwish, act2: ir.ActHardSwish, pool: true}, true},
		{pwdwCase{name: "5x5/1 pool silu no act", n: 1, inC: 40, exp: 120, h: 28, w: 28, k: 5, s: 1, act1: ir.ActSiLU, pool: true, residual: true}, true},
		{pwdwCase{name: "channels past a block 3x3/2 odd", n: 1, inC: 7, exp: 53, h: 51, w: 39, k: 3, s: 2, act2: ir.ActRelu}, true},
		{pwdwCase{name: "batch 3", n: 3, inC: 16, exp: 64, h: 33, w: 35, k: 3, s: 2, act1: ir.ActRelu, act2: ir.ActHardSwish, residual: true}, true},
		{pwdwCase{name: "batch 3 stride 1 pool", n: 3, inC: 16, exp: 48, h: 38, w: 40, k: 3, s: 1, act1: ir.ActRelu6, act2: ir.ActRelu, pool: true}, true},
		{pwdwCase{name: "expansion read elsewhere", n: 1, inC: 16, exp: 64, h: 40, w: 40, k: 3, s: 1, act1: ir.ActRelu, act2: ir.ActRelu, expOut: true}, false},
		{pwdwCase{name: "small map", n: 1, inC: 80, exp: 200, h: 14, w: 14, k: 3, s: 1, act1: ir.ActHardSwish, act2: ir.ActHardSwish}, false},
		{pwdwCase{name: "3x3 expansion", n: 1, inC: 16, exp: 64, h: 40, w: 40, k: 3, s: 1, act1: ir.ActRelu, act2: ir.ActRelu, k1: true}, false},
	}
	for _, c := range cases {
		for _, threads := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/threads=%d", c.name, threads), func(t *testing.T) {
				g := pwdwGraph(rand.New(rand.NewPCG(5, uint64(c.exp))), c.pwdwCase)
				p := checkOpts(t, g, 1e-5, 1, Options{Threads: threads, ExpandFusion: ExpandOn})
				var fused *pwdwStep
				for _, s := range p.steps {
					if f, ok := s.s.(*pwdwStep); ok {
						fused = f
					}
				}
				if (fused != nil) != c.fused {
					t.Fatalf("fused %v, want %v (%d steps)", fused != nil, c.fused, len(p.steps))
				}
				if fused != nil && (fused.dw.poolDst >= 0) != c.pool {
					t.Errorf("pooling fused %v, want %v", fused.dw.poolDst >= 0, c.pool)
				}
				unfused := func() *Plan {
					b, err := ir.Bind(g, 2)
					if err != nil {
						t.Fatal(err)
					}
					q, err := Compile(context.Background(), b, Options{Threads: threads})
					if err != nil {
						t.Fatal(err)
					}
					return q
				}()
				r := rand.New(rand.NewPCG(9, 9))
				in := randTensor(r, ir.Type{DType: tensor.Float32, Shape: tensor.Shape{c.n, c.inC, c.h, c.w}})
				run := func(p *Plan) []*tensor.Tensor {
					x := p.NewExec()
					defer x.Close()
					out, err := x.RunTensors(context.Background(), []*tensor.Tensor{in})
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				got, want := run(p), run(unfused)
				for i := range want {
					a, b := got[i].Float32s(), want[i].Float32s()
					var worst, scale float64
					for j := range b {
						worst = max(worst, math.Abs(float64(a[j]-b[j])))
						scale = max(scale, math.Abs(float64(b[j])))
					}
					if worst > 1e-5*scale {
						t.Errorf("output %d: max |fused - unfused| %g, %g of the largest", i, worst, worst/scale)
					}
				}
			})
		}
	}
}

// TestPWDWAllocatesNothing runs the fused step again and again: no
// allocation per forward, the same answer each time.
func TestPWDWAllocatesNothing(t *testing.T) {
	g := pwdwGraph(rand.New(rand.NewPCG(2, 3)), pwdwCase{n: 1, inC: 16, exp: 64, h: 56, w: 56, k: 3, s: 2, act1: ir.ActRelu, act2: ir.ActHardSwish, pool: true})
	b, err := ir.Bind(g, 1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(context.Background(), b, Options{Threads: 2, ExpandFusion: ExpandOn})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.steps[0].s.(*pwdwStep); !ok {
		t.Fatalf("step 0 is %T, want the fused step", p.steps[0].s)
	}
	x := p.NewExec()
	defer x.Close()
	in := randTensor(rand.New(rand.NewPCG(1, 1)), b.Inputs[0].Type)
	first, err := x.RunTensors(context.Background(), []*tensor.Tensor{in})
	if err != nil {
		t.Fatal(err)
	}
	out := [][]byte{make([]byte, len(first[0].Data)), make([]byte, len(first[1].Data))}
	ctx := context.Background()
	if n := testing.AllocsPerRun(10, func() {
		if err := x.Run(ctx, [][]byte{in.Data}, out); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Run allocates %v times per call, want 0", n)
	}
	for i := range out {
		if string(out[i]) != string(first[i].Data) {
			t.Errorf("output %d of a later run differs from the first", i)
		}
	}
}

// BenchmarkPWDW times MobileNetV3-Large's expansion + depthwise pairs at
// 224 (batch 1) fused and as the two steps, on one and two threads.
func BenchmarkPWDW(b *testing.B) {
	for _, c := range []pwdwCase{
		{name: "features.2", inC: 16, exp: 64, h: 112, w: 112, k: 3, s: 2, act1: ir.ActRelu, act2: ir.ActRelu},
		{name: "features.3", inC: 24, exp: 72, h: 56, w: 56, k: 3, s: 1, act1: ir.ActRelu, act2: ir.ActRelu},
		{name: "features.4", inC: 24, exp: 72, h: 56, w: 56, k: 5, s: 2, act1: ir.ActRelu, act2: ir.ActRelu, pool: true, poolOnly: true},
		{name: "features.5", inC: 40, exp: 120, h: 28, w: 28, k: 5, s: 1, act1: ir.ActRelu, act2: ir.ActRelu, pool: true, poolOnly: true},
		{name: "features.7", inC: 40, exp: 240, h: 28, w: 28, k: 3, s: 2, act1: ir.ActHardSwish, act2: ir.ActHardSwish},
	} {
		c.n = 1
		for _, threads := range []int{1, 2} {
			for _, fused := range []bool{false, true} {
				b.Run(fmt.Sprintf("%s/threads=%d/fused=%v", c.name, threads, fused), func(b *testing.B) {
					bg, err := ir.Bind(pwdwGraph(rand.New(rand.NewPCG(1, 2)), c), 1)
					if err != nil {
						b.Fatal(err)
					}
					mode := ExpandOff
					if fused {
						mode = ExpandOn
					}
					p, err := Compile(context.Background(), bg, Options{Threads: threads, ExpandFusion: mode})
					if err != nil {
						b.Fatal(err)
					}
					if _, ok := p.steps[0].s.(*pwdwStep); ok != fused {
						b.Fatalf("step 0 is %T, fused %v", p.steps[0].s, fused)
					}
					x := p.NewExec()
					defer x.Close()
					cpu := benchRuns(b, x, randTensor(rand.New(rand.NewPCG(1, 1)), bg.Inputs[0].Type))
					b.ReportMetric(float64(cpu)/1e3, "CPU-us/op")
				})
			}
		}
	}
}

// TestPWDWModes checks where each ExpandMode fuses: auto only for plans
// of several images, on for every batch, off never; and ParseExpandMode.
func TestPWDWModes(t *testing.T) {
	for _, c := range []struct {
		mode  ExpandMode
		n     int
		fused bool
	}{
		{ExpandAuto, 1, false}, {ExpandAuto, 2, true}, {ExpandOn, 1, true}, {ExpandOn, 4, true}, {ExpandOff, 1, false}, {ExpandOff, 4, false},
	} {
		t.Run(fmt.Sprintf("mode=%d/n=%d", c.mode, c.n), func(t *testing.T) {
			g := pwdwGraph(rand.New(rand.NewPCG(4, 4)), pwdwCase{n: c.n, inC: 16, exp: 64, h: 40, w: 40, k: 3, s: 2, act1: ir.ActRelu, act2: ir.ActRelu})
			b, err := ir.Bind(g, c.n)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Compile(context.Background(), b, Options{Threads: 2, ExpandFusion: c.mode})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := p.steps[0].s.(*pwdwStep); ok != c.fused {
				t.Errorf("step 0 is %T, want fused %v", p.steps[0].s, c.fused)
			}
		})
	}
	for in, want := range map[string]ExpandMode{"": ExpandOff, "auto": ExpandAuto, "on": ExpandOn, "off": ExpandOff} {
		if got, err := ParseExpandMode(in); err != nil || got != want {
			t.Errorf("ParseExpandMode(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseExpandMode("yes"); err == nil {
		t.Error("ParseExpandMode(yes) succeeded")
	}
}
