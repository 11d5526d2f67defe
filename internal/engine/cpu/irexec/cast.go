package irexec

import (
	"encoding/binary"
	"math"

	"goinfer/internal/tensor"
)

// castStep converts between dtypes with ir.Cast's rules: floats round to
// nearest, integers truncate toward zero and wrap, booleans are v != 0.
// Integer-to-integer conversions go through int64, the rest through
// float64.
type castStep struct {
	src, dst int
	from, to tensor.DType
}

func castable(dt tensor.DType) bool {
	switch dt {
	case tensor.Float32, tensor.Float64, tensor.Float16, tensor.BFloat16,
		tensor.Int64, tensor.Int32, tensor.Int8, tensor.Uint8, tensor.Bool:
		return true
	}
	return false
}

func isIntLike(dt tensor.DType) bool {
	switch dt {
	case tensor.Int64, tensor.Int32, tensor.Int8, tensor.Uint8, tensor.Bool:
		return true
	}
	return false
}

func buildCast(nc *nodeCtx) (step, error) {
	from, to := nc.inVal(0).dtype, nc.outVal(0).dtype
	if !castable(from) || !castable(to) {
		return nil, unsupportedf(from.String()+"->"+to.String(), "Cast from %s to %s", from, to)
	}
	if from == to {
		return buildView(nc)
	}
	return &castStep{src: nc.in[0], dst: nc.out[0], from: from, to: to}, nil
}

func (s *castStep) run(x *Exec) error {
	x.parRange(s, x.p.vals[s.dst].elems, eltGrain)
	return nil
}

func (s *castStep) rng(x *Exec, _, lo, hi int) {
	src, dst := x.view(s.src), x.view(s.dst)
	if s.from == tensor.Float32 && s.to == tensor.Float16 {
		f, d := f32(src), dst
		for i := lo; i < hi; i++ {
			binary.LittleEndian.PutUint16(d[2*i:], tensor.Float32ToF16(f[i]))
		}
		return
	}
	ints := isIntLike(s.from) && isIntLike(s.to)
	for i := lo; i < hi; i++ {
		if ints {
			storeInt(dst, s.to, i, loadInt(src, s.from, i))
			continue
		}
		storeFloat(dst, s.to, i, loadFloat(src, s.from, i))
	}
}

func loadInt(b []byte, dt tensor.DType, i int) int64 {
	le := binary.LittleEndian
	switch dt {
	case tensor.Int64:
		return int64(le.Uint64(b[8*i:]))
	case tensor.Int32:
		return int64(int32(le.Uint32(b[4*i:])))
	case tensor.Int8:
		return int64(int8(b[i]))
	case tensor.Uint8:
		return int64(b[i])
	}
	if b[i] != 0 {
		return 1
	}
	return 0
}

func storeInt(b []byte, dt tensor.DType, i int, v int64) {
	le := binary.LittleEndian
	switch dt {
	case tensor.Int64:
		le.PutUint64(b[8*i:], uint64(v))
	case tensor.Int32:
		le.PutUint32(b[4*i:], uint32(v))
	case tensor.Int8, tensor.Uint8:
		b[i] = byte(v)
	case tensor.Bool:
		b[i] = 0
		if v != 0 {
			b[i] = 1
		}
	}
}

func loadFloat(b []byte, dt tensor.DType, i int) float64 {
	le := binary.LittleEndian
	switch dt {
	case tensor.Float32:
		return float64(math.Float32frombits(le.Uint32(b[4*i:])))
	case tensor.Float64:
		return math.Float64frombits(le.Uint64(b[8*i:]))
	case tensor.Float16:
		return float64(tensor.F16ToFloat32(le.Uint16(b[2*i:])))
	case tensor.BFloat16:
		return float64(tensor.BF16ToFloat32(le.Uint16(b[2*i:])))
	}
	return float64(loadInt(b, dt, i))
}

func storeFloat(b []byte, dt tensor.DType, i int, v float64) {
	le := binary.LittleEndian
	switch dt {
	case tensor.Float32:
		le.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	case tensor.Float64:
		le.PutUint64(b[8*i:], math.Float64bits(v))
	case tensor.Float16:
		le.PutUint16(b[2*i:], tensor.Float32ToF16(float32(v)))
	case tensor.BFloat16:
		le.PutUint16(b[2*i:], tensor.Float32ToBF16(float32(v)))
	case tensor.Bool:
		b[i] = 0
		if v != 0 {
			b[i] = 1
		}
	default:
		storeInt(b, dt, i, truncInt(v))
	}
}

// truncInt truncates toward zero, saturating at int64's range; NaN gives 0.
func truncInt(v float64) int64 {
	switch {
	case math.IsNaN(v):
		return 0
	case v >= math.MaxInt64:
		return math.MaxInt64
	case v <= math.MinInt64:
		return math.MinInt64
	}
	return int64(v)
}

// castLike is Cast to the second input's dtype.
func buildCastLike(nc *nodeCtx) (step, error) { return buildCast(nc) }
