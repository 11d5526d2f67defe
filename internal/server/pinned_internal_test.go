package server

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"goinfer/internal/engine"
)

// goHost is Go memory standing in for page-locked memory; it counts frees.
type goHost struct {
	b     []byte
	freed *atomic.Int64
}

func (h *goHost) Bytes() []byte { return h.b }
func (h *goHost) Free() error   { h.freed.Add(1); return nil }

func TestPinnedPool(t *testing.T) {
	var allocs, freed atomic.Int64
	p := newPinnedPool(func(n int) (engine.HostBuffer, error) {
		allocs.Add(1)
		return &goHost{b: make([]byte, n), freed: &freed}, nil
	}, 3<<20)

	if b := p.get(1000); b != nil {
		t.Error("a 1000-byte request got pinned memory; small ones should be copied")
	}
	a := p.get(750_000) // 1 MiB class
	if a == nil || len(*a) != 750_000 || cap(*a) != 1<<20 {
		t.Fatalf("get(750000) = %v", a)
	}
	if !p.contains((*a)[100:200]) || !p.contains(*a) || p.contains(make([]byte, 10)) {
		t.Error("contains does not tell the pool's memory from other memory")
	}
	if p.contains((*a)[:cap(*a)][cap(*a)-4:]) != true {
		t.Error("the tail of a buffer is not reported as pinned")
	}
	b := p.get(2 << 20) // 2 MiB: 3 MiB budget used up
	if b == nil {
		t.Fatal("get within the budget failed")
	}
	if c := p.get(10_000_000); c != nil {
		t.Error("the pool went past its budget")
	}
	if !p.put(a) {
		t.Fatal("put of a pool buffer reported not ours")
	}
	if other := make([]byte, 1<<20); p.put(&other) {
		t.Error("put of foreign memory reported ours")
	}
	if again := p.get(900_000); again != a {
		t.Error("a freed buffer of the class was not reused")
	}
	if allocs.Load() != 2 {
		t.Errorf("%d allocations, want 2", allocs.Load())
	}
	p.put(a)
	if err := p.close(); err != nil {
		t.Fatal(err)
	}
	if freed.Load() != 1 {
		t.Errorf("close freed %d buffers, want the 1 not in use", freed.Load())
	}
	if p.get(750_000) != nil {
		t.Error("a closed pool handed out memory")
	}
	if !p.put(b) || freed.Load() != 2 {
		t.Error("a buffer put back after close was not freed")
	}
}

func TestPinnedPoolAllocationFailure(t *testing.T) {
	calls := 0
	p := newPinnedPool(func(n int) (engine.HostBuffer, error) {
		calls++
		return nil, errors.New("out of pinned memory")
	}, 1<<30)
	for range 3 {
		if p.get(1<<20) != nil {
			t.Fatal("a failed allocation returned a buffer")
		}
	}
	if calls != 1 {
		t.Errorf("%d allocation attempts; after a failure the pool should stop trying", calls)
	}
	var rp requestPool
	rp.bufs = &bufPool{}
	rp.pinned.Store(p)
	if b := rp.Get(1 << 20); b == nil || len(*b) != 1<<20 || rp.Pinned(*b) {
		t.Error("the request pool did not fall back to ordinary memory")
	}
}

// TestPinnedPoolConcurrent gets and puts from many goroutines (run with
// -race): no buffer is handed to two holders at once.
func TestPinnedPoolConcurrent(t *testing.T) {
	var freed atomic.Int64
	p := newPinnedPool(func(n int) (engine.HostBuffer, error) {
		return &goHost{b: make([]byte, n), freed: &freed}, nil
	}, 8<<20)
	var owners sync.Map
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				b := p.get(100_000 + 1000*g + i)
				if b == nil {
					continue // over budget: the caller would copy
				}
				if _, dup := owners.LoadOrStore(b, g); dup {
					t.Error("one buffer handed out twice")
				}
				(*b)[0] = byte(g)
				owners.Delete(b)
				p.put(b)
			}
		})
	}
	wg.Wait()
	if err := p.close(); err != nil {
		t.Fatal(err)
	}
}
