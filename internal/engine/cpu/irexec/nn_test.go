package irexec

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

func TestConv(t *testing.T) {
	type cs struct {
		name                  string
		n, c, h, w, m, kh, kw int
		strides, dil, pads    []int
		group                 int
		autoPad               string
		bias                  bool
	}
	cases := []cs{
		{"3x3 same", 2, 16, 9, 11, 32, 3, 3, nil, nil, []int{1, 1, 1, 1}, 1, "", true},
		{"7x7 s2 stem", 1, 3, 17, 17, 8, 7, 7, []int{2, 2}, nil, []int{3, 3, 3, 3}, 1, "", false},
		{"1x1 s2 downsample", 2, 8, 10, 10, 12, 1, 1, []int{2, 2}, nil, nil, 1, "", true},
		{"1x1", 3, 20, 7, 7, 13, 1, 1, nil, nil, nil, 1, "", true},
		{"asymmetric dilated strided grouped", 2, 8, 12, 9, 16, 3, 2, []int{1, 2}, []int{2, 1}, []int{2, 0, 1, 1}, 2, "", true},
		{"depthwise 3x3", 2, 12, 9, 9, 12, 3, 3, nil, nil, []int{1, 1, 1, 1}, 12, "", true},
		{"depthwise 5x5 s2", 1, 6, 11, 13, 6, 5, 5, []int{2, 2}, nil, []int{2, 2, 2, 2}, 6, "", false},
		{"depthwise multiplier 2", 1, 6, 8, 8, 12, 3, 3, []int{2, 1}, nil, []int{1, 1, 0, 1}, 6, "", true},
		{"depthwise dilated", 2, 8, 8, 8, 8, 3, 3, nil, []int{2, 2}, []int{2, 2, 2, 2}, 8, "", true},
		{"depthwise strided dilated", 2, 8, 9, 15, 8, 3, 3, []int{2, 3}, []int{1, 2}, []int{1, 2, 0, 1}, 8, "", true},
		{"depthwise 3x3 s2 wide", 1, 4, 7, 37, 4, 3, 3, []int{2, 2}, nil, []int{1, 1, 1, 1}, 4, "", true},
		{"grouped 4", 1, 32, 7, 7, 64, 3, 3, []int{2, 2}, nil, []int{1, 1, 1, 1}, 4, "", true},
		{"wide batch", 3, 64, 14, 14, 64, 3, 3, nil, nil, []int{1, 1, 1, 1}, 1, "", true},
		{"same upper", 1, 5, 10, 7, 7, 4, 3, []int{2, 2}, nil, nil, 1, "SAME_UPPER", true},
		{"same lower", 1, 5, 9, 9, 7, 2, 2, nil, nil, nil, 1, "SAME_LOWER", false},
		{"valid", 2, 4, 9, 6, 5, 3, 3, []int{2, 1}, nil, nil, 1, "VALID", true},
		{"kernel wider than input", 1, 2, 3, 3, 3, 5, 5, nil, nil, []int{2, 2, 2, 2}, 1, "", true},
		{"odd sizes deep", 1, 300, 5, 5, 7, 3, 3, nil, nil, []int{1, 1, 1, 1}, 1, "", true},
		// 7x7 and 14x14 outputs at batch 1 end in a panel of 1 or 4
		// columns (gemm.KernelCols), over several K-blocks.
		{"3x3 s2 deep 7x7 out", 1, 300, 13, 13, 50, 3, 3, []int{2, 2}, nil, []int{1, 1, 1, 1}, 1, "", true},
		{"3x3 s2 14x14 out", 1, 40, 28, 28, 30, 3, 3, []int{2, 2}, nil, []int{1, 1, 1, 1}, 1, "", false},
		// Squeeze-and-excitation layers: dot products (gemvStep).
		{"1x1 on 1x1 maps", 3, 300, 1, 1, 70, 1, 1, nil, nil, nil, 1, "", true},
		// Pointwise layers read B in place over runs of whole panels: maps
		// of a whole number of panels (a run ends at each image), of a
		// partial last panel, over 256 input channels (two K-blocks),
		// and wider than a task.
		{"1x1 12x12 deep", 2, 300, 12, 12, 29, 1, 1, nil, nil, nil, 1, "", true},
		{"1x1 odd map odd channels", 3, 5, 9, 11, 7, 1, 1, nil, nil, nil, 1, "", false},
		{"1x1 wide map", 1, 17, 20, 21, 50, 1, 1, nil, nil, nil, 1, "", true},
		{"1x1 grouped", 2, 12, 8, 6, 18, 1, 1, nil, nil, nil, 3, "", true},
		{"1x1 on 1x1 maps no bias", 1, 24, 1, 1, 200, 1, 1, nil, nil, nil, 1, "", false},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range cases {
		for _, act := range []ir.Activation{ir.ActNone, ir.ActRelu, ir.ActHardSwish} {
			t.Run(fmt.Sprintf("%s/act%d", c.name, act), func(t *testing.T) {
				op := &ir.Conv{Strides: c.strides, Dilations: c.dil, Pads: c.pads, Group: c.group, AutoPad: c.autoPad, Epilogue: ir.Epilogue{Act: act}}
				ins := []in{f32in(c.n, c.c, c.h, c.w), randConst(r, c.m, c.c/c.group, c.kh, c.kw)}
				if c.bias {
					ins = append(ins, randConst(r, c.m))
				}
				check(t, oneNode(op, 1, ins...), 1e-5)
			})
		}
	}
	t.Run("residual", func(t *testing.T) {
		for _, g := range []int{1, 8} {
			op := &ir.Conv{Pads: []int{1, 1, 1, 1}, Group: g, Epilogue: ir.Epilogue{Act: ir.ActRelu, Residual: true}}
			check(t, oneNode(op, 1, f32in(2, 8, 6, 5), randConst(r, 8, 8/g, 3, 3), randConst(r, 8), f32in(2, 8, 6, 5)), 1e-5)
		}
		op := &ir.Conv{Epilogue: ir.Epilogue{Act: ir.ActHardSigmoid, Alpha: 0.2, Beta: 0.5, Residual: true}}
		check(t, oneNode(op, 1, f32in(2, 40, 1, 1), randConst(r, 90, 40, 1, 1), randConst(r, 90), f32in(2, 90, 1, 1)), 1e-5)
		for _, sh := range [][4]int{{2, 24, 8, 8}, {1, 40, 10, 13}, {2, 300, 4, 9}} {
			// Pointwise, runs of whole panels: the residual moves with C.
			n, c, h, w := sh[0], sh[1], sh[2], sh[3]
			check(t, oneNode(op, 1, f32in(n, c, h, w), randConst(r, 30, c, 1, 1), randConst(r, 30), f32in(n, 30, h, w)), 1e-5)
		}
	})
	t.Run("runtime weights", func(t *testing.T) {
		for _, g := range []int{1, 2} {
			op := &ir.Conv{Strides: []int{2, 1}, Pads: []int{1, 0, 1, 2}, Group: g}
			check(t, oneNode(op, 1, f32in(2, 4, 7, 6), f32in(6, 4/g, 3, 2), f32in(6)), 1e-5)
			check(t, oneNode(op, 1, f32in(2, 4, 7, 6), randConst(r, 6, 4/g, 3, 2), f32in(6)), 1e-5)
		}
	})
	t.Run("1-D", func(t *testing.T) {
		op := &ir.Conv{Strides: []int{2}, Pads: []int{1, 2}, Dilations: []int{2}}
		check(t, oneNode(op, 1, f32in(2, 6, 19), randConst(r, 4, 6, 3)), 1e-5)
	})
}

func TestPool(t *testing.T) {
	cases := []struct {
		name string
		op   *ir.Pool
		in   []int
	}{
		{"max 3x3 s2 p1", &ir.Pool{Max: true, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}}, []int{2, 4, 13, 13}},
		{"max ceil", &ir.Pool{Max: true, Kernel: []int{3, 3}, Strides: []int{2, 2}, CeilMode: true}, []int{1, 3, 10, 10}},
		{"max dilated", &ir.Pool{Max: true, Kernel: []int{2, 3}, Dilations: []int{2, 1}, Pads: []int{1, 0, 1, 2}}, []int{1, 2, 9, 8}},
		{"avg", &ir.Pool{Kernel: []int{2, 2}, Strides: []int{2, 2}}, []int{2, 3, 8, 7}},
		{"avg pad excluded", &ir.Pool{Kernel: []int{3, 3}, Strides: []int{1, 1}, Pads: []int{1, 1, 1, 1}}, []int{1, 3, 6, 6}},
		{"avg pad included", &ir.Pool{Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}, CountIncludePad: true}, []int{1, 3, 7, 6}},
		{"avg ceil pad included", &ir.Pool{Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}, CountIncludePad: true, CeilMode: true}, []int{1, 2, 8, 8}},
		{"avg same upper", &ir.Pool{Kernel: []int{3, 2}, Strides: []int{2, 2}, AutoPad: "SAME_UPPER"}, []int{1, 2, 7, 7}},
		{"max 1-D", &ir.Pool{Max: true, Kernel: []int{3}, Strides: []int{2}, Pads: []int{1, 1}}, []int{2, 3, 11}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { check(t, oneNode(c.op, 1, f32in(c.in...)), 1e-6) })
	}
	for _, m := range []bool{false, true} {
		check(t, oneNode(&ir.GlobalPool{Max: m}, 1, f32in(2, 5, 7, 3)), 1e-6)
	}
	for _, p := range []int{1, 2, 3} {
		check(t, oneNode(&ir.GlobalLpPool{P: p}, 1, f32in(2, 5, 7, 3)), 1e-6)
	}
	check(t, oneNode(&ir.LpPool{P: 2, Pool: ir.Pool{Kernel: []int{3, 2}, Strides: []int{2, 1}, Pads: []int{1, 0, 1, 1}}}, 1, f32in(1, 2, 7, 6)), 1e-6)
	check(t, oneNode(&ir.LpPool{P: 3, Pool: ir.Pool{Kernel: []int{2, 2}, Dilations: []int{2, 2}}}, 1, f32in(1, 2, 7, 6)), 1e-6)
}

