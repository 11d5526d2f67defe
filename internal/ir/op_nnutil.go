package ir

import (
	"fmt"
	"runtime"
	"sync"
)

// Helpers the NN ops share: optional inputs, input checks, and the
// parallel loop their reference kernels use.

// parallelFor calls f(i) for i in [0, n) on up to GOMAXPROCS goroutines;
// the calls must touch disjoint data.
func parallelFor(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			f(i)
		}
		return
	}
	var next sync.Mutex
	i := 0
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				next.Lock()
				k := i
				i++
				next.Unlock()
				if k >= n {
					return
				}
				f(k)
			}
		}()
	}
	wg.Wait()
}

// floorDiv is a/b rounded toward minus infinity.
func floorDiv(a, b int) int {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// in2 returns in[i], nil when absent.
func in2(in []*Value, i int) *Value {
	if i >= 0 && i < len(in) {
		return in[i]
	}
	return nil
}

// arg returns in[i], nil when absent.
func arg(in []*Array, i int) *Array {
	if i >= 0 && i < len(in) {
		return in[i]
	}
	return nil
}

// wantFloat checks that input i is a floating-point tensor.
func wantFloat(in []*Value, i int) error {
	if !isFloatType(in[i].Type.DType) {
		return fmt.Errorf("input %d is %s, want a floating-point tensor", i, in[i].Type)
	}
	return nil
}

// sameType returns a copy of t.
func sameType(t Type) Type { return Type{DType: t.DType, Shape: t.Shape.Clone()} }

// inferArrays runs op's Infer on the arrays' types, so that an Eval called
// without a bound graph (Evaluate on inputs of other shapes) refuses
// inputs Infer would have refused instead of indexing past them.
func inferArrays(op Op, in []*Array) error {
	vals := make([]*Value, len(in))
	for i, a := range in {
		if a != nil {
			vals[i] = &Value{Name: fmt.Sprintf("input %d", i), Type: Type{DType: a.DType, Shape: a.Shape}}
		}
	}
	_, err := op.Infer(vals)
	return err
}
