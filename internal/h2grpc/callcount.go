package h2grpc

import "sync"

// callCount counts the calls running on a server's connections, for
// Shutdown to wait until none is left. A sync.WaitGroup does not fit:
// connections still reading start calls (Add from zero) while Shutdown
// waits, which a WaitGroup forbids. The zero value is ready to use.
type callCount struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n returns to 0
}

// Add adds d (positive or negative) to the count.
func (c *callCount) Add(d int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.n
	c.n += d
	switch {
	case c.n < 0:
		panic("h2grpc: negative call count")
	case was == 0 && c.n > 0:
		c.zero = make(chan struct{})
	case was > 0 && c.n == 0:
		close(c.zero)
	}
}

// Done subtracts one.
func (c *callCount) Done() { c.Add(-1) }

// Wait returns once the count is zero.
func (c *callCount) Wait() {
	c.mu.Lock()
	if c.n == 0 {
		c.mu.Unlock()
		return
	}
	ch := c.zero
	c.mu.Unlock()
	<-ch
}
