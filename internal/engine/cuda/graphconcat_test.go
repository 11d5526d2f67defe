package cuda

import (
	"fmt"
	"testing"

	"goinfer/internal/ir"
)

// denseBlock appends a DenseNet block of layers to b: each layer batch-
// normalizes and rectifies the concatenation of all earlier features, then
// a 1x1 and a 3x3 convolution add growth channels; the block returns the
// concatenation of all of them.
func (b *gb) denseBlock(x *ir.Value, c, layers, growth int) (*ir.Value, int) {
	feats := []*ir.Value{x}
	for l := 0; l < layers; l++ {
		in := x
		if len(feats) > 1 {
			in = b.node(&ir.Concat{Axis: 1}, feats...)
		}
		cin := c + l*growth
		h := b.node(&ir.Unary{Fn: ir.OpRelu}, b.bn(in, cin))
		h = b.node(&ir.Unary{Fn: ir.OpRelu}, b.bn(b.conv(h, cin, 2*growth, 1, 1, 0, 1, 1, false), 2*growth))
		feats = append(feats, b.conv(h, 2*growth, growth, 3, 1, 1, 1, 1, false))
	}
	return b.node(&ir.Concat{Axis: 1}, feats...), c + layers*growth
}

// denseNet is a two-block DenseNet of the given depth.
func denseNet(name string, layers int) *ir.Graph {
	b, x := newGB(name, 3, 12, 12)
	h := b.node(&ir.Unary{Fn: ir.OpRelu}, b.bn(b.conv(x, 3, 16, 3, 1, 1, 1, 1, false), 16))
	h = b.node(&ir.Pool{Max: true, Kernel: []int{2, 2}, Strides: []int{2, 2}, Pads: []int{0, 0, 0, 0}, Dilations: []int{1, 1}}, h)
	h, c := b.denseBlock(h, 16, layers, 8)
	// Transition: BN, ReLU, 1x1 convolution, average pooling.
	h = b.conv(b.node(&ir.Unary{Fn: ir.OpRelu}, b.bn(h, c)), c, c/2, 1, 1, 0, 1, 1, false)
	h = b.node(&ir.Pool{Kernel: []int{2, 2}, Strides: []int{2, 2}, Pads: []int{0, 0, 0, 0}, Dilations: []int{1, 1}}, h)
	h, c = b.denseBlock(h, c/2, layers, 8)
	h = b.node(&ir.Unary{Fn: ir.OpRelu}, b.bn(h, c))
	f := b.node(&ir.Flatten{Axis: 1}, b.node(&ir.GlobalPool{}, h))
	y := b.node(&ir.Gemm{Alpha: 1, Beta: 1, TransB: true}, f, b.w(0.3, 10, c), b.w(0.1, 10))
	return b.out(y)
}

