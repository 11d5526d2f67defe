package h2grpc

import (
	"sync"
	"testing"
	"time"
)

// TestCallCountWaitWhileAdding checks what Shutdown relies on: calls may
// start (Add from zero) while another goroutine waits, and Wait returns
// once the count reaches zero again.
func TestCallCountWaitWhileAdding(t *testing.T) {
	var c callCount
	c.Wait() // zero: returns at once
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				c.Add(1)
				c.Done()
				c.Wait()
			}
		}()
	}
	wg.Wait()
	c.Add(2)
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	c.Done()
	select {
	case <-done:
		t.Fatal("Wait returned with a call still counted")
	case <-time.After(10 * time.Millisecond):
	}
	c.Done()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return at zero")
	}
}
