// Package h1 serves the HTTP/1.1 requests that dominate an inference
// server's traffic on a lean loop of its own, and hands every other
// connection to a net/http server.
//
// The fast loop takes only plain requests (HTTP/1.1, a Content-Length
// body, no Expect, no transfer coding) that Server.Eligible accepts, runs
// them on the connection's goroutine through the same http.Handler, and
// writes each answer, head and body, with one writev. It starts no
// goroutine per request (net/http starts one to watch the socket once a
// body is read) and sends an answer just over 4 KiB in one write, not two,
// so the client wakes once. The first request it does not take moves the
// connection, with the bytes already read, to net/http for good, which
// then answers that request and all later ones as it always has.
//
// What the loop gives up for that: a request's context is not cancelled
// when its client goes away while the handler runs (net/http learns of it
// from the goroutine the loop saves); the handler's own deadlines still
// bound it.
package h1

import (
	"bufio"
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Server serves HTTP/1.1 connections: Eligible requests on the fast loop,
// the rest through Fallback.
type Server struct {
	// Handler answers the fast loop's requests (usually Fallback's own).
	Handler http.Handler
	// Fallback serves the connections the fast loop hands over; Serve
	// runs it, Shutdown and Close stop it.
	Fallback *http.Server
	// Eligible reports whether a request of this method and path may be
	// served on the fast loop.
	Eligible func(method, path string) bool
	// ReadHeaderTimeout, ReadTimeout and IdleTimeout are net/http's (zero:
	// none): reading a request's head, its whole request, and waiting for
	// the next request.
	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration
	// NewConnGrace is how long Shutdown leaves a connection that has not
	// sent a request yet, in case one is on its way.
	NewConnGrace time.Duration
	// ErrorLog logs handler panics (nil: the log package's logger).
	ErrorLog *log.Logger

	once      sync.Once
	handoffLn *chanListener

	mu        sync.Mutex
	conns     map[*conn]struct{}
	listeners map[net.Listener]struct{}
	down      atomic.Bool
	connsGone chan struct{} // closed by untrack when down and no connection is left
}

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = http.ErrServerClosed

func (s *Server) init(addr net.Addr) {
	s.once.Do(func() {
		// Under mu: Shutdown or Close may run before Serve got here.
		s.mu.Lock()
		s.handoffLn = newChanListener(addr)
		s.conns = map[*conn]struct{}{}
		s.listeners = map[net.Listener]struct{}{}
		s.connsGone = make(chan struct{})
		s.mu.Unlock()
		// Its result is ErrServerClosed once Shutdown or Close closed the
		// hand-off listener; the listener cannot fail otherwise.
		go s.Fallback.Serve(s.handoffLn)
	})
}

// Serve accepts connections on l until Shutdown or Close, and returns
// ErrServerClosed then; any other error of l ends it too.
func (s *Server) Serve(l net.Listener) error {
	s.init(l.Addr())
	s.mu.Lock()
	if s.down.Load() {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		rwc, err := l.Accept()
		if err != nil {
			if s.down.Load() {
				return ErrServerClosed
			}
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.logf("h1: accept error: %v; retrying in %v", err, backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		c := &conn{srv: s, rwc: rwc, br: bufio.NewReaderSize(rwc, readBufSize), accepted: time.Now()}
		if !s.track(c) {
			rwc.Close()
			return ErrServerClosed
		}
		go c.serve()
	}
}

func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	if s.down.Load() && len(s.conns) == 0 {
		select {
		case <-s.connsGone:
		default:
			close(s.connsGone)
		}
	}
}

// handoff gives c's connection, with the bytes its reader holds, to the
// net/http server, and reports whether it took it.
func (s *Server) handoff(c *conn) bool {
	held, _ := c.br.Peek(c.br.Buffered())
	pc := &prefixConn{Conn: c.rwc, prefix: append([]byte(nil), held...)}
	c.rwc.SetDeadline(time.Time{})
	return s.handoffLn.give(pc)
}

func (s *Server) shuttingDown() bool { return s.down.Load() }

func (s *Server) baseContext() context.Context { return context.Background() }

func (s *Server) logf(format string, args ...any) {
	if s.ErrorLog != nil {
		s.ErrorLog.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// stop marks the server down and closes its listeners; it reports the
// connections open at that moment, and the channel closed once they are
// gone (nil if Serve never ran).
func (s *Server) stop() ([]*conn, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down.Store(true)
	for l := range s.listeners {
		l.Close()
	}
	if s.conns == nil {
		return nil, nil
	}
	if len(s.conns) == 0 {
		select {
		case <-s.connsGone:
		default:
			close(s.connsGone)
		}
	}
	cs := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		cs = append(cs, c)
	}
	return cs, s.connsGone
}

// Shutdown stops accepting, closes idle connections (ones that never sent
// a request after NewConnGrace), waits for the others to finish their
// request, and shuts Fallback down the same way; if ctx ends first, it
// returns ctx's error with connections still open.
func (s *Server) Shutdown(ctx context.Context) error {
	_, gone := s.stop()
	fb := make(chan error, 1)
	if s.Fallback != nil {
		go func() { fb <- s.Fallback.Shutdown(ctx) }()
	} else {
		fb <- nil
	}
	if gone != nil {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			s.closeIdle()
			select {
			case <-gone:
			case <-ctx.Done():
				return errors.Join(ctx.Err(), <-fb)
			case <-tick.C:
				continue
			}
			break
		}
	}
	return <-fb
}

// closeIdle closes the connections that wait for a request.
func (s *Server) closeIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if !c.served.Load() && time.Since(c.accepted) < s.NewConnGrace {
			continue
		}
		if c.state.CompareAndSwap(stateIdle, stateClosing) {
			c.rwc.Close()
		}
	}
}

// Close closes the listeners and every connection at once, Fallback's
// included.
func (s *Server) Close() error {
	cs, _ := s.stop()
	for _, c := range cs {
		c.state.Store(stateClosing)
		c.rwc.Close()
	}
	if s.Fallback != nil {
		return s.Fallback.Close()
	}
	return nil
}
