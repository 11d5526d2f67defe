package server

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

func TestMemBudget(t *testing.T) {
	const mib = 1 << 20
	type step struct {
		n, total int64 // acquire n of a request of total bytes
		release  int64 // or, when n == 0, give back release bytes
		ok       bool
		inUse    int64
	}
	tests := []struct {
		name     string
		capacity int64
		steps    []step
	}{
		{"fits until spent", 64 * mib, []step{
			{n: 4 * mib, total: 4 * mib, ok: true, inUse: 4 * mib},
			{n: 60 * mib, total: 60 * mib, ok: false, inUse: 4 * mib}, // big: only 48 MiB for big ones
			{n: 44 * mib, total: 44 * mib, ok: true, inUse: 48 * mib},
			{n: 1, total: 9 * mib, ok: false, inUse: 48 * mib}, // big requests cannot enter the reserve
			{n: 8 * mib, total: 8 * mib, ok: true, inUse: 56 * mib},
			{n: 8 * mib, total: 8 * mib, ok: true, inUse: 64 * mib},
			{n: 1, total: 1, ok: false, inUse: 64 * mib}, // spent
			{release: 44 * mib, inUse: 20 * mib},
			{n: 28 * mib, total: 28 * mib, ok: true, inUse: 48 * mib},
		}},
		{"zero bytes always fit", 4, []step{
			{n: 4, total: 4, ok: true, inUse: 4},
			{n: 0, total: 0, ok: true, inUse: 4},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newMemBudget(tt.capacity)
			for i, s := range tt.steps {
				if s.n == 0 && s.release > 0 {
					b.release(s.release)
				} else if got := b.acquire(s.n, s.total); got != s.ok {
					t.Fatalf("step %d: acquire(%d, %d) = %v, want %v", i, s.n, s.total, got, s.ok)
				}
				if got := b.inUse(); got != s.inUse {
					t.Fatalf("step %d: in use %d, want %d", i, got, s.inUse)
				}
			}
		})
	}
}

func TestLeaseGrowsAndReleases(t *testing.T) {
	b := newMemBudget(100)
	l := lease{b: b}
	for _, n := range []int64{10, 5, 40, 40} { // shrinking asks take nothing
		if !l.ensure(n) {
			t.Fatalf("ensure(%d) refused", n)
		}
	}
	if b.inUse() != 40 {
		t.Fatalf("in use %d, want 40", b.inUse())
	}
	if l.ensure(101) {
		t.Fatal("ensure beyond the budget succeeded")
	}
	if b.inUse() != 40 {
		t.Fatalf("a refused ensure changed the budget: %d", b.inUse())
	}
	l.release()
	l.release() // twice is harmless
	if b.inUse() != 0 {
		t.Fatalf("in use %d after release, want 0", b.inUse())
	}
}

// trickle yields its data in pieces of at most step bytes, then err.
type trickle struct {
	data []byte
	step int
	err  error
}

func (r *trickle) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p[:min(len(p), r.step)], r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestReadFullIncremental(t *testing.T) {
	const mib = 1 << 20
	pattern := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + i>>11)
		}
		return b
	}
	tests := []struct {
		name     string
		declared int
		sent     int
		wantGets []int // lengths asked of the pool, in order
		wantErr  error
	}{
		{"small body, one buffer", 1000, 1000, []int{1000}, nil},
		{"exactly the first read", mib, mib, []int{mib}, nil},
		{"the full size once the first MiB is in", 38*mib + 5, 38*mib + 5, []int{mib, 38*mib + 5}, nil},
		{"huge declared, little sent: one MiB", 256 * mib, 10, []int{mib}, io.ErrUnexpectedEOF},
		{"huge declared, a MiB less a byte sent", 256 * mib, mib - 1, []int{mib}, io.ErrUnexpectedEOF},
		{"ends after the first MiB", 3 * mib, 2*mib + 1, []int{mib, 3 * mib}, io.ErrUnexpectedEOF},
		{"nothing sent", 100, 0, []int{100}, io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := pattern(tt.sent)
			var gets []int
			outstanding := 0
			get := func(n int) *[]byte {
				gets = append(gets, n)
				outstanding++
				b := make([]byte, n)
				return &b
			}
			put := func(*[]byte) { outstanding-- }
			b, got, err := readFullIncremental(&trickle{data: data, step: 64 << 10, err: io.EOF}, tt.declared, get, put)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if got != tt.sent {
				t.Errorf("read %d bytes, want %d", got, tt.sent)
			}
			if len(gets) != len(tt.wantGets) {
				t.Fatalf("pool asked for %v, want %v", gets, tt.wantGets)
			}
			for i := range gets {
				if gets[i] != tt.wantGets[i] {
					t.Fatalf("pool asked for %v, want %v", gets, tt.wantGets)
				}
			}
			if err != nil {
				if outstanding != 0 {
					t.Errorf("%d buffers not given back after an error", outstanding)
				}
				return
			}
			if outstanding != 1 {
				t.Errorf("%d buffers out, want the result only", outstanding)
			}
			if !bytes.Equal(*b, data) {
				t.Error("bytes read differ from those sent")
			}
		})
	}
}

func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLimitListener(inner, 2)
	accepted := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	a := <-accepted
	<-accepted
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted with a limit of 2")
	case <-time.After(100 * time.Millisecond):
	}
	a.Close()
	a.Close() // a second close frees nothing more
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("closing a connection did not let the third in")
	}
	l.Close()
	if _, ok := <-accepted; ok {
		t.Fatal("Accept returned a connection after Close")
	}
	if got := len(l.(*limitListener).slots); got != 1 {
		t.Errorf("%d slots taken, want 1 (the second connection)", got)
	}
}

func TestFreshConnsClosedOnDrain(t *testing.T) {
	var f freshConns
	a, b := net.Pipe()
	defer b.Close()
	c, d := net.Pipe()
	defer d.Close()
	f.track(a, http.StateNew)
	f.track(c, http.StateNew)
	f.track(c, http.StateActive) // it sent a request: no longer fresh
	f.track(c, http.StateIdle)
	if f.n.Load() != 1 {
		t.Fatalf("%d fresh connections tracked, want 1", f.n.Load())
	}
	stop := f.closeWhile(20 * time.Millisecond)
	defer stop()
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := b.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("the fresh connection: read %v, want it closed (EOF)", err)
	}
	d.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := d.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the connection that sent a request: read %v, want it left open", err)
	}
}
