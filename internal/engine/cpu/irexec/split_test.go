package irexec

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// TestSplit checks that a Split of chunk-image plans computes what one
// whole-batch plan does, chunks fewer, as many as and more than workers.
func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		batch, chunk, workers int
	}{
		{"chunks of 1 on 2 workers", 6, 1, 2},
		{"chunks of 2 on 2 workers", 6, 2, 2},
		{"more workers than chunks", 6, 3, 4},
		{"one chunk", 4, 4, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			whole := compileChain(t, tc.batch, 1).NewExec()
			defer whole.Close()
			in := randTensor(rand.New(rand.NewPCG(5, 5)), ir.Type{DType: tensor.Float32, Shape: tensor.Shape{tc.batch, 3, 16, 16}})
			want, err := whole.RunTensors(context.Background(), []*tensor.Tensor{in})
			if err != nil {
				t.Fatal(err)
			}
			s, err := NewSplit(compileChain(t, tc.chunk, 1), tc.chunk, tc.workers)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			out := make([][]byte, len(want))
			for i := range out {
				out[i] = make([]byte, len(want[i].Data))
			}
			// Twice: the second run reuses the Execs.
			for range 2 {
				if err := s.Run(context.Background(), [][]byte{in.Data}, out, tc.batch); err != nil {
					t.Fatal(err)
				}
				for i := range want {
					got, exp := f32(out[i]), want[i].Float32s()
					for j := range exp {
						if d := math.Abs(float64(got[j] - exp[j])); d > 1e-5*(1+math.Abs(float64(exp[j]))) {
							t.Fatalf("output %d element %d: %g, the whole batch gives %g", i, j, got[j], exp[j])
						}
					}
				}
			}
		})
	}
}

// TestSplitErrors checks the arguments Split refuses.
func TestSplitErrors(t *testing.T) {
	if _, err := NewSplit(compileChain(t, 2, 2), 2, 2); err == nil {
		t.Error("NewSplit over a 2-thread plan: no error")
	}
	if _, err := NewSplit(compileChain(t, 2, 1), 1, 2); err == nil {
		t.Error("NewSplit with a chunk unlike the plan's batch: no error")
	}
	s, err := NewSplit(compileChain(t, 2, 1), 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	img := 3 * 16 * 16 * 4
	out := [][]byte{make([]byte, 4*5*4), make([]byte, 4*5*4)}
	for _, tc := range []struct {
		name string
		in   [][]byte
		out  [][]byte
		n    int
	}{
		{"batch not a multiple of the chunk", [][]byte{make([]byte, 3*img)}, out, 3},
		{"input too short", [][]byte{make([]byte, 3*img)}, out, 4},
		{"one output missing", [][]byte{make([]byte, 4*img)}, out[:1], 4},
	} {
		if err := s.Run(context.Background(), tc.in, tc.out, tc.n); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if err := s.Run(context.Background(), [][]byte{make([]byte, 4*img)}, out, 4); err != nil {
		t.Errorf("valid run: %v", err)
	}
}
