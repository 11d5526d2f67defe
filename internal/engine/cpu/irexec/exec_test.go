package irexec

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"goinfer/internal/engine/cpu/parallel"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// chain builds a small CNN: conv-relu, depthwise conv, residual add,
// pooling, flatten and a linear layer, with several consumers per value.
func chain(r *rand.Rand) *ir.Graph {
	g := &ir.Graph{Name: "chain"}
	val := func(name string) *ir.Value { return &ir.Value{Name: name} }
	cst := func(name string, shape ...int) *ir.Value {
		c := randConst(r, shape...)
		return &ir.Value{Name: name, Type: ir.Type{DType: tensor.Float32, Shape: c.c.Shape}, Const: c.c}
	}
	x := &ir.Value{Name: "x", Type: ir.Type{DType: tensor.Float32, Shape: tensor.Shape{ir.Dynamic, 3, 16, 16}}}
	g.Inputs = []*ir.Value{x}
	node := func(op ir.Op, ins ...*ir.Value) *ir.Value {
		out := val(fmt.Sprintf("v%d", len(g.Nodes)))
		n := &ir.Node{Name: fmt.Sprintf("n%d", len(g.Nodes)), Op: op, Inputs: ins, Outputs: []*ir.Value{out}}
		out.Producer = n
		g.Nodes = append(g.Nodes, n)
		return out
	}
	a := node(&ir.Conv{Pads: []int{1, 1, 1, 1}, Epilogue: ir.Epilogue{Act: ir.ActRelu}}, x, cst("w1", 8, 3, 3, 3), cst("b1", 8))
	b := node(&ir.Conv{Pads: []int{1, 1, 1, 1}, Group: 8}, a, cst("w2", 8, 1, 3, 3))
	c := node(&ir.Binary{Fn: ir.OpAdd}, a, b)
	d := node(&ir.Unary{Fn: ir.OpSigmoid}, c)
	e := node(&ir.Binary{Fn: ir.OpMul}, c, d)
	f := node(&ir.Pool{Max: true, Kernel: []int{2, 2}, Strides: []int{2, 2}}, e)
	h := node(&ir.GlobalPool{}, f)
	i := node(&ir.Flatten{Axis: 1}, h)
	j := node(&ir.Gemm{Alpha: 1, Beta: 1, TransB: true}, i, cst("w3", 5, 8), cst("b3", 5))
	k := node(&ir.Softmax{Axis: 1}, j)
	g.Outputs = []*ir.Value{k, j}
	return g
}

