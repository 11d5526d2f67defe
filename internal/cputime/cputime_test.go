package cputime

import (
	"runtime"
	"testing"
	"time"
)

// TestProcessAdvances checks that busy work shows up as CPU time where the
// platform reports it.
func TestProcessAdvances(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" || runtime.GOOS == "js" || runtime.GOOS == "wasip1" {
		t.Skipf("no process CPU time on %s", runtime.GOOS)
	}
	t0 := Process()
	x := 1.0
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
		x = x*1.0000001 + 1e-9
	}
	if d := Process() - t0; d <= 0 {
		t.Errorf("50 ms of busy work used %v of CPU time (x=%v)", d, x)
	}
}
