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

// in describes a test graph input: a runtime input of a dtype and shape,
// or a constant.
type in struct {
	dt    tensor.DType
	shape []int
	c     *tensor.Tensor
}

func f32in(shape ...int) in { return in{dt: tensor.Float32, shape: shape} }

func i64c(v ...int64) in {
	t := tensor.New(tensor.Int64, len(v))
	for i, x := range v {
		i64(t.Data)[i] = x
	}
	return in{c: t}
}

func f32c(shape []int, v ...float32) in {
	t, _ := tensor.FromFloat32(tensor.Shape(shape), v)
	return in{c: t}
}

// randConst is a random float32 constant (weights).
func randConst(r *rand.Rand, shape ...int) in {
	t := tensor.New(tensor.Float32, shape...)
	for i := range f32(t.Data) {
		f32(t.Data)[i] = float32(r.NormFloat64())
	}
	return in{c: t}
}

// absent marks an omitted optional input.
var absent = in{}

// oneNode builds a graph of one node applying op to ins, with nout outputs.
func oneNode(op ir.Op, nout int, ins ...in) *ir.Graph {
	g := &ir.Graph{Name: op.Kind()}
	n := &ir.Node{Name: "n", Op: op}
	for i, x := range ins {
		switch {
		case x.c != nil:
			n.Inputs = append(n.Inputs, &ir.Value{Name: fmt.Sprint("c", i), Type: ir.Type{DType: x.c.DType, Shape: x.c.Shape.Clone()}, Const: x.c})
		case x.dt == tensor.Invalid:
			n.Inputs = append(n.Inputs, nil)
		default:
			v := &ir.Value{Name: fmt.Sprint("x", i), Type: ir.Type{DType: x.dt, Shape: x.shape}}
			g.Inputs = append(g.Inputs, v)
			n.Inputs = append(n.Inputs, v)
		}
	}
	for i := 0; i < nout; i++ {
		v := &ir.Value{Name: fmt.Sprint("y", i), Producer: n}
		n.Outputs = append(n.Outputs, v)
		g.Outputs = append(g.Outputs, v)
	}
	g.Nodes = []*ir.Node{n}
	return g
}

// randTensor fills a tensor of t's type with random values: floats
// normal, integers small, booleans even.
func randTensor(r *rand.Rand, t ir.Type) *tensor.Tensor {
	x := tensor.New(t.DType, t.Shape...)
	switch t.DType {
	case tensor.Float32:
		for i := range f32(x.Data) {
			f32(x.Data)[i] = float32(r.NormFloat64())
		}
	case tensor.Int64:
		for i := range i64(x.Data) {
			i64(x.Data)[i] = int64(r.IntN(7) - 3)
		}
	case tensor.Int32:
		for i := range i32(x.Data) {
			i32(x.Data)[i] = int32(r.IntN(7) - 3)
		}
	case tensor.Bool:
		for i := range x.Data {
			x.Data[i] = byte(r.IntN(2))
		}
	case tensor.Uint8:
		for i := range x.Data {
			x.Data[i] = byte(r.IntN(7))
		}
	case tensor.Int8:
		for i := range x.Data {
			x.Data[i] = byte(int8(r.IntN(7) - 3))
		}
	case tensor.Float64, tensor.Float16, tensor.BFloat16:
		for i := 0; i < x.NumElements(); i++ {
			storeFloat(x.Data, t.DType, i, r.NormFloat64())
		}
	}
	return x
}

// check binds g at batch (for graphs with Dynamic inputs), compiles it,
// runs it on random inputs and compares every output with ir's float64
// evaluation: floats within rtol of the output's largest magnitude,
// everything else exactly.
func check(t *testing.T, g *ir.Graph, rtol float64) *Plan {
	t.Helper()
	return checkSeed(t, g, rtol, 1)
}

func checkSeed(t *testing.T, g *ir.Graph, rtol float64, seed uint64) *Plan {
	t.Helper()
	return checkOpts(t, g, rtol, seed, Options{Threads: 2})
}

// checkOpts is check with a seed and compile options.
func checkOpts(t *testing.T, g *ir.Graph, rtol float64, seed uint64, opts Options) *Plan {
	t.Helper()
	ctx := context.Background()
	b, err := ir.Bind(g, 2)
	if err != nil {
		t.Fatalf("Bind: %v", err)
	}
	p, err := Compile(ctx, b, opts)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	r := rand.New(rand.NewPCG(seed, 7))
	var ins []*tensor.Tensor
	arrs := map[string]*ir.Array{}
	for _, v := range b.Inputs {
		x := randTensor(r, v.Type)
		ins = append(ins, x)
		a, err := ir.ArrayFromTensor(x)
		if err != nil {
			t.Fatal(err)
		}
		arrs[v.Name] = a
	}
	want, err := ir.Evaluate(ctx, b, arrs)
	if err != nil {
		t.Fatalf("reference: %v", err)
	}
	x := p.NewExec()
	defer x.Close()
	got, err := x.RunTensors(ctx, ins)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for i, w := range want {
		compare(t, b.Outputs[i].Name, got[i], w, rtol)
	}
	return p
}

func compare(t *testing.T, name string, got *tensor.Tensor, want *ir.Array, rtol float64) {
	t.Helper()
	if !got.Shape.Equal(want.Shape) {
		t.Fatalf("output %s: shape %v, want %v", name, got.Shape, want.Shape)
	}
	g, err := ir.ArrayFromTensor(got)
	if err != nil {
		t.Fatal(err)
	}
	if got.DType != tensor.Float32 && got.DType != tensor.Float64 {
		// Store the reference as the output's dtype would (wrapping
		// integers, rounding narrow floats), as the executor does.
		wt, err := want.Tensor()
		if err != nil {
			t.Fatal(err)
		}
		if want, err = ir.ArrayFromTensor(wt); err != nil {
			t.Fatal(err)
		}
	}
	scale := 0.0
	for _, v := range want.Data {
		if !math.IsInf(v, 0) && !math.IsNaN(v) {
			scale = max(scale, math.Abs(v))
		}
	}
	// ir's reference keeps float64 precision; an output stored in a
	// narrower float is held to that float's rounding.
	tol := rtol * max(scale, 1)
	switch got.DType {
	case tensor.Float32:
	case tensor.Float16:
		tol = max(tol, 1e-3*max(scale, 1))
	case tensor.BFloat16:
		tol = max(tol, 8e-3*max(scale, 1))
	case tensor.Float64:
		tol = max(tol, 1e-12*max(scale, 1))
	default:
		tol = 0
	}
	bad := 0
	for i, w := range want.Data {
		v := g.Data[i]
		if math.IsNaN(w) && math.IsNaN(v) || v == w {
			continue
		}
		if math.Abs(v-w) > tol || math.IsNaN(v) != math.IsNaN(w) {
			if bad < 5 {
				t.Errorf("output %s[%d] = %v, want %v (tolerance %g)", name, i, v, w, tol)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("output %s: %d of %d elements differ", name, bad, len(want.Data))
	}
}