// TestMaxPoolGeometries runs MaxPool over kernels 2, 3 and 5, strides 1
// to 3, symmetric and one-sided pads, ceil mode and dilation, on odd and
// even sizes wide enough for the vector kernels' 8-wide blocks and tails.
func TestMaxPoolGeometries(t *testing.T) {
	for _, k := range []int{2, 3, 5} {
		for _, s := range []int{1, 2, 3} {
			for _, p := range []int{0, 1, 2} {
				if 2*p > k {
					continue
				}
				for _, ceil := range []bool{false, true} {
					op := &ir.Pool{Max: true, Kernel: []int{k, k}, Strides: []int{s, s}, Pads: []int{p, p, p, p + 1}, CeilMode: ceil}
					name := fmt.Sprintf("k%d s%d p%d ceil %v", k, s, p, ceil)
					t.Run(name, func(t *testing.T) { check(t, oneNode(op, 1, f32in(1, 2, 11, 37)), 0) })
				}
			}
		}
	}
	t.Run("dilated", func(t *testing.T) {
		op := &ir.Pool{Max: true, Kernel: []int{3, 3}, Strides: []int{2, 1}, Dilations: []int{2, 3}, Pads: []int{2, 1, 0, 2}}
		check(t, oneNode(op, 1, f32in(1, 2, 12, 29)), 0)
	})
	t.Run("stem", func(t *testing.T) {
		op := &ir.Pool{Max: true, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}}
		check(t, oneNode(op, 1, f32in(1, 3, 112, 112)), 0)
	})
}