// concatCases are graphs whose concatenations share buffers in awkward
// ways: inputs that cannot be written in place (the graph input, a value
// concatenated twice, a reshape's output, a graph output), concatenation
// outputs that are graph outputs or feed other ops, and interleaved
// groups.
func concatCases() []opCase {
	var cs []opCase
	add := func(g *ir.Graph) { cs = append(cs, opCase{g.Name, g}) }
	add(denseNet("densenet_tiny", 3))
	{
		b, x := newGB("concat_mixed", 8, 5, 5)
		r := b.node(&ir.Unary{Fn: ir.OpRelu}, x)
		c := b.conv(x, 8, 8, 3, 1, 1, 1, 1, true)
		s := b.node(&ir.Binary{Fn: ir.OpAdd}, c, r)
		k1 := b.node(&ir.Concat{Axis: 1}, x, r, c)
		k2 := b.node(&ir.Concat{Axis: 1}, x, r, c, s)
		// Another group, interleaved: r again (in two groups), a reshape.
		rs := b.node(&ir.Reshape{}, b.node(&ir.Unary{Fn: ir.OpSigmoid}, s), b.ints(0, 8, 5, 5))
		k3 := b.node(&ir.Concat{Axis: -3}, rs, r)
		bn := b.node(&ir.Unary{Fn: ir.OpTanh}, b.bn(k1, 24))
		m := b.node(&ir.Binary{Fn: ir.OpMul}, k2, k2)
		p := b.node(&ir.Pool{Max: true, Kernel: []int{3, 3}, Strides: []int{1, 1}, Pads: []int{1, 1, 1, 1}, Dilations: []int{1, 1}}, k3)
		add(b.out(bn, m, p, k1, s))
	}
	{
		// A batch norm reading a slice view whose rows differ from its
		// output's, and an elementwise op writing into a slice.
		b, x := newGB("concat_slices", 4, 3, 6)
		e := b.node(&ir.Unary{Fn: ir.OpExp}, x)
		l := b.node(&ir.LeakyRelu{Alpha: 0.2}, x)
		k := b.node(&ir.Concat{Axis: 1}, l, e)
		n := b.bn(l, 4)
		g := b.node(&ir.Gelu{}, b.bn(k, 8))
		add(b.out(n, g))
	}
	{
		// Views of views (the planner's and the simulator's offsets and
		// strides composed): a concatenation's prefix (a view of the
		// shared buffer) transposed, reshaped and transposed, split,
		// sliced and gathered, each read by products or elementwise ops;
		// and a transpose and a split piece written into a buffer's slice.
		b, x := newGB("concat_views", 4, 5, 5)
		r := b.node(&ir.Unary{Fn: ir.OpRelu}, x)
		e := b.node(&ir.Unary{Fn: ir.OpExp}, x)
		th := b.node(&ir.Unary{Fn: ir.OpTanh}, x)
		k1 := b.node(&ir.Concat{Axis: 1}, r, e)
		k2 := b.node(&ir.Concat{Axis: 1}, r, e, th)
		y1 := b.node(&ir.MatMul{}, b.node(&ir.Transpose{Perm: []int{0, 2, 3, 1}}, k1), b.w(0.3, 8, 6))
		tok := b.node(&ir.Transpose{Perm: []int{0, 2, 1}}, b.node(&ir.Reshape{}, k1, b.ints(0, 8, 25)))
		y2 := b.node(&ir.MatMul{}, tok, b.w(0.3, 8, 4))
		sp := b.nodeN(&ir.Split{Axis: 1, NumOutputs: 2}, 2, k1)
		y3 := b.node(&ir.Binary{Fn: ir.OpMul}, b.node(&ir.Unary{Fn: ir.OpSigmoid}, sp[0]), sp[1])
		y4 := b.node(&ir.Unary{Fn: ir.OpRelu}, b.node(&ir.Slice{}, k1, b.ints(1), b.ints(7), b.ints(1)))
		g := b.node(&ir.Reshape{}, b.node(&ir.Gather{Axis: 1}, k1, b.scalarInt(3)), b.ints(0, 25))
		y5 := b.node(&ir.MatMul{}, g, b.w(0.3, 25, 2))
		xs := b.nodeN(&ir.Split{Axis: 1, NumOutputs: 2}, 2, x)
		k3 := b.node(&ir.Concat{Axis: 1}, b.node(&ir.Transpose{Perm: []int{0, 1, 3, 2}}, x), xs[1], b.node(&ir.Unary{Fn: ir.OpSigmoid}, xs[0]))
		y6 := b.node(&ir.Unary{Fn: ir.OpTanh}, b.bn(k3, 8))
		add(b.out(y1, y2, y3, y4, y5, y6, b.bn(k2, 12)))
	}
	return cs
}

func TestGraphPlanConcatInPlace(t *testing.T) {
	for _, c := range concatCases() {
		t.Run(c.name, func(t *testing.T) {
			for _, n := range []int{1, 3} {
				for _, cl := range []bool{false, true} {
					checkPlanned(t, c.g, n, cl, 1e-5)
				}
			}
		})
	}
}

func TestGraphPlanDenseNet121(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: densenet121 simulated on the CPU")
	}
	// At 32 px (1x1 in the last block), batch 1, channels-last: the
	// simulation is slow under -race; the tiny DenseNets cover both
	// layouts and odd batches.
	g, err := cachedModel("densenet121", 32)
	if err != nil {
		t.Fatal(err)
	}
	checkPlanned(t, g, 1, true, 1e-5)
}

