package parallel

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestRecorder(t *testing.T) {
	var got [][]time.Duration
	p := NewRecorder(16, func(ts []time.Duration) { got = append(got, append([]time.Duration(nil), ts...)) })
	defer p.Close()
	if p.Size() != 16 {
		t.Fatalf("Size() = %d, want 16", p.Size())
	}
	j := &countJob{t: t, size: 16, runs: make([]atomic.Int32, 5), workers: make([]atomic.Int32, 16)}
	p.Run(j, 5)
	p.Run(j, 0)
	if len(got) != 1 || len(got[0]) != 5 {
		t.Fatalf("recorded %v, want one Run of 5 tasks", got)
	}
	for i := range j.runs {
		if n := j.runs[i].Load(); n != 1 {
			t.Errorf("task %d ran %d times", i, n)
		}
	}
	if n := j.workers[0].Load(); n != 5 {
		t.Errorf("worker 0 ran %d tasks, want all 5", n)
	}
}

func TestMakespan(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x) * time.Millisecond
		}
		return d
	}
	for _, c := range []struct {
		times   []time.Duration
		workers int
		want    time.Duration
	}{
		{nil, 4, 0},
		{ms(3), 4, 3 * time.Millisecond},
		{ms(1, 1, 1, 1), 2, 2 * time.Millisecond},
		{ms(1, 1, 1), 2, 2 * time.Millisecond},
		{ms(5, 1, 1, 1, 1), 2, 5 * time.Millisecond},
		{ms(1, 1, 1, 1, 5), 2, 7 * time.Millisecond},
		{ms(2, 2, 2), 1, 6 * time.Millisecond},
		{ms(1, 2, 3), 0, 6 * time.Millisecond},
	} {
		if got := Makespan(c.times, c.workers); got != c.want {
			t.Errorf("Makespan(%v, %d) = %v, want %v", c.times, c.workers, got, c.want)
		}
	}
}