func TestGemmMatMul(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 2))
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			for _, constB := range []bool{false, true} {
				as, bs := []int{5, 300}, []int{300, 20}
				if ta {
					as = []int{300, 5}
				}
				if tb {
					bs = []int{20, 300}
				}
				b := f32in(bs...)
				if constB {
					b = randConst(r, bs...)
				}
				for _, c := range []in{absent, randConst(r, 20), randConst(r, 5, 1), f32in(5, 20)} {
					t.Run(fmt.Sprintf("gemm ta=%v tb=%v constB=%v C=%v%v", ta, tb, constB, c.shape, c.c != nil), func(t *testing.T) {
						op := &ir.Gemm{Alpha: 0.5, Beta: 2, TransA: ta, TransB: tb, Epilogue: ir.Epilogue{Act: ir.ActGELU}}
						ins := []in{f32in(as...), b}
						if c.c != nil || c.dt != tensor.Invalid {
							ins = append(ins, c)
						}
						check(t, oneNode(op, 1, ins...), 1e-5)
					})
				}
			}
		}
	}
	mm := []struct {
		name string
		a, b in
		ep   ir.Epilogue
		more []in
	}{
		{"2-D", f32in(7, 9), f32in(9, 5), ir.Epilogue{}, nil},
		{"batched broadcast", f32in(3, 1, 5, 9), f32in(2, 9, 7), ir.Epilogue{}, nil},
		{"vector left", f32in(9), f32in(2, 9, 4), ir.Epilogue{}, nil},
		{"vector right", f32in(2, 3, 9), f32in(9), ir.Epilogue{}, nil},
		{"const weights", f32in(2, 3, 300), randConst(r, 300, 37), ir.Epilogue{}, nil},
		{"const weights bias relu", f32in(2, 3, 64), randConst(r, 64, 40), ir.Epilogue{Act: ir.ActRelu}, []in{randConst(r, 40)}},
		{"const weights bias residual", f32in(2, 3, 64), randConst(r, 64, 40), ir.Epilogue{Residual: true, Act: ir.ActTanh}, []in{randConst(r, 40), f32in(2, 3, 40)}},
		{"runtime bias residual", f32in(2, 3, 16), f32in(2, 16, 8), ir.Epilogue{Residual: true}, []in{f32in(8), f32in(2, 3, 8)}},
		{"batched const weights", f32in(4, 6, 10), randConst(r, 4, 10, 3), ir.Epilogue{}, nil},
		// Several column tasks per row block: workers reuse packed rows.
		{"wide const weights bias residual", f32in(2, 400, 40), randConst(r, 40, 700), ir.Epilogue{Residual: true, Act: ir.ActGELU}, []in{randConst(r, 700), f32in(2, 400, 700)}},
		{"wide batched runtime", f32in(2, 400, 40), f32in(2, 40, 700), ir.Epilogue{}, nil},
		// One row block of 197 rows (a partial last panel) and several
		// column tasks: L packed once into the shared buffer.
		{"shared L const weights bias residual", f32in(1, 197, 40), randConst(r, 40, 700), ir.Epilogue{Residual: true, Act: ir.ActGELU}, []in{randConst(r, 700), f32in(1, 197, 700)}},
		{"shared L runtime", f32in(197, 33), f32in(33, 300), ir.Epilogue{}, nil},
		// Many row blocks: a task computes every column block of its rows.
		{"row tasks const weights bias", f32in(2200, 24), randConst(r, 24, 300), ir.Epilogue{Act: ir.ActRelu}, []in{randConst(r, 300)}},
		{"row tasks batched runtime", f32in(3, 1100, 20), f32in(3, 20, 290), ir.Epilogue{}, nil},
	}
	for _, c := range mm {
		t.Run("matmul "+c.name, func(t *testing.T) {
			check(t, oneNode(&ir.MatMul{Epilogue: c.ep}, 1, append([]in{c.a, c.b}, c.more...)...), 1e-5)
		})
	}
}

