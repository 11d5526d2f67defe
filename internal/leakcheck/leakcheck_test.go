package leakcheck

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeT records what a check reports instead of failing the real test.
type fakeT struct {
	testing.TB
	errs     []string
	cleanups []func()
}

func (f *fakeT) Helper()                   {}
func (f *fakeT) Cleanup(fn func())         { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Errorf(s string, a ...any) { f.errs = append(f.errs, fmt.Sprintf(s, a...)) }

// end runs the cleanups, as the end of a test does.
func (f *fakeT) end() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

//go:noinline
func leaker(stop <-chan struct{}) { <-stop }

func TestCheckReportsLeak(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	ft := &fakeT{TB: t}
	check(ft, 200*time.Millisecond)
	go leaker(stop)
	ft.end()
	if len(ft.errs) != 1 || !strings.Contains(ft.errs[0], "leakcheck.leaker") {
		t.Fatalf("reported %q; want one error naming leakcheck.leaker", ft.errs)
	}
}

func TestCheckWaitsForStragglers(t *testing.T) {
	ft := &fakeT{TB: t}
	check(ft, Wait)
	done := make(chan struct{})
	go func() {
		time.Sleep(time.Second) // longer than goleak's own retries
		close(done)
	}()
	ft.end()
	if len(ft.errs) != 0 {
		t.Fatalf("reported a goroutine that exited within the wait: %q", ft.errs)
	}
	<-done
}

func TestCheckIgnoresEarlierGoroutines(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	go leaker(stop)
	ft := &fakeT{TB: t}
	check(ft, 200*time.Millisecond)
	ft.end()
	if len(ft.errs) != 0 {
		t.Fatalf("reported a goroutine that ran before the check: %q", ft.errs)
	}
}

func TestCount(t *testing.T) {
	stop := make(chan struct{})
	for range 3 {
		go leaker(stop)
	}
	deadline := time.Now().Add(5 * time.Second)
	for Count("goinfer/internal/leakcheck.leaker") != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("Count = %d; want 3", Count("goinfer/internal/leakcheck.leaker"))
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	if n := Count("goinfer/internal/nothing."); n != 0 {
		t.Fatalf("Count of a package with no goroutines = %d", n)
	}
}
