package backend

import (
	"context"
	"testing"
	"time"

	"goinfer/internal/engine"
	"goinfer/internal/tensor"
	"goinfer/internal/topk"
)

// TestPostprocessorTopK runs requests that ask for their best classes
// through pipelines with a Postprocessor: the classes come back in
// Response.Top, as topk ranks the logits of the same request, and no
// logits; a k over half the classes, and a request without TopK, get
// their logits.
func TestPostprocessorTopK(t *testing.T) {
	const n = 3
	x := make([]byte, n*3*16*16*4)
	for i := range x {
		x[i] = byte(i * 7)
	}
	f := tensor.BytesF32(x)
	for i := range f {
		f[i] = float32(i%97)/50 - 1
	}
	shape := tensor.Shape{n, 3, 16, 16}
	for _, copyStreams := range []bool{true, false} {
		t.Run(map[bool]string{true: "copy streams", false: "worker streams"}[copyStreams], func(t *testing.T) {
			b := New(Config{NumWorkers: 2, CopyStreams: copyStreams,
				NewPostprocessor: func(int, engine.Device, engine.Info) (Postprocessor, error) { return HostPostprocessor{}, nil }})
			if err := b.Start(context.Background(), loadNarrowCPU(t, 16, 4)); err != nil {
				t.Fatal(err)
			}
			abortOnFailure(t, b)
			defer b.Close(context.Background())
			reply := make(chan Response, 1)
			ask := func(k int, softmax bool) Response {
				in := &tensor.Tensor{DType: tensor.Float32, Shape: shape, Data: x}
				if err := b.Submit(Request{Input: in, SentAt: time.Now(), Reply: reply, TopK: k, Softmax: softmax}); err != nil {
					t.Fatal(err)
				}
				r := <-reply
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				return r
			}
			logits := ask(0, false)
			if len(logits.Logits) != n*logits.Classes || logits.Top != nil {
				t.Fatalf("no TopK: %d logits, %d classes", len(logits.Logits), len(logits.Top))
			}
			classes := logits.Classes
			for _, k := range []int{1, 3, classes / 2} {
				for _, softmax := range []bool{false, true} {
					r := ask(k, softmax)
					want := make([]topk.Class, n*k)
					topk.BestRows(want, logits.Logits, classes, k, softmax)
					if r.Logits != nil || len(r.Top) != n*k {
						t.Fatalf("top %d: %d logits and %d classes back", k, len(r.Logits), len(r.Top))
					}
					for i := range want {
						if r.Top[i] != want[i] {
							t.Fatalf("top %d softmax %v: class %d is %+v, want %+v", k, softmax, i, r.Top[i], want[i])
						}
					}
				}
			}
			if r := ask(classes/2+1, true); r.Top != nil || len(r.Logits) != n*classes {
				t.Errorf("k over half the classes: %d classes and %d logits back; want the logits", len(r.Top), len(r.Logits))
			}
		})
	}
}