func TestNormalization(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 2))
	pos := func(n int) in {
		c := randConst(r, n)
		for i, v := range f32(c.c.Data) {
			f32(c.c.Data)[i] = v*v + 0.1
		}
		return c
	}
	check(t, oneNode(&ir.BatchNorm{Epsilon: 1e-5}, 1, f32in(2, 6, 5, 3), randConst(r, 6), randConst(r, 6), randConst(r, 6), pos(6)), 1e-5)
	check(t, oneNode(&ir.BatchNorm{Epsilon: 1e-3}, 1, f32in(3, 4), randConst(r, 4), randConst(r, 4), randConst(r, 4), pos(4)), 1e-5)
	check(t, oneNode(&ir.InstanceNorm{Epsilon: 1e-5}, 1, f32in(2, 3, 7, 5), f32in(3), f32in(3)), 1e-5)
	check(t, oneNode(&ir.LayerNorm{Axis: -1, Epsilon: 1e-5}, 1, f32in(2, 5, 32), randConst(r, 32), randConst(r, 32)), 1e-5)
	check(t, oneNode(&ir.LayerNorm{Axis: 1, Epsilon: 1e-5}, 1, f32in(2, 3, 4), randConst(r, 4)), 1e-5)
	check(t, oneNode(&ir.LayerNorm{Axis: -1, Epsilon: 1e-5}, 1, f32in(4, 16), f32in(16), f32in(16)), 1e-5)
	check(t, oneNode(&ir.LayerNorm{Axis: 1, Epsilon: 1e-5}, 3, f32in(2, 3, 4), randConst(r, 3, 4), randConst(r, 4)), 1e-5)
	check(t, oneNode(&ir.LRN{Alpha: 1e-4, Beta: 0.75, Bias: 2, Size: 5}, 1, f32in(2, 7, 3, 3)), 1e-5)
	check(t, oneNode(&ir.LRN{Alpha: 0.01, Beta: 0.5, Bias: 1, Size: 2}, 1, f32in(1, 4, 2, 3)), 1e-5)
}

