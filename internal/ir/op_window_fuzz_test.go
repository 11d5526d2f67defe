package ir

import (
	"testing"

	"goinfer/internal/tensor"
)

// fuzzInts reads small ints from b, each in [lo, lo+span).
type fuzzInts struct{ b []byte }

func (f *fuzzInts) next(lo, span int) int {
	if len(f.b) == 0 {
		return lo
	}
	v := int(f.b[0]) % span
	f.b = f.b[1:]
	return lo + v
}

func (f *fuzzInts) list(n, lo, span int) []int {
	if f.next(0, 4) == 0 {
		return nil
	}
	out := make([]int, n)
	for i := range out {
		out[i] = f.next(lo, span)
	}
	return out
}

// FuzzWindowOps feeds Conv, ConvTranspose and the pools random shapes and
// attributes: Infer either refuses them or Eval succeeds with Infer's
// shape, never panicking (a wide kernel over a small input once did).
func FuzzWindowOps(f *testing.F) {
	f.Add([]byte{1, 1, 2, 2, 7, 7, 3, 3, 3, 3, 1, 1})
	f.Add([]byte{2, 4, 5, 3, 3, 1, 0, 1, 2, 2, 1, 2, 0, 1})
	f.Add([]byte{0, 3, 1, 9, 1, 2, 2, 0, 0, 0, 0, 0, 1, 1, 1})
	autoPads := []string{"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "BAD"}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &fuzzInts{b: data}
		nd := r.next(1, 3)
		group := r.next(1, 3)
		cin := group * r.next(1, 2)
		cout := group * r.next(1, 2)
		x := tensor.Shape{1, cin}
		k := tensor.Shape{}
		for i := 0; i < nd; i++ {
			x = append(x, r.next(1, 6))
			k = append(k, r.next(1, 8))
		}
		strides := r.list(nd, 0, 4)
		dil := r.list(nd, 0, 3)
		pads := r.list(2*nd, -1, 5)
		ap := autoPads[r.next(0, len(autoPads))]
		ceil := r.next(0, 2) == 1
		xa := iotaArr(f32T, x)
		ops := []struct {
			op Op
			in []*Array
		}{
			{&Conv{Strides: strides, Dilations: dil, Pads: pads, AutoPad: ap, Group: group},
				[]*Array{xa, iotaArr(f32T, append(tensor.Shape{cout, cin / group}, k...))}},
			{&ConvTranspose{Strides: strides, Dilations: dil, Pads: pads, AutoPad: ap, Group: group},
				[]*Array{xa, constArr(append(tensor.Shape{cin, cout / group}, k...), 1)}},
			{&Pool{Max: true, Kernel: k, Strides: strides, Dilations: dil, Pads: pads, AutoPad: ap, CeilMode: ceil}, []*Array{xa}},
			{&Pool{Kernel: k, Strides: strides, Pads: pads, AutoPad: ap, CeilMode: ceil, CountIncludePad: true}, []*Array{xa}},
		}
		for _, o := range ops {
			vals := make([]*Value, len(o.in))
			for i, a := range o.in {
				vals[i] = &Value{Name: "v", Type: Type{DType: a.DType, Shape: a.Shape}}
			}
			types, err := o.op.Infer(vals)
			if err != nil {
				continue
			}
			if types[0].Shape.NumElements() > 1<<16 {
				continue
			}
			out, err := o.op.Eval(o.in)
			if err != nil {
				t.Fatalf("%s %+v on %v: Infer accepted, Eval failed: %v", o.op.Kind(), o.op, x, err)
			}
			if !out[0].Shape.Equal(types[0].Shape) {
				t.Fatalf("%s %+v on %v: Infer %v, Eval %v", o.op.Kind(), o.op, x, types[0].Shape, out[0].Shape)
			}
			if c, ok := o.op.(*Conv); ok {
				closeRel(t, "conv vs taps", out[0], convByTaps(t, c, o.in[0], o.in[1]), 1e-12)
			}
		}
	})
}

// convByTaps is a direct convolution over window.taps, the per-position
// geometry pools use, to check Conv's run-based loops against.
func convByTaps(t *testing.T, c *Conv, x, w *Array) *Array {
	win, err := c.plan(x.Shape, w.Shape)
	if err != nil {
		t.Fatal(err)
	}
	n, ch, m := x.Shape[0], x.Shape[1], w.Shape[0]
	g := c.group()
	cg, mg := ch/g, m/g
	inSp, kSp := x.Shape[2:].NumElements(), w.Shape[2:].NumElements()
	taps := win.taps()
	out := NewArray(x.DType, append(tensor.Shape{n, m}, win.out...))
	k := 0
	for ni := 0; ni < n; ni++ {
		for mi := 0; mi < m; mi++ {
			for _, list := range taps {
				s := 0.0
				for ci := 0; ci < cg; ci++ {
					for _, tp := range list {
						s += x.Data[(ni*ch+(mi/mg)*cg+ci)*inSp+int(tp.i)] * w.Data[(mi*cg+ci)*kSp+int(tp.k)]
					}
				}
				out.Data[k] = s
				k++
			}
		}
	}
	return out
}
