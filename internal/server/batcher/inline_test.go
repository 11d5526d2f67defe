package batcher

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"goinfer/internal/backend"
	"goinfer/internal/tensor"
)

// goid is the calling goroutine's id, from its stack header.
func goid() int64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseInt(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

// callerModel records which goroutine submitted each batch, then hands it
// to a meanModel.
type callerModel struct {
	*meanModel
	mu   sync.Mutex
	subs []int64
}

func (m *callerModel) Submit(req backend.Request) error {
	m.mu.Lock()
	m.subs = append(m.subs, goid())
	m.mu.Unlock()
	return m.meanModel.Submit(req)
}

// TestIdleRequestSubmitsItself checks which goroutine submits a batch: a
// request to an idle batcher (IdleDispatch, nothing queued or in flight, a
// batch slot free) submits its own batch, every
// other one is batched by the dispatcher as before; answers are right
// either way.
func TestIdleRequestSubmitsItself(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mod    func(*Config)
		images int
		caller bool
	}{
		{"idle", func(c *Config) { c.IdleDispatch = true }, 2, true},
		{"idle, a whole batch", func(c *Config) { c.IdleDispatch = true }, 8, true},
		{"idle, larger than a batch", func(c *Config) { c.IdleDispatch = true }, 12, false},
		{"no idle dispatch", func(c *Config) { c.MaxDelay = 0 }, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &callerModel{meanModel: newMeanModel(t, testClasses, false)}
			b, err := New(m, func() Config {
				cfg := Config{Channels: testC, Height: testH, Width: testW, DType: tensor.Float32,
					Classes: testClasses, MaxBatch: 8, MaxDelay: time.Hour, MaxQueue: 32, MaxInflight: 2}
				tc.mod(&cfg)
				return cfg
			}())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close(context.Background()) })
			for i := range 3 {
				out := make([]float32, tc.images*testClasses)
				res, err := b.Infer(context.Background(), images(tc.images, float32(i)), out)
				if err != nil {
					t.Fatal(err)
				}
				checkLogits(t, out, tc.images, float32(i))
				if res.BatchSize != min(tc.images, 8) {
					t.Errorf("batch size %d, want %d", res.BatchSize, min(tc.images, 8))
				}
				me := goid()
				m.mu.Lock()
				subs := m.subs
				m.subs = nil
				m.mu.Unlock()
				for _, g := range subs {
					if (g == me) != tc.caller {
						t.Errorf("request %d: batch submitted by goroutine %d, the caller is %d; want the caller: %v", i, g, me, tc.caller)
					}
				}
			}
		})
	}
}
