// Package busypoll makes a TCP connection's reads poll the socket for a
// while before the goroutine sleeps in the runtime's network poller.
//
// A read that finds no data normally parks its goroutine, and when its
// thread has nothing else to run, the thread sleeps in epoll_wait. The
// data's arrival then has to wake that thread, on a host whose idle CPUs
// sleep (a virtual machine's halted vCPU, a deep C-state) a wake-up that
// costs tens of microseconds. A request/answer exchange between two
// processes pays it at every turn: the server waiting for a request and
// for each part of its body, the client for the answer. Polling for a
// bounded time instead keeps the thread running, so data that arrives
// within the spin is read at once; data that does not arrive in time is
// waited for as usual. The cost is CPU: a connection waiting for data
// keeps one core busy for up to the spin time.
package busypoll

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"
)

// Conn is a TCP connection whose reads poll for up to Spin before waiting
// in the network poller.
type Conn struct {
	*net.TCPConn
	rc   syscall.RawConn
	spin time.Duration
}

// Wrap returns c with busy-polling reads, or c itself when spin <= 0 or c
// is not a TCP connection.
func Wrap(c net.Conn, spin time.Duration) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok || spin <= 0 {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &Conn{TCPConn: tc, rc: rc, spin: spin}
}

// Read reads as net.TCPConn does, polling the socket for up to the spin
// time before waiting for it to become readable. Deadlines apply as
// usual, checked when the spin ends.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return c.TCPConn.Read(p)
	}
	var n int
	var rerr error
	var until time.Time
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			n, rerr = syscall.Read(int(fd), p)
			switch {
			case rerr == syscall.EINTR:
				continue
			case rerr != syscall.EAGAIN:
				return true
			}
			now := time.Now()
			if until.IsZero() {
				until = now.Add(c.spin)
			} else if now.After(until) {
				n, rerr = 0, nil
				return false // wait in the poller
			}
			// Let whatever else is runnable on this P run.
			runtime.Gosched()
		}
	})
	if err != nil {
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	}
	if rerr != nil {
		if n < 0 {
			n = 0
		}
		return n, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: wrapSyscall(rerr)}
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func wrapSyscall(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return &os.SyscallError{Syscall: "read", Err: errno}
	}
	return err
}

// Listener accepts TCP connections with busy-polling reads (Spin) and,
// when Buffer > 0, kernel socket buffers of that many bytes each way.
type Listener struct {
	net.Listener
	Spin   time.Duration
	Buffer int
}

// Accept waits for the next connection and sets it up.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if err := SetBuffers(c, l.Buffer); err != nil {
		c.Close()
		return nil, err
	}
	return Wrap(c, l.Spin), nil
}

// SetBuffers sets c's kernel send and receive buffers to n bytes each when
// n > 0 and c is a TCP connection.
func SetBuffers(c net.Conn, n int) error {
	tc, ok := c.(*net.TCPConn)
	if !ok || n <= 0 {
		return nil
	}
	return errors.Join(tc.SetReadBuffer(n), tc.SetWriteBuffer(n))
}
