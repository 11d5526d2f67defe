package onnx

import "goinfer/internal/ir"

func init() {
	for _, k := range []ir.UnaryKind{
		ir.OpRelu, ir.OpSigmoid, ir.OpTanh, ir.OpExp, ir.OpLog, ir.OpSqrt,
		ir.OpReciprocal, ir.OpNeg, ir.OpAbs, ir.OpErf, ir.OpFloor, ir.OpCeil,
		ir.OpSign, ir.OpNot, ir.OpIdentity, ir.OpSoftplus, ir.OpSoftsign,
		ir.OpSin, ir.OpCos, ir.OpRound, ir.OpHardSwish, ir.OpMish, ir.OpIsNaN,
	} {
		register(string(k), func(Attrs, int) (ir.Op, []ExtraInput, error) {
			return &ir.Unary{Fn: k}, nil, nil
		})
	}
	for _, k := range []ir.BinaryKind{
		ir.OpAdd, ir.OpSub, ir.OpMul, ir.OpDiv, ir.OpPow, ir.OpEqual,
		ir.OpLess, ir.OpLessOrEqual, ir.OpGreater, ir.OpGreaterOrEqual,
		ir.OpAnd, ir.OpOr, ir.OpXor, ir.OpPRelu,
	} {
		register(string(k), func(Attrs, int) (ir.Op, []ExtraInput, error) {
			return &ir.Binary{Fn: k}, nil, nil
		})
	}
	register("Mod", func(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
		f, err := a.Int("fmod", 0)
		if err != nil {
			return nil, nil, err
		}
		if f != 0 {
			return &ir.Binary{Fn: ir.OpFmod}, nil, nil
		}
		return &ir.Binary{Fn: ir.OpMod}, nil, nil
	})
}
