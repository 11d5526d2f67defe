// Package leakcheck fails a test whose goroutines outlive it.
//
// Counting goroutines (runtime.NumGoroutine before and after) is fragile:
// the count includes the runtime's and the testing package's goroutines
// and those an earlier test left winding down, any of which may come or
// go meanwhile. Check instead asks go.uber.org/goleak for the goroutines
// that were not running when the check began, and waits for stragglers up
// to a deadline, so that a loaded machine does not fail a test whose
// goroutines are merely slow to exit, and a real leak is named by its
// stack.
package leakcheck

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Wait is how long Check waits for goroutines to exit after a test ends.
// It is generous because it only costs time when a test leaks.
const Wait = 10 * time.Second

// Check fails t if goroutines started after the call still run when t's
// cleanups are done (within Wait). Call it first in the test, so that its
// cleanup runs after those that stop what the test started. Tests that
// call it must not run in parallel with tests that start goroutines.
func Check(t testing.TB, opts ...goleak.Option) {
	t.Helper()
	check(t, Wait, opts...)
}

func check(t testing.TB, wait time.Duration, opts ...goleak.Option) {
	opts = append([]goleak.Option{goleak.IgnoreCurrent()}, opts...)
	t.Cleanup(func() {
		if err := Find(wait, opts...); err != nil {
			t.Errorf("goroutines outlived the test: %v", err)
		}
	})
}

// Find returns nil once no goroutine but those opts ignore is running, or
// goleak's error naming the survivors and their stacks if some still run
// after wait.
func Find(wait time.Duration, opts ...goleak.Option) error {
	deadline := time.Now().Add(wait)
	for {
		// Find itself retries for a fraction of a second.
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

// Count returns how many goroutines are running a function whose full
// name starts with prefix (a package path, "goinfer/internal/engine/cpu."),
// for a test that checks that workers did start.
func Count(prefix string) int {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	// Goroutines are separated by blank lines; a frame's function is at
	// the start of a line (its file and line follow, indented).
	count := 0
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		if bytes.Contains(g, append([]byte("\n"), prefix...)) {
			count++
		}
	}
	return count
}