func compileChain(t *testing.T, batch, threads int) *Plan {
	t.Helper()
	b, err := ir.Bind(chain(rand.New(rand.NewPCG(9, 9))), batch)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(context.Background(), b, Options{Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestGraph(t *testing.T) {
	check(t, chain(rand.New(rand.NewPCG(9, 9))), 1e-5)
}

func TestArenaReuse(t *testing.T) {
	p := compileChain(t, 4, 1)
	var sum int64
	for _, v := range p.vals {
		if v.kind == kindArena {
			sum += int64(v.nbytes)
		}
	}
	slots, _, _, _, _ := p.arenaLayout()
	if got := int64(len(slots)); got >= int64(len(p.vals)) {
		t.Errorf("%d slots for %d values", got, len(p.vals))
	}
	var slotBytes int64
	for _, b := range p.slotBytes {
		slotBytes += int64(b)
	}
	if got := slotBytes; got >= sum {
		t.Errorf("arena holds %d bytes, as much as all %d bytes of activations: nothing is shared", got, sum)
	}
	// Values sharing a slot must not be live at once: rerun with every
	// slot poisoned and compare with a fresh run.
	x := p.NewExec()
	defer x.Close()
	r := rand.New(rand.NewPCG(1, 1))
	in := randTensor(r, ir.Type{DType: tensor.Float32, Shape: tensor.Shape{4, 3, 16, 16}})
	a, err := x.RunTensors(context.Background(), []*tensor.Tensor{in})
	if err != nil {
		t.Fatal(err)
	}
	for i := range x.arena {
		x.arena[i] = 0xff
	}
	b, err := x.RunTensors(context.Background(), []*tensor.Tensor{in})
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if string(a[i].Data) != string(b[i].Data) {
			t.Fatalf("output %d depends on the arena's previous contents", i)
		}
	}
}

func TestRunAllocatesNothing(t *testing.T) {
	p := compileChain(t, 2, 2)
	x := p.NewExec()
	defer x.Close()
	in := [][]byte{make([]byte, 2*3*16*16*4)}
	out := [][]byte{make([]byte, 2*5*4), make([]byte, 2*5*4)}
	ctx := context.Background()
	if err := x.Run(ctx, in, out); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(20, func() {
		if err := x.Run(ctx, in, out); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Run allocates %v times per call, want 0", n)
	}
}

// TestCloneConcurrent runs clones of one Exec on several goroutines (under
// -race) and checks each gets the single-threaded answer.
func TestCloneConcurrent(t *testing.T) {
	p := compileChain(t, 3, 2)
	base := p.NewExec()
	defer base.Close()
	r := rand.New(rand.NewPCG(2, 2))
	inputs := make([]*tensor.Tensor, 4)
	want := make([][]*tensor.Tensor, 4)
	for i := range inputs {
		inputs[i] = randTensor(r, ir.Type{DType: tensor.Float32, Shape: tensor.Shape{3, 3, 16, 16}})
		var err error
		if want[i], err = base.RunTensors(context.Background(), inputs[i:i+1]); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := 0; w < 4; w++ {
		x := base.Clone()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer x.Close()
			for it := 0; it < 5; it++ {
				i := (w + it) % len(inputs)
				got, err := x.RunTensors(context.Background(), inputs[i:i+1])
				if err != nil {
					errs <- err
					return
				}
				for o := range got {
					if string(got[o].Data) != string(want[i][o].Data) {
						errs <- fmt.Errorf("worker %d input %d output %d differs", w, i, o)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// cancelAfter is a context whose Err turns non-nil after a number of
// calls, so that cancellation lands between two particular steps.
type cancelAfter struct {
	context.Context
	calls, after int
}

func (c *cancelAfter) Err() error {
	c.calls++
	if c.calls > c.after {
		return context.Canceled
	}
	return nil
}

func TestRunCancelledBetweenSteps(t *testing.T) {
	p := compileChain(t, 1, 1)
	x := p.NewExec()
	defer x.Close()
	in := [][]byte{make([]byte, 3*16*16*4)}
	out := [][]byte{make([]byte, 5*4), make([]byte, 5*4)}
	for after := 0; after < p.Steps(); after++ {
		ctx := &cancelAfter{Context: context.Background(), after: after}
		err := x.Run(ctx, in, out)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled after %d steps: got %v", after, err)
		}
		if ctx.calls != after+1 {
			t.Fatalf("cancelled after %d steps: context checked %d times", after, ctx.calls)
		}
	}
	// And an uncancelled run still works afterwards.
	if err := x.Run(context.Background(), in, out); err != nil {
		t.Fatal(err)
	}
}

func TestRunBadBuffers(t *testing.T) {
	p := compileChain(t, 1, 1)
	x := p.NewExec()
	out := [][]byte{make([]byte, 5*4), make([]byte, 5*4)}
	for _, tc := range []struct {
		in, out [][]byte
		want    string
	}{
		{[][]byte{make([]byte, 7)}, out, `input "x": got 7 bytes`},
		{nil, out, "Run with 0 inputs"},
		{[][]byte{make([]byte, 3*16*16*4)}, [][]byte{make([]byte, 20), make([]byte, 3)}, "3-byte buffer"},
	} {
		if err := x.Run(context.Background(), tc.in, tc.out); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error containing %q", err, tc.want)
		}
	}
	x.Close()
	if err := x.Run(context.Background(), nil, nil); err == nil {
		t.Error("Run on a closed Exec succeeded")
	}
}

func TestCompileUnsupported(t *testing.T) {
	g := oneNode(&ir.Pool{Max: true, Kernel: []int{2, 2}, WantIndices: true}, 2, f32in(1, 2, 4, 4))
	g.Name = "g"
	two := oneNode(&ir.Unary{Fn: ir.OpSin}, 1, in{dt: tensor.Int64, shape: []int{3}})
	n := two.Nodes[0]
	// A second unsupported node of a kind already reported adds nothing.
	g.Nodes = append(g.Nodes, n, &ir.Node{Name: "again", Op: n.Op, Inputs: n.Inputs, Outputs: []*ir.Value{{Name: "z"}}})
	g.Nodes[2].Outputs[0].Producer = g.Nodes[2]
	n.Outputs[0].Producer = n
	g.Inputs = append(g.Inputs, two.Inputs...)
	g.Outputs = append(g.Outputs, n.Outputs[0], g.Nodes[2].Outputs[0])
	n.Name = "sin"
	b, err := ir.Bind(g, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Compile(context.Background(), b, Options{})
	if !errors.Is(err, ErrUnsupported) || !errors.Is(err, ir.ErrUnsupported) {
		t.Fatalf("got %v, want ErrUnsupported and ir.ErrUnsupported", err)
	}
	msg := err.Error()
	for _, want := range []string{"MaxPool with indices", `Sin int64 (first at node "sin"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	if strings.Contains(msg, "again") {
		t.Errorf("error %q names a second node of a kind already listed", msg)
	}
}

// TestPackedWeightsNotCopied checks that constants only packed at compile
// time (convolution and linear weights) leave no second copy in the cache,
// while constants read at run time are kept.
func TestPackedWeightsNotCopied(t *testing.T) {
	p := compileChain(t, 1, 1)
	for _, v := range p.vals {
		if v.kind != kindConst {
			continue
		}
		runtime := v.name == "none" // the chain reads no constant at run time
		if (v.cnst != nil) != runtime {
			t.Errorf("constant %q: copied %v", v.name, v.cnst != nil)
		}
	}
	g := oneNode(&ir.Binary{Fn: ir.OpAdd}, 1, f32in(3), f32c([]int{3}, 1, 2, 3))
	b, err := ir.Bind(g, 1)
	if err != nil {
		t.Fatal(err)
	}
	q, err := Compile(context.Background(), b, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range q.vals {
		if v.kind == kindConst && v.cnst == nil {
			t.Errorf("constant %q read by Add was not kept", v.name)
		}
	}
}

// TestExecShared runs Execs of two batch sizes on one pool and one arena,
// alternately, and checks them against Execs of their own.
func TestExecShared(t *testing.T) {
	p1, p3 := compileChain(t, 1, 2), compileChain(t, 3, 2)
	pool := parallel.New(2)
	defer pool.Close()
	arena := NewArena(max(p1.ArenaBytes(), p3.ArenaBytes()))
	if _, err := p3.NewExecShared(pool, arena[:10]); err == nil {
		t.Error("NewExecShared with a short arena succeeded")
	}
	s1, err := p1.NewExecShared(pool, arena)
	if err != nil {
		t.Fatal(err)
	}
	s3, err := p3.NewExecShared(pool, arena)
	if err != nil {
		t.Fatal(err)
	}
	o1, o3 := p1.NewExec(), p3.NewExec()
	defer o1.Close()
	defer o3.Close()
	r := rand.New(rand.NewPCG(5, 5))
	for it := 0; it < 3; it++ {
		for _, c := range []struct {
			shared, own *Exec
			n           int
		}{{s1, o1, 1}, {s3, o3, 3}} {
			in := []*tensor.Tensor{randTensor(r, ir.Type{DType: tensor.Float32, Shape: tensor.Shape{c.n, 3, 16, 16}})}
			a, err := c.shared.RunTensors(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			b, err := c.own.RunTensors(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			for i := range a {
				if string(a[i].Data) != string(b[i].Data) {
					t.Fatalf("batch %d output %d: the shared Exec differs", c.n, i)
				}
			}
		}
	}
	s1.Close()
	s3.Close()
	// The pool still runs after the Execs that borrowed it are closed.
	s, err := p1.NewExecShared(pool, arena)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunTensors(context.Background(), []*tensor.Tensor{randTensor(r, ir.Type{DType: tensor.Float32, Shape: tensor.Shape{1, 3, 16, 16}})}); err != nil {
		t.Fatal(err)
	}
}
