package irexec

import (
	"math"

	"goinfer/internal/engine/cpu/vec"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// binaryStep applies a function of two NumPy-broadcast inputs. Rows of
// the collapsed iteration space read each input with stride 0 or 1.
type binaryStep struct {
	a, b, dst int
	it        *rowIter
	fn        ir.BinaryKind
	dt        tensor.DType // the inputs' dtype
	// For float32: f, or cmp for the comparisons; for integers, the
	// generic loops in intBinaryRow.
	f   func(a, b float32) float32
	cmp func(a, b float32) bool
}

// newBinary makes a broadcast step of inputs a and b into dst.
func newBinary(p *Plan, a, b, dst int) *binaryStep {
	out := p.vals[dst].shape
	sa := broadcastStrides(p.vals[a].shape, out)
	sb := broadcastStrides(p.vals[b].shape, out)
	shape, ss := collapse(out, sa, sb, stridesOf(out))
	return &binaryStep{a: a, b: b, dst: dst, it: newRowIter(shape, ss[:2]), dt: p.vals[a].dtype}
}

func pyMod64(a, b float64) float64 {
	m := math.Mod(a, b)
	if m != 0 && (m < 0) != (b < 0) {
		m += b
	}
	return m
}

var floatBinary = map[ir.BinaryKind]func(a, b float32) float32{
	ir.OpAdd: func(a, b float32) float32 { return a + b },
	ir.OpSub: func(a, b float32) float32 { return a - b },
	ir.OpMul: func(a, b float32) float32 { return a * b },
	ir.OpDiv: func(a, b float32) float32 { return a / b },
	ir.OpPow: func(a, b float32) float32 { return float32(math.Pow(float64(a), float64(b))) },
	ir.OpMod: func(a, b float32) float32 { return float32(pyMod64(float64(a), float64(b))) },
	ir.OpFmod: func(a, b float32) float32 {
		return float32(math.Mod(float64(a), float64(b)))
	},
	ir.OpPRelu: func(a, b float32) float32 {
		if a < 0 {
			return a * b
		}
		return a
	},
}

var floatCompare = map[ir.BinaryKind]func(a, b float32) bool{
	ir.OpEqual:          func(a, b float32) bool { return a == b },
	ir.OpLess:           func(a, b float32) bool { return a < b },
	ir.OpLessOrEqual:    func(a, b float32) bool { return a <= b },
	ir.OpGreater:        func(a, b float32) bool { return a > b },
	ir.OpGreaterOrEqual: func(a, b float32) bool { return a >= b },
}

func buildBinary(nc *nodeCtx) (step, error) {
	op := nc.n.Op.(*ir.Binary)
	a, b := nc.inVal(0), nc.inVal(1)
	s := newBinary(nc.c.p, nc.in[0], nc.in[1], nc.out[0])
	s.fn = op.Fn
	if g := buildGenericBinary(nc, op, a, b); g != nil {
		return g, nil
	}
	switch a.dtype {
	case tensor.Float32:
		if b.dtype != tensor.Float32 {
			return nil, unsupportedf(a.dtype.String()+"^"+b.dtype.String(), "%s of %s and %s", op.Fn, a.dtype, b.dtype)
		}
		if f, ok := floatBinary[op.Fn]; ok {
			s.f = f
			return s, nil
		}
		if f, ok := floatCompare[op.Fn]; ok {
			s.cmp = f
			return s, nil
		}
	case tensor.Int64, tensor.Int32:
		if b.dtype != a.dtype {
			return nil, unsupportedf(a.dtype.String()+"^"+b.dtype.String(), "%s of %s and %s", op.Fn, a.dtype, b.dtype)
		}
		switch op.Fn {
		case ir.OpAdd, ir.OpSub, ir.OpMul, ir.OpDiv, ir.OpMod, ir.OpFmod,
			ir.OpEqual, ir.OpLess, ir.OpLessOrEqual, ir.OpGreater, ir.OpGreaterOrEqual:
			return s, nil
		}
	case tensor.Bool:
		switch op.Fn {
		case ir.OpAnd, ir.OpOr, ir.OpXor, ir.OpEqual:
			return s, nil
		}
	}
	return nil, unsupportedf(a.dtype.String(), "%s of %s", op.Fn, a.dtype)
}

// buildGenericBinary takes the dtypes the typed kernels lack: any numeric
// pair for Pow, and float64, float16, bfloat16, int8 and uint8 operands
// of the arithmetic and comparisons.
func buildGenericBinary(nc *nodeCtx, op *ir.Binary, a, b *value) step {
	typed := func(dt tensor.DType) bool {
		switch dt {
		case tensor.Float32, tensor.Int64, tensor.Int32, tensor.Bool:
			return true
		}
		return false
	}
	if !numeric(a.dtype) || !numeric(b.dtype) || a.dtype == tensor.Bool {
		return nil
	}
	if typed(a.dtype) && a.dtype == b.dtype && op.Fn != ir.OpPow {
		return nil
	}
	if typed(a.dtype) && a.dtype == b.dtype && op.Fn == ir.OpPow && a.dtype == tensor.Float32 {
		return nil
	}
	f := genericBinary(op.Fn, op.Fn == ir.OpDiv && isIntDType(a.dtype))
	if f == nil {
		return nil
	}
	return newGeneric(nc, []int{nc.in[0], nc.in[1]}, f)
}

func (s *binaryStep) run(x *Exec) error {
	x.parRange(s, s.it.rows, max(1, eltGrain/s.it.inner))
	return nil
}

func (s *binaryStep) rng(x *Exec, _, lo, hi int) {
	it := s.it
	n, sa, sb := it.inner, it.in[0], it.in[1]
	for row := lo; row < hi; row++ {
		oa, ob := it.offset(0, row), it.offset(1, row)
		switch s.dt {
		case tensor.Float32:
			a, b := x.f32(s.a)[oa:], x.f32(s.b)[ob:]
			if s.cmp != nil {
				d := bools(x.view(s.dst))[row*n : (row+1)*n]
				for i := range d {
					d[i] = s.cmp(a[i*sa], b[i*sb])
				}
				continue
			}
			floatRow(s.fn, s.f, x.f32(s.dst)[row*n:(row+1)*n], a, b, sa, sb)
		case tensor.Int64:
			intRow(s.fn, x.view(s.dst), row*n, n, i64(x.view(s.a))[oa:], i64(x.view(s.b))[ob:], sa, sb)
		case tensor.Int32:
			intRow(s.fn, x.view(s.dst), row*n, n, i32(x.view(s.a))[oa:], i32(x.view(s.b))[ob:], sa, sb)
		case tensor.Bool:
			a, b := bools(x.view(s.a))[oa:], bools(x.view(s.b))[ob:]
			d := bools(x.view(s.dst))[row*n : (row+1)*n]
			for i := range d {
				u, v := a[i*sa], b[i*sb]
				switch s.fn {
				case ir.OpAnd:
					d[i] = u && v
				case ir.OpOr:
					d[i] = u || v
				default: // Xor, and Equal negated below
					d[i] = u != v
				}
				if s.fn == ir.OpEqual {
					d[i] = !d[i]
				}
			}
		}
	}
}

// floatRow computes one row; the common arithmetic has its own loops
// (vectorized where package vec has them, a broadcast operand of an
// addition or product on either side), the rest goes through f.
func floatRow(fn ir.BinaryKind, f func(a, b float32) float32, d, a, b []float32, sa, sb int) {
	if sa == 0 && sb == 1 && (fn == ir.OpAdd || fn == ir.OpMul) {
		a, b, sa, sb = b, a, sb, sa // commutative: the scalar second
	}
	switch {
	case fn == ir.OpAdd && sa == 1 && sb == 1:
		vec.Add(d, a, b)
	case fn == ir.OpAdd && sa == 1 && sb == 0:
		vec.ScaleShift(d, a, 1, b[0])
	case fn == ir.OpMul && sa == 1 && sb == 1:
		vec.Mul(d, a, b)
	case fn == ir.OpMul && sa == 1 && sb == 0:
		vec.ScaleShift(d, a, b[0], 0)
	case fn == ir.OpSub && sa == 1 && sb == 1:
		a, b = a[:len(d)], b[:len(d)]
		for i := range d {
			d[i] = a[i] - b[i]
		}
	case fn == ir.OpSub && sa == 1 && sb == 0:
		vec.ScaleShift(d, a, 1, -b[0])
	case fn == ir.OpDiv && sa == 1 && sb == 1:
		a, b = a[:len(d)], b[:len(d)]
		for i := range d {
			d[i] = a[i] / b[i]
		}
	case fn == ir.OpDiv && sa == 1 && sb == 0:
		c := b[0]
		a = a[:len(d)]
		for i := range d {
			d[i] = a[i] / c
		}
	default:
		for i := range d {
			d[i] = f(a[i*sa], b[i*sb])
		}
	}
}

// intRow computes one row of an integer op; dst's elements from d0 on are
// of the inputs' type, or bools for comparisons. Division by zero, which
// ONNX leaves undefined, gives 0.
func intRow[T int32 | int64](fn ir.BinaryKind, dst []byte, d0, n int, a, b []T, sa, sb int) {
	switch fn {
	case ir.OpEqual, ir.OpLess, ir.OpLessOrEqual, ir.OpGreater, ir.OpGreaterOrEqual:
		d := bools(dst)[d0 : d0+n]
		for i := range d {
			u, v := a[i*sa], b[i*sb]
			switch fn {
			case ir.OpEqual:
				d[i] = u == v
			case ir.OpLess:
				d[i] = u < v
			case ir.OpLessOrEqual:
				d[i] = u <= v
			case ir.OpGreater:
				d[i] = u > v
			default:
				d[i] = u >= v
			}
		}
		return
	}
	var d []T
	var zero T
	switch any(zero).(type) {
	case int64:
		d = any(i64(dst)).([]T)[d0 : d0+n]
	default:
		d = any(i32(dst)).([]T)[d0 : d0+n]
	}
	for i := range d {
		u, v := a[i*sa], b[i*sb]
		switch fn {
		case ir.OpAdd:
			d[i] = u + v
		case ir.OpSub:
			d[i] = u - v
		case ir.OpMul:
			d[i] = u * v
		case ir.OpDiv:
			if v == 0 {
				d[i] = 0
			} else {
				d[i] = u / v
			}
		case ir.OpMod, ir.OpFmod:
			if v == 0 {
				d[i] = 0
				continue
			}
			m := u % v
			if fn == ir.OpMod && m != 0 && (m < 0) != (v < 0) {
				m += v
			}
			d[i] = m
		}
	}
}

// variadicStep folds Sum/Max/Min/Mean pairwise into its output.
type variadicStep struct {
	first *binaryStep   // inputs 0 and 1 (or 0 with itself)
	rest  []*binaryStep // output with input k
	fn    ir.VariadicKind
	n     int
	dst   int
}

func maxNaN(a, b float32) float32 {
	if a != a || b != b {
		return float32(math.NaN())
	}
	return max(a, b)
}

func minNaN(a, b float32) float32 {
	if a != a || b != b {
		return float32(math.NaN())
	}
	return min(a, b)
}

func buildVariadic(nc *nodeCtx) (step, error) {
	op := nc.n.Op.(*ir.Variadic)
	for i := range nc.in {
		if dt := nc.inVal(i).dtype; dt != tensor.Float32 {
			if len(nc.in) <= 3 && numeric(dt) && dt != tensor.Bool {
				return newGeneric(nc, nc.in, genericVariadic(op.Fn)), nil
			}
			return nil, unsupportedf(dt.String(), "%s of %s", op.Fn, dt)
		}
	}
	var f func(a, b float32) float32
	fn := ir.OpAdd
	switch op.Fn {
	case ir.OpSum, ir.OpMean:
		f = floatBinary[ir.OpAdd]
	case ir.OpMax:
		f, fn = maxNaN, "Max"
	case ir.OpMin:
		f, fn = minNaN, "Min"
	default:
		return nil, unsupportedf("", "unknown variadic %s", op.Fn)
	}
	p := nc.c.p
	s := &variadicStep{fn: op.Fn, n: len(nc.in), dst: nc.out[0]}
	second := nc.in[0]
	if len(nc.in) > 1 {
		second = nc.in[1]
	}
	s.first = newBinary(p, nc.in[0], second, nc.out[0])
	s.first.fn, s.first.f = fn, f
	if len(nc.in) == 1 {
		// One input: broadcast it with itself under max (the identity).
		s.first.fn, s.first.f = "Max", func(a, _ float32) float32 { return a }
	}
	for _, in := range nc.in[min(2, len(nc.in)):] {
		b := newBinary(p, nc.out[0], in, nc.out[0])
		b.fn, b.f = fn, f
		s.rest = append(s.rest, b)
	}
	return s, nil
}

func (s *variadicStep) run(x *Exec) error {
	s.first.run(x)
	for _, b := range s.rest {
		b.run(x)
	}
	if s.fn == ir.OpMean {
		d := x.f32(s.dst)
		inv := 1 / float32(s.n)
		for i := range d {
			d[i] *= inv
		}
	}
	return nil
}

// whereStep selects x where the condition holds, else y, broadcast.
type whereStep struct {
	c, a, b, dst int
	es           int
	it           *rowIter
}

func buildWhere(nc *nodeCtx) (step, error) {
	out := nc.outVal(0)
	sc := broadcastStrides(nc.inVal(0).shape, out.shape)
	sa := broadcastStrides(nc.inVal(1).shape, out.shape)
	sb := broadcastStrides(nc.inVal(2).shape, out.shape)
	shape, ss := collapse(out.shape, sc, sa, sb, stridesOf(out.shape))
	return &whereStep{c: nc.in[0], a: nc.in[1], b: nc.in[2], dst: nc.out[0], es: out.dtype.Size(), it: newRowIter(shape, ss[:3])}, nil
}

func (s *whereStep) run(x *Exec) error {
	x.parRange(s, s.it.rows, max(1, eltGrain/s.it.inner))
	return nil
}

func (s *whereStep) rng(x *Exec, _, lo, hi int) {
	it, es := s.it, s.es
	n := it.inner
	c, a, b, d := bools(x.view(s.c)), x.view(s.a), x.view(s.b), x.view(s.dst)
	for row := lo; row < hi; row++ {
		oc, oa, ob := it.offset(0, row), it.offset(1, row), it.offset(2, row)
		for i := 0; i < n; i++ {
			src, o := b, ob+i*it.in[2]
			if c[oc+i*it.in[0]] {
				src, o = a, oa+i*it.in[1]
			}
			copy(d[(row*n+i)*es:(row*n+i+1)*es], src[o*es:(o+1)*es])
		}
	}
}
