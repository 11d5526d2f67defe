package checkpoint

import (
	"fmt"

	"goinfer/internal/tensor"
)

// CastFloats returns a state dict whose floating-point tensors are
// converted to dt (Float32, Float16 or BFloat16, rounding to nearest even);
// integer tensors (num_batches_tracked) are kept as they are. The result
// owns its memory, so sd may be closed afterwards.
func CastFloats(sd *StateDict, dt tensor.DType) (*StateDict, error) {
	switch dt {
	case tensor.Float32, tensor.Float16, tensor.BFloat16:
	default:
		return nil, fmt.Errorf("cannot cast weights to %s (want float32, float16 or bfloat16)", dt)
	}
	out := NewStateDict()
	for _, n := range sd.Names() {
		t, _ := sd.Get(n)
		switch t.DType {
		case tensor.Float32, tensor.Float16, tensor.BFloat16, tensor.Float64:
		default:
			out.Set(n, t)
			continue
		}
		v, err := t.ToFloat32()
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", n, err)
		}
		c := tensor.New(dt, t.Shape...)
		switch dt {
		case tensor.Float32:
			copy(c.Float32s(), v)
		case tensor.Float16:
			for i, x := range v {
				h := tensor.Float32ToF16(x)
				c.Data[2*i], c.Data[2*i+1] = byte(h), byte(h>>8)
			}
		case tensor.BFloat16:
			for i, x := range v {
				h := tensor.Float32ToBF16(x)
				c.Data[2*i], c.Data[2*i+1] = byte(h), byte(h>>8)
			}
		}
		out.Set(n, c)
	}
	return out, nil
}
