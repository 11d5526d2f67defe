package irexec

import (
	"bytes"
	"context"
	"testing"

	"goinfer/internal/ir"
)

func TestSplitNode(t *testing.T) {
	for _, tc := range []struct{ node, names, ops string }{
		{`node "conv1" (Conv)`, "conv1", "Conv"},
		{`a Relu node`, "", "Relu"},
		{`node "/f.4/Conv" (Conv) + node "/f.4/pool" (GlobalAveragePool)`, "/f.4/Conv+/f.4/pool", "Conv+GlobalAveragePool"},
		{`node "a (b)" (Mul) + a Add node`, "a (b)+", "Mul+Add"},
	} {
		names, ops := splitNode(tc.node)
		if names != tc.names || ops != tc.ops {
			t.Errorf("splitNode(%q) = %q, %q; want %q, %q", tc.node, names, ops, tc.names, tc.ops)
		}
	}
}

// TestProfile checks Exec.Profile and Split.Profile against Run: the same
// outputs, one StepTime per step with its node's name, kind and kernel.
func TestProfile(t *testing.T) {
	ctx := context.Background()
	relu := func(n int) *ir.Graph { return oneNode(&ir.Unary{Fn: ir.OpRelu}, 1, f32in(n, 3, 5, 5)) }
	for _, chunk := range []int{0, 1, 2} {
		b, err := ir.Bind(relu(4), 4)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Compile(ctx, b, Options{Threads: 2 - min(chunk, 1)})
		if err != nil {
			t.Fatal(err)
		}
		in := make([]byte, 4*3*5*5*4)
		for i := range in {
			in[i] = byte(i * 7)
		}
		want, got := make([]byte, len(in)), make([]byte, len(in))
		var steps []StepTime
		if chunk == 0 {
			x := p.NewExec()
			if err := x.Run(ctx, [][]byte{in}, [][]byte{want}); err != nil {
				t.Fatal(err)
			}
			if steps, err = x.Profile(ctx, [][]byte{in}, [][]byte{got}, 3); err != nil {
				t.Fatal(err)
			}
			if _, err := x.Profile(ctx, [][]byte{in}, [][]byte{got}, 0); err == nil {
				t.Error("Profile of 0 forwards: no error")
			}
			x.Close()
		} else {
			bc, err := ir.Bind(relu(chunk), chunk)
			if err != nil {
				t.Fatal(err)
			}
			pc, err := Compile(ctx, bc, Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			s, err := NewSplit(pc, chunk, 2)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Run(ctx, [][]byte{in}, [][]byte{want}, 4); err != nil {
				t.Fatal(err)
			}
			if steps, err = s.Profile(ctx, [][]byte{in}, [][]byte{got}, 4, 3); err != nil {
				t.Fatal(err)
			}
			if s.job.prof != nil {
				t.Error("Split.Profile left its timers set: Run would keep timing")
			}
			s.Close()
			p = pc
		}
		if !bytes.Equal(got, want) {
			t.Errorf("chunk %d: Profile's outputs differ from Run's", chunk)
		}
		if len(steps) != p.Steps() {
			t.Fatalf("chunk %d: %d step times, %d steps", chunk, len(steps), p.Steps())
		}
		if s := steps[0]; s.Names != "n" || s.Ops != "Relu" || s.Step != "unaryStep" || s.Time < 0 {
			t.Errorf("chunk %d: step 0 is %+v", chunk, s)
		}
	}
}