func TestSoftmax(t *testing.T) {
	for _, op := range []*ir.Softmax{{Axis: -1}, {Axis: 1}, {Axis: 0, Log: true}, {Axis: 1, Hard: true}, {Axis: 1, Coerce2D: true}, {Axis: 2, Log: true, Coerce2D: true}} {
		t.Run(fmt.Sprintf("%+v", *op), func(t *testing.T) { check(t, oneNode(op, 1, f32in(2, 3, 5)), 1e-6) })
	}
	// Rows longer than a vector and than a chunk of the vectorized path.
	check(t, oneNode(&ir.Softmax{Axis: -1}, 1, f32in(3, 197)), 1e-6)
	check(t, oneNode(&ir.Softmax{Axis: 1, Log: true}, 1, f32in(2, 70, 3)), 1e-6)
}

func TestReduce(t *testing.T) {
	kinds := []ir.ReduceKind{ir.ReduceMean, ir.ReduceSum, ir.ReduceMax, ir.ReduceMin, ir.ReduceProd, ir.ReduceL1, ir.ReduceL2, ir.ReduceSumSquare, ir.ReduceLogSumExp}
	for _, k := range kinds {
		for _, ax := range [][]int{{2, 3}, {1}, {-1}, {0, 2}, nil} {
			for _, keep := range []bool{true, false} {
				t.Run(fmt.Sprint(k, ax, keep), func(t *testing.T) {
					check(t, oneNode(&ir.Reduce{Fn: k, Axes: ax, KeepDims: keep}, 1, f32in(2, 3, 4, 5)), 1e-5)
				})
			}
		}
	}
	t.Run("axes input", func(t *testing.T) {
		check(t, oneNode(&ir.Reduce{Fn: ir.ReduceMean, KeepDims: true}, 1, f32in(2, 3, 4), i64c(-1, 1)), 1e-6)
	})
	t.Run("noop", func(t *testing.T) {
		check(t, oneNode(&ir.Reduce{Fn: ir.ReduceSumSquare, KeepDims: true, NoopWithEmptyAxes: true}, 1, f32in(2, 3)), 1e-6)
	})
	for _, m := range []bool{true, false} {
		for _, last := range []bool{true, false} {
			check(t, oneNode(&ir.ArgReduce{Max: m, Axis: 1, KeepDims: last, SelectLastIndex: last}, 1, f32in(3, 6, 2)), 0)
		}
	}
}

func TestActivations(t *testing.T) {
	ops := []ir.Op{&ir.LeakyRelu{Alpha: 0.1}, &ir.Elu{Alpha: 0.7}, &ir.Selu{Alpha: 1.6, Gamma: 1.05}, &ir.Celu{Alpha: 1.3},
		&ir.HardSigmoid{Alpha: 0.2, Beta: 0.5}, &ir.Gelu{}, &ir.Gelu{Tanh: true}, &ir.ThresholdedRelu{Alpha: 0.3}, &ir.Shrink{Bias: 0.2, Lambd: 0.5}}
	for _, op := range ops {
		t.Run(op.Kind(), func(t *testing.T) { check(t, oneNode(op, 1, f32in(4, 33)), 1e-6) })
	}
	check(t, oneNode(&ir.Clip{}, 1, f32in(9), f32c(nil, -0.5), f32c(nil, 0.25)), 0)
	check(t, oneNode(&ir.Clip{}, 1, f32in(9), absent, f32c(nil, 0.25)), 0)
	check(t, oneNode(&ir.Clip{}, 1, f32in(9)), 0)
}

