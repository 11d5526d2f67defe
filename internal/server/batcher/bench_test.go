package batcher

import (
	"context"
	"testing"
	"time"

	"goinfer/internal/backend"
	"goinfer/internal/tensor"
)

// instant answers every batch at once, from Submit.
type instant struct{ classes int }

func (m instant) Submit(req backend.Request) error {
	n := req.Input.Shape[0]
	req.Reply <- backend.Response{ID: req.ID, Logits: req.Output[:n*m.classes], N: n, Classes: m.classes, DoneAt: time.Now()}
	return nil
}

// BenchmarkIdleInfer times one batch-1 request at a time through an
// idle batcher (IdleDispatch) to a backend that answers at once, from
// Submit or from its own goroutine (as the device pipeline does): the
// batcher's own cost on the batch-1 latency path.
func BenchmarkIdleInfer(b *testing.B) {
	for _, tc := range []struct {
		name string
		sub  func(b *testing.B) backend.Submitter
	}{
		{"inline", func(*testing.B) backend.Submitter { return instant{testClasses} }},
		{"goroutine", func(b *testing.B) backend.Submitter {
			q := make(chan backend.Request, 8)
			go func() {
				for req := range q {
					instant{testClasses}.Submit(req)
				}
			}()
			b.Cleanup(func() { close(q) })
			return submitFunc(func(req backend.Request) error { q <- req; return nil })
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			bt, err := New(tc.sub(b), Config{Channels: testC, Height: testH, Width: testW, DType: tensor.Float32,
				Classes: testClasses, MaxBatch: 8, MaxDelay: 2 * time.Millisecond, IdleDispatch: true, MaxQueue: 32, MaxInflight: 4})
			if err != nil {
				b.Fatal(err)
			}
			defer bt.Close(context.Background())
			in, out := images(1, 0), make([]float32, testClasses)
			for b.Loop() {
				if _, err := bt.Infer(context.Background(), in, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

type submitFunc func(backend.Request) error

func (f submitFunc) Submit(req backend.Request) error { return f(req) }
