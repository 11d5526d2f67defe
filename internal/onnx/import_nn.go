package onnx

import (
	"fmt"
	"math"

	"goinfer/internal/ir"
)

// The importers of the neural-network ops: convolutions, pools, matrix
// products, normalisations, parameterised activations and the softmax
// family, each with its opset's defaults.

func (t *tensorAttrs) float(name string, def float32) float64 {
	v, err := t.a.Float(name, def)
	t.keep(err)
	return float64(v)
}

func init() {
	register("Conv", importConv)
	register("ConvTranspose", importConvTranspose)
	register("MaxPool", importPool(true))
	register("AveragePool", importPool(false))
	registerNoAttrs("GlobalAveragePool", func() ir.Op { return &ir.GlobalPool{} })
	registerNoAttrs("GlobalMaxPool", func() ir.Op { return &ir.GlobalPool{Max: true} })
	register("LpPool", importLpPool)
	register("GlobalLpPool", func(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
		t := &tensorAttrs{a: a}
		op := &ir.GlobalLpPool{P: t.int("p", 2)}
		if op.P < 1 {
			t.keep(fmt.Errorf("GlobalLpPool's p %d is not positive", op.P))
		}
		return op, nil, t.err
	})
	register("Gemm", importGemm)
	registerNoAttrs("MatMul", func() ir.Op { return &ir.MatMul{} })
	register("BatchNormalization", importBatchNorm)
	register("LayerNormalization", importLayerNorm)
	register("InstanceNormalization", importInstanceNorm)
	register("LRN", importLRN)
	register("Clip", importClip)
	register("LeakyRelu", func(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
		t := &tensorAttrs{a: a}
		return &ir.LeakyRelu{Alpha: t.float("alpha", 0.01)}, nil, t.err
	})
	register("Elu", func(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
		t := &tensorAttrs{a: a}
		return &ir.Elu{Alpha: t.float("alpha", 1)}, nil, t.err
	})
	register("Selu", func(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
		t := &tensorAttrs{a: a}
		return &ir.Selu{Alpha: t.float("alpha", 1.67326319217681884765625), Gamma: t.float("gamma", 1.05070102214813232421875)}, nil, t.err
	})
	register("Celu", func(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
		t := &tensorAttrs{a: a}
		return &ir.Celu{Alpha: t.float("alpha", 1)}, nil, t.err
	})
	register("HardSigmoid", func(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
		t := &tensorAttrs{a: a}
		return &ir.HardSigmoid{Alpha: t.float("alpha", 0.2), Beta: t.float("beta", 0.5)}, nil, t.err
	})
	register("ThresholdedRelu", func(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
		t := &tensorAttrs{a: a}
		return &ir.ThresholdedRelu{Alpha: t.float("alpha", 1)}, nil, t.err
	})
	register("Shrink", func(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
		t := &tensorAttrs{a: a}
		return &ir.Shrink{Bias: t.float("bias", 0), Lambd: t.float("lambd", 0.5)}, nil, t.err
	})
	register("Gelu", importGelu)
	register("Softmax", importSoftmax(false, false))
	register("LogSoftmax", importSoftmax(true, false))
	register("Hardmax", importSoftmax(false, true))
}

// spatial reads the attributes Conv, ConvTranspose and the pools share.
func (t *tensorAttrs) spatial() (kernel, strides, pads, dilations []int, autoPad string) {
	autoPad = t.string("auto_pad", "NOTSET")
	switch autoPad {
	case "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID":
	default:
		t.keep(fmt.Errorf("auto_pad %q is not NOTSET, SAME_UPPER, SAME_LOWER or VALID", autoPad))
	}
	return t.ints("kernel_shape"), t.ints("strides"), t.ints("pads"), t.ints("dilations"), autoPad
}

func importConv(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	op := &ir.Conv{Group: t.int("group", 1)}
	op.Kernel, op.Strides, op.Pads, op.Dilations, op.AutoPad = t.spatial()
	if op.Group < 1 {
		t.keep(fmt.Errorf("Conv's group %d is not positive", op.Group))
	}
	return op, nil, t.err
}

func importConvTranspose(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	op := &ir.ConvTranspose{Group: t.int("group", 1)}
	op.Kernel, op.Strides, op.Pads, op.Dilations, op.AutoPad = t.spatial()
	op.OutputPadding = t.ints("output_padding")
	op.OutputShape = t.ints("output_shape")
	if op.Group < 1 {
		t.keep(fmt.Errorf("ConvTranspose's group %d is not positive", op.Group))
	}
	return op, nil, t.err
}

