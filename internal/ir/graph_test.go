package ir

import (
	"context"
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"goinfer/internal/tensor"
)

func f32(shape tensor.Shape, v ...float32) *tensor.Tensor {
	t, err := tensor.FromFloat32(shape, v)
	if err != nil {
		panic(err)
	}
	return t
}

// node wires op into g with fresh output values.
func node(g *Graph, name string, op Op, in ...*Value) *Value {
	n := &Node{Name: name, Op: op, Inputs: in}
	out := &Value{Name: name + ":0", Producer: n}
	n.Outputs = []*Value{out}
	g.Nodes = append(g.Nodes, n)
	return out
}

func TestBindBroadcastAndFold(t *testing.T) {
	g := &Graph{Name: "t"}
	x := &Value{Name: "x", Type: Type{DType: tensor.Float32, Shape: tensor.Shape{Dynamic, 3}}}
	g.Inputs = []*Value{x}
	c1 := &Value{Name: "c1", Const: f32(tensor.Shape{3}, 1, 2, 3), Type: Type{DType: tensor.Float32, Shape: tensor.Shape{3}}}
	c2 := &Value{Name: "c2", Const: f32(tensor.Shape{1}, 10), Type: Type{DType: tensor.Float32, Shape: tensor.Shape{1}}}
	folded := node(g, "fold", &Binary{Fn: OpMul}, c1, c2) // constant: folds away
	y := node(g, "add", &Binary{Fn: OpAdd}, x, folded)
	z := node(g, "relu", &Unary{Fn: OpRelu}, y)
	g.Outputs = []*Value{z}

	b, err := Bind(g, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Nodes) != 2 {
		t.Fatalf("bound graph has %d nodes, want 2 (the constant Mul folded)", len(b.Nodes))
	}
	if got := b.Outputs[0].Type.String(); got != "float32[2,3]" {
		t.Errorf("output type %s, want float32[2,3]", got)
	}
	in := &Array{DType: tensor.Float32, Shape: tensor.Shape{2, 3}, Data: []float64{-100, 0, 1, 2, 3, -40}}
	out, err := Evaluate(context.Background(), b, map[string]*Array{"x": in})
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{0, 20, 31, 12, 23, 0}
	for i, w := range want {
		if out[0].Data[i] != w {
			t.Fatalf("output %v, want %v", out[0].Data, want)
		}
	}
	_, outs, err := Signature(g)
	if err != nil {
		t.Fatal(err)
	}
	if got := outs[0].Type.String(); got != "float32[N,3]" {
		t.Errorf("signature output %s, want float32[N,3]", got)
	}
}

func TestBindErrors(t *testing.T) {
	x := &Value{Name: "x", Type: Type{DType: tensor.Float32, Shape: tensor.Shape{2, 3}}}
	y := &Value{Name: "y", Type: Type{DType: tensor.Float32, Shape: tensor.Shape{4}}}
	t.Run("broadcast", func(t *testing.T) {
		g := &Graph{Inputs: []*Value{x, y}}
		g.Outputs = []*Value{node(g, "bad_add", &Binary{Fn: OpAdd}, x, y)}
		_, err := Bind(g, 1)
		if err == nil || !strings.Contains(err.Error(), `"bad_add"`) || !strings.Contains(err.Error(), "float32[4]") {
			t.Fatalf("error %v should name the node and the shapes", err)
		}
	})
	t.Run("cycle", func(t *testing.T) {
		g := &Graph{Inputs: []*Value{x}}
		a := &Node{Name: "a", Op: &Unary{Fn: OpRelu}}
		b := &Node{Name: "b", Op: &Unary{Fn: OpRelu}}
		av := &Value{Name: "av", Producer: a}
		bv := &Value{Name: "bv", Producer: b}
		a.Inputs, a.Outputs = []*Value{bv}, []*Value{av}
		b.Inputs, b.Outputs = []*Value{av}, []*Value{bv}
		g.Nodes = []*Node{a, b}
		g.Outputs = []*Value{bv}
		if err := g.Validate(); err == nil || !strings.Contains(err.Error(), "cycle") {
			t.Fatalf("Validate = %v, want an error about a cycle", err)
		}
	})
	t.Run("dangling", func(t *testing.T) {
		g := &Graph{Inputs: []*Value{x}}
		ghost := &Value{Name: "ghost"}
		g.Outputs = []*Value{node(g, "n", &Binary{Fn: OpAdd}, x, ghost)}
		if err := g.Validate(); err == nil || !strings.Contains(err.Error(), `"ghost"`) {
			t.Fatalf("Validate = %v, want an error naming the dangling input", err)
		}
	})
}

// TestInt64ExtremesSurviveFolding checks that INT64_MAX and INT64_MIN, which
// float64 holds only approximately, come back from a reference array as
// themselves rather than wrapped (exports slice "to the end" with INT64_MAX).
func TestInt64ExtremesSurviveFolding(t *testing.T) {
	a := NewArray(tensor.Int64, tensor.Shape{3})
	a.Data = []float64{math.MaxInt64, math.MinInt64, -1}
	tt, err := a.Tensor()
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{math.MaxInt64, math.MinInt64, -1}
	for i, w := range want {
		if got := int64(binary.LittleEndian.Uint64(tt.Data[8*i:])); got != w {
			t.Errorf("element %d: %d, want %d", i, got, w)
		}
	}
}