// TestGraphPlanConcatCopies counts the bytes a DenseNet's copies move:
// quadratic in a block's depth when every concatenation copies, linear
// when they share buffers; and densenet121's, before and after.
func TestGraphPlanConcatCopies(t *testing.T) {
	copied := func(g *ir.Graph, opts planOptions) (int64, *gplan) {
		b, _, err := ir.Optimize(g, 2)
		if err != nil {
			t.Fatal(err)
		}
		p, err := planGraphWith(b, 2, 2, true, opts)
		if err != nil {
			t.Fatal(err)
		}
		return p.copiedBytes(), p
	}
	var before, after []int64
	depths := []int{6, 12, 24}
	for _, l := range depths {
		g := denseNet(fmt.Sprint("densenet_", l), l)
		b, _ := copied(g, planOptions{copyConcats: true})
		a, _ := copied(g, planOptions{})
		before, after = append(before, b), append(after, a)
	}
	t.Logf("tiny densenets of %v layers per block: copied bytes %v (every concatenation copied), %v (shared)", depths, before, after)
	for k := 1; k < len(depths); k++ {
		// Doubling the depth: quadratic growth is about 4x, linear 2x.
		if r := float64(before[k]) / float64(before[k-1]); r < 3 {
			t.Errorf("copies grew %.2fx from %d to %d layers when every concatenation copies; want quadratic", r, depths[k-1], depths[k])
		}
		if r := float64(after[k]) / float64(after[k-1]); r > 2.2 {
			t.Errorf("copies grew %.2fx from %d to %d layers with shared buffers; want linear", r, depths[k-1], depths[k])
		}
	}
	g, err := cachedModel("densenet121", 64)
	if err != nil {
		t.Fatal(err)
	}
	b, pb := copied(g, planOptions{copyConcats: true})
	a, pa := copied(g, planOptions{})
	t.Logf("densenet121 at 64 px, batch 2, fp16: %d bytes copied in %d steps before, %d in %d steps after", b, len(pb.steps), a, len(pa.steps))
	if a*5 > b {
		t.Errorf("densenet121 copies %d bytes with shared buffers, %d without; want at least 5x less", a, b)
	}
	// One buffer per dense block, all its concatenations views of it.
	roots := map[int]bool{}
	for v := range pa.vals {
		if pa.isView(v) {
			roots[pa.root(v)] = true
		}
	}
	if len(roots) != 4 {
		t.Errorf("%d shared concatenation buffers; want one per dense block (4)", len(roots))
	}
	// Each dense layer: batch norm + ReLU (one kernel reading the buffer's
	// prefix), two convolutions and one copy of its new channels (the
	// block inputs too); the transitions and the head: batch norm + ReLU;
	// the RGB stem's padding (one pad step); the classifier's bias is in
	// its product's epilogue (gemmEpilogue).
	var copies, affine, ew, pad int
	for _, s := range pa.steps {
		switch {
		case s.isCopy():
			copies++
		case s.kind == stAffine:
			affine++
		case s.kind == stEW:
			ew++
		case s.kind == stPadCL:
			pad++
		}
	}
	if affine != 58+3+1 || copies != 58+4 || ew != 0 || pad != 1 {
		t.Errorf("%d affine, %d copy, %d other elementwise and %d pad steps; want 62, 62, 0 and 1", affine, copies, ew, pad)
	}
}

// TestGraphPlanViewsOfViews checks that concat_views's row-major plan
// reads the concatenation prefix through views of it (a transpose, split
// pieces, a slice, a gather: views of a view of the buffer) rather than
// packed copies; TestGraphPlanConcatInPlace checks their values.
func TestGraphPlanViewsOfViews(t *testing.T) {
	var g *ir.Graph
	for _, c := range concatCases() {
		if c.name == "concat_views" {
			g = c.g
		}
	}
	b, _, err := ir.Optimize(g, 3)
	if err != nil {
		t.Fatal(err)
	}
	p, err := planGraph(b, 3, 4, false)
	if err != nil {
		t.Fatal(err)
	}
	nested, offset := 0, 0
	for v, val := range p.vals {
		if val.kind != gAlias || p.vals[val.alias].kind != gAlias || !p.isView(val.alias) {
			continue
		}
		nested++
		if p.offset(v) != 0 {
			offset++
		}
	}
	t.Logf("%d views of concatenation views, %d at an offset", nested, offset)
	// Split's second piece, the slice and the gather start past the
	// buffer's first element.
	if nested < 5 || offset < 3 {
		t.Errorf("%d views of concatenation views, %d of them at an offset; want at least 5 and 3", nested, offset)
	}
}
