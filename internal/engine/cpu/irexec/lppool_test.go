package irexec

import (
	"context"
	"errors"
	"testing"

	"goinfer/internal/ir"
)

// LpPool and GlobalLpPool are ops of their own in ir; without kernels
// here they are refused, never run as another pool.
func TestLpPoolsUnsupported(t *testing.T) {
	for _, op := range []ir.Op{
		&ir.LpPool{P: 2, Pool: ir.Pool{Kernel: []int{2, 2}}},
		&ir.GlobalLpPool{P: 2},
	} {
		b, err := ir.Bind(oneNode(op, 1, f32in(1, 2, 4, 4)), 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Compile(context.Background(), b, Options{}); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: got %v, want ErrUnsupported", op.Kind(), err)
		}
	}
}