func TestConvTranspose(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 2))
	cases := []struct {
		name string
		op   *ir.ConvTranspose
		x    []int
		w    []int
		bias bool
	}{
		{"3x3 s2", &ir.ConvTranspose{Strides: []int{2, 2}}, []int{2, 3, 4, 5}, []int{3, 4, 3, 3}, true},
		{"pads output_padding", &ir.ConvTranspose{Strides: []int{3, 2}, Pads: []int{1, 0, 2, 1}, OutputPadding: []int{1, 1}}, []int{1, 2, 3, 3}, []int{2, 3, 3, 3}, false},
		{"dilated grouped", &ir.ConvTranspose{Dilations: []int{2, 1}, Group: 2}, []int{1, 4, 3, 4}, []int{4, 3, 2, 3}, true},
		{"output_shape", &ir.ConvTranspose{Strides: []int{2, 2}, OutputShape: []int{10, 8}}, []int{1, 2, 4, 3}, []int{2, 2, 3, 3}, true},
		{"same upper", &ir.ConvTranspose{Strides: []int{2, 2}, AutoPad: "SAME_UPPER"}, []int{1, 2, 3, 3}, []int{2, 2, 3, 3}, false},
		{"same lower", &ir.ConvTranspose{Strides: []int{2, 2}, AutoPad: "SAME_LOWER"}, []int{1, 2, 3, 3}, []int{2, 2, 3, 3}, false},
		{"1-D", &ir.ConvTranspose{Strides: []int{3}, Pads: []int{1, 1}}, []int{2, 2, 5}, []int{2, 3, 4}, true},
	}
	t.Run("runtime weights", func(t *testing.T) {
		check(t, oneNode(&ir.ConvTranspose{Strides: []int{2, 1}, Group: 2}, 1, f32in(1, 4, 3, 3), f32in(4, 2, 3, 2), f32in(4)), 1e-5)
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ins := []in{f32in(c.x...), randConst(r, c.w...)}
			if c.bias {
				ins = append(ins, randConst(r, c.w[1]*max(c.op.Group, 1)))
			}
			check(t, oneNode(c.op, 1, ins...), 1e-5)
		})
	}
}

// TestMatMulTaskModes checks that the cases above reach the shared packing
// and the whole-row-block tasks at two threads.
func TestMatMulTaskModes(t *testing.T) {
	for _, c := range []struct {
		rows, k, cols, batch int
		shared, rowTasks     bool
	}{
		{197, 40, 700, 1, true, false},
		{2200, 24, 300, 1, false, true},
		{1100, 20, 290, 3, false, true},
		{197, 64, 197, 12, false, false},
	} {
		s := &mmStep{rows: c.rows, k: c.k, cols: c.cols, batch: c.batch}
		s.block(2)
		if s.sharedL != c.shared || s.rowTasks != c.rowTasks {
			t.Errorf("%+v: sharedL %v rowTasks %v", c, s.sharedL, s.rowTasks)
		}
	}
	// Few column tasks come in a multiple of the workers, of equal width
	// where the panels allow (ViT's QKV: 2304 columns, 144 panels).
	for _, c := range []struct{ cols, threads, ct, cw int }{
		{2304, 2, 12, 192},
		{3072, 2, 12, 256},
		{768, 2, 12, 64},
		{2304, 1, 9, 256},
		{300, 2, 10, 32},
	} {
		s := &mmStep{rows: 197, k: 768, cols: c.cols, batch: 1}
		s.block(c.threads)
		if s.ct != c.ct || s.cw != c.cw {
			t.Errorf("%d columns, %d threads: %d tasks of %d columns, want %d of %d", c.cols, c.threads, s.ct, s.cw, c.ct, c.cw)
		}
	}
}
