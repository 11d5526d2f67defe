package irexec

import (
	"fmt"
	"testing"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

func TestUnaryFloat(t *testing.T) {
	kinds := []ir.UnaryKind{ir.OpRelu, ir.OpIdentity, ir.OpIsNaN, ir.OpIsInf}
	for k := range floatUnary {
		kinds = append(kinds, k)
	}
	for _, k := range kinds {
		for _, shape := range [][]int{{7}, {2, 3, 33}, {1}} {
			t.Run(fmt.Sprint(k, shape), func(t *testing.T) {
				check(t, oneNode(&ir.Unary{Fn: k}, 1, f32in(shape...)), 1e-6)
			})
		}
	}
}

func TestUnaryInt(t *testing.T) {
	for _, k := range []ir.UnaryKind{ir.OpNeg, ir.OpAbs, ir.OpSign, ir.OpRelu} {
		for _, dt := range []tensor.DType{tensor.Int64, tensor.Int32} {
			t.Run(fmt.Sprint(k, dt), func(t *testing.T) {
				check(t, oneNode(&ir.Unary{Fn: k}, 1, in{dt: dt, shape: []int{3, 5}}), 0)
			})
		}
	}
	check(t, oneNode(&ir.Unary{Fn: ir.OpNot}, 1, in{dt: tensor.Bool, shape: []int{9}}), 0)
}

// broadcastPairs are input shapes that NumPy-broadcast together.
var broadcastPairs = [][2][]int{
	{{2, 3, 4}, {2, 3, 4}},
	{{2, 3, 4}, {4}},
	{{2, 3, 4}, {3, 1}},
	{{1}, {5, 6}},
	{{2, 1, 4}, {1, 3, 1}},
	{{3, 1, 5, 1}, {7, 1, 1}},
	{{}, {3}},
	{{16, 33}, {16, 1}},
}

func TestBinaryFloat(t *testing.T) {
	kinds := []ir.BinaryKind{ir.OpEqual, ir.OpLess, ir.OpLessOrEqual, ir.OpGreater, ir.OpGreaterOrEqual}
	for k := range floatBinary {
		kinds = append(kinds, k)
	}
	for _, k := range kinds {
		for _, sh := range broadcastPairs {
			t.Run(fmt.Sprint(k, sh), func(t *testing.T) {
				check(t, oneNode(&ir.Binary{Fn: k}, 1, f32in(sh[0]...), f32in(sh[1]...)), 1e-6)
			})
		}
	}
}

func TestBinaryIntBool(t *testing.T) {
	for _, k := range []ir.BinaryKind{ir.OpAdd, ir.OpSub, ir.OpMul, ir.OpEqual, ir.OpLess, ir.OpGreaterOrEqual} {
		for _, dt := range []tensor.DType{tensor.Int64, tensor.Int32} {
			t.Run(fmt.Sprint(k, dt), func(t *testing.T) {
				check(t, oneNode(&ir.Binary{Fn: k}, 1, in{dt: dt, shape: []int{2, 3}}, in{dt: dt, shape: []int{3}}), 0)
			})
		}
	}
	for _, k := range []ir.BinaryKind{ir.OpDiv, ir.OpMod, ir.OpFmod} {
		t.Run(string(k), func(t *testing.T) {
			check(t, oneNode(&ir.Binary{Fn: k}, 1, in{dt: tensor.Int64, shape: []int{4, 3}}, i64c(3, -2, 5)), 0)
		})
	}
	for _, k := range []ir.BinaryKind{ir.OpAnd, ir.OpOr, ir.OpXor, ir.OpEqual} {
		t.Run(string(k), func(t *testing.T) {
			check(t, oneNode(&ir.Binary{Fn: k}, 1, in{dt: tensor.Bool, shape: []int{4, 3}}, in{dt: tensor.Bool, shape: []int{4, 1}}), 0)
		})
	}
}

func TestVariadicWhere(t *testing.T) {
	for _, k := range []ir.VariadicKind{ir.OpSum, ir.OpMax, ir.OpMin, ir.OpMean} {
		t.Run(string(k), func(t *testing.T) {
			check(t, oneNode(&ir.Variadic{Fn: k}, 1, f32in(3, 1), f32in(4), f32in(2, 1, 1)), 1e-6)
			check(t, oneNode(&ir.Variadic{Fn: k}, 1, f32in(5)), 0)
		})
	}
	check(t, oneNode(&ir.Where{}, 1, in{dt: tensor.Bool, shape: []int{3, 1}}, f32in(4), f32in(3, 4)), 0)
	check(t, oneNode(&ir.Where{}, 1, in{dt: tensor.Bool, shape: []int{5}}, in{dt: tensor.Int64, shape: []int{5}}, i64c(7)), 0)
}

// TestGenericDTypes covers the dtypes without kernels of their own, which
// go through float64 with ir's semantics: results must equal ir's exactly.
func TestGenericDTypes(t *testing.T) {
	dts := []tensor.DType{tensor.Float64, tensor.Float16, tensor.BFloat16, tensor.Int8, tensor.Uint8}
	for _, dt := range dts {
		x := in{dt: dt, shape: []int{3, 4}}
		y := in{dt: dt, shape: []int{4}}
		for _, k := range []ir.BinaryKind{ir.OpAdd, ir.OpSub, ir.OpMul, ir.OpEqual, ir.OpLess, ir.OpGreaterOrEqual} {
			t.Run(fmt.Sprint(k, " ", dt), func(t *testing.T) { check(t, oneNode(&ir.Binary{Fn: k}, 1, x, y), 0) })
		}
		t.Run(fmt.Sprint("Max ", dt), func(t *testing.T) {
			check(t, oneNode(&ir.Variadic{Fn: ir.OpMax}, 1, x, y, x), 0)
		})
		t.Run(fmt.Sprint("Neg ", dt), func(t *testing.T) { check(t, oneNode(&ir.Unary{Fn: ir.OpNeg}, 1, x), 0) })
		t.Run(fmt.Sprint("Clip ", dt), func(t *testing.T) {
			check(t, oneNode(&ir.Clip{}, 1, x, in{dt: dt, shape: []int{}}, in{dt: dt, shape: []int{}}), 0)
		})
	}
	t.Run("Pow float32^int64", func(t *testing.T) {
		check(t, oneNode(&ir.Binary{Fn: ir.OpPow}, 1, f32in(3, 4), in{dt: tensor.Int64, shape: []int{4}}), 1e-6)
	})
	t.Run("Pow int64", func(t *testing.T) {
		check(t, oneNode(&ir.Binary{Fn: ir.OpPow}, 1, in{dt: tensor.Int64, shape: []int{3, 4}}, i64c(0, 1, 2, 3)), 0)
	})
	t.Run("Exp float64", func(t *testing.T) {
		check(t, oneNode(&ir.Unary{Fn: ir.OpExp}, 1, in{dt: tensor.Float64, shape: []int{5}}), 0)
	})
}