// importPool reads MaxPool's or AveragePool's attributes; those an opset
// lacks (ceil_mode and MaxPool's dilations before 10, AveragePool's
// dilations before 19) take their defaults when absent.
func importPool(isMax bool) Importer {
	return func(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
		t := &tensorAttrs{a: a}
		op := &ir.Pool{Max: isMax}
		name := "AveragePool"
		if isMax {
			name = "MaxPool"
		}
		t.required(name, "kernel_shape")
		op.Kernel, op.Strides, op.Pads, op.Dilations, op.AutoPad = t.spatial()
		op.CeilMode = t.bool("ceil_mode", false)
		if isMax {
			op.StorageOrder = t.int("storage_order", 0)
		} else {
			op.CountIncludePad = t.bool("count_include_pad", false)
		}
		return op, nil, t.err
	}
}

func importLpPool(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	t.required("LpPool", "kernel_shape")
	op := &ir.LpPool{P: t.int("p", 2)}
	w := &op.Pool
	w.Kernel, w.Strides, w.Pads, w.Dilations, w.AutoPad = t.spatial()
	w.CeilMode = t.bool("ceil_mode", false)
	if op.P < 1 {
		t.keep(fmt.Errorf("LpPool's p %d is not positive", op.P))
	}
	return op, nil, t.err
}

func importGemm(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	// Gemm before 7 had a broadcast attribute; Gemm-7 on broadcasts C
	// always, which is what a valid older model means too.
	return &ir.Gemm{
		Alpha:  t.float("alpha", 1),
		Beta:   t.float("beta", 1),
		TransA: t.bool("transA", false),
		TransB: t.bool("transB", false),
	}, nil, t.err
}

// importBatchNorm takes the inference form. Training (training_mode=1
// from opset 14, is_test=0 before 7) computes batch statistics and
// updates the running ones, which an inference IR does not do.
func importBatchNorm(a Attrs, opset int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	op := &ir.BatchNorm{Epsilon: t.float("epsilon", 1e-5)}
	t.float("momentum", 0.9)
	if t.bool("training_mode", false) {
		t.keep(fmt.Errorf("BatchNormalization with training_mode=1: %w", ir.ErrUnsupported))
	}
	if opset < 7 && a.Has("is_test") && !t.bool("is_test", false) {
		t.keep(fmt.Errorf("BatchNormalization with is_test=0 (training): %w", ir.ErrUnsupported))
	}
	// spatial=0 (before 9) gives per-activation parameters, which the op
	// tells from their shapes.
	t.int("spatial", 1)
	return op, nil, t.err
}

func importLayerNorm(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	op := &ir.LayerNorm{Axis: t.int("axis", -1), Epsilon: t.float("epsilon", 1e-5)}
	// stash_type picks the precision of the statistics; the reference
	// computes in float64 and engines choose their own.
	if st := t.int("stash_type", 1); st != 1 && st != 11 && st != 16 {
		t.keep(fmt.Errorf("LayerNormalization's stash_type %d is not a float type", st))
	}
	return op, nil, t.err
}

func importInstanceNorm(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	return &ir.InstanceNorm{Epsilon: t.float("epsilon", 1e-5)}, nil, t.err
}

func importLRN(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	t.required("LRN", "size")
	op := &ir.LRN{Alpha: t.float("alpha", 1e-4), Beta: t.float("beta", 0.75), Bias: t.float("bias", 1), Size: t.int("size", 0)}
	if op.Size < 1 {
		t.keep(fmt.Errorf("LRN's size %d is not positive", op.Size))
	}
	return op, nil, t.err
}

// importClip turns Clip's min and max attributes (before opset 11) into
// constant inputs; from 11 on they are inputs already.
func importClip(a Attrs, opset int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	var extra []ExtraInput
	if opset < 11 {
		lo := t.float("min", float32(math.Inf(-1)))
		hi := t.float("max", float32(math.Inf(1)))
		extra = append(extra,
			ExtraInput{Index: 1, Value: tensorOfFloat32(float32(lo))},
			ExtraInput{Index: 2, Value: tensorOfFloat32(float32(hi))})
	}
	return &ir.Clip{}, extra, t.err
}

func importGelu(a Attrs, _ int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	switch ap := t.string("approximate", "none"); ap {
	case "none":
		return &ir.Gelu{}, nil, t.err
	case "tanh":
		return &ir.Gelu{Tanh: true}, nil, t.err
	default:
		return nil, nil, fmt.Errorf("Gelu's approximate %q is not none or tanh", ap)
	}
}

// importSoftmax reads axis: from opset 13 it defaults to -1 and names the
// one axis normalised; before, it defaults to 1 and the input is coerced
// to 2-D at it.
func importSoftmax(log, hard bool) Importer {
	return func(a Attrs, opset int) (ir.Op, []ExtraInput, error) {
		t := &tensorAttrs{a: a}
		op := &ir.Softmax{Log: log, Hard: hard}
		if opset >= 13 {
			op.Axis = t.int("axis", -1)
		} else {
			op.Axis = t.int("axis", 1)
			op.Coerce2D = true
		}
		return op, nil, t.err
	}
}
