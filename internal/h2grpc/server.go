package h2grpc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Handler answers one unary call: msg is the request message (valid until
// the handler returns), reply the marshalled answer, sent without copying;
// done, if not nil, runs once reply has been written. A non-nil error is
// sent as the call's status (status.FromError).
type Handler func(ctx context.Context, method string, msg []byte) (reply [][]byte, done func(), err error)

// Server serves unary gRPC calls over prior-knowledge HTTP/2.
type Server struct {
	// Handler answers every call.
	Handler Handler
	// Admit, if set, runs when a call's headers arrive, before its message
	// is read (like gRPC-Go's tap handle): an error refuses the call with
	// that status and its message is discarded as it arrives; the context
	// it returns is the handler's.
	Admit func(ctx context.Context, method string) (context.Context, error)
	// MaxRecvMsgSize bounds a request message (default 64 MiB); a larger
	// one is answered RESOURCE_EXHAUSTED.
	MaxRecvMsgSize int
	// MaxConcurrentStreams bounds the calls in flight on one connection
	// (default 100); a stream over it is refused.
	MaxConcurrentStreams uint32
	// Window is the stream and connection window announced to clients
	// (default 16 MiB).
	Window int
	// Unary and Fallback, if both set, send every call whose method Unary
	// does not claim to Fallback (e.g. a grpc.Server, whose ServeHTTP
	// serves streaming RPCs and reflection) on the same connection;
	// Handler and Admit see only the claimed ones. Unset, every call goes
	// to Handler.
	Unary    func(method string) bool
	Fallback http.Handler
	// Buffer, if set, supplies the memory a call's message is read into,
	// so that the handler's msg lies where the application wants it (e.g.
	// page-locked, a field aligned) without another copy. It is asked when
	// the call's first DATA frame arrives, with n the message length its
	// prefix declares and head the message's first bytes (those in the
	// frame, up to 4 KiB), for a message that frame would have been given
	// room for anyway (within MaxRecvMsgSize, and no larger than the frame
	// or 1 MiB). It returns grpcPrefixLen+n bytes (the 5-byte prefix, then
	// the message) and the function that takes them back once the call is
	// done with them, or nil to use the server's own buffers.
	Buffer func(method string, n int, head []byte) (buf []byte, free func())

	mu       sync.Mutex
	conns    map[*serverConn]struct{}
	lns      map[net.Listener]struct{}
	draining bool
	streams  callCount
	conWG    sync.WaitGroup
	inline   inlineWatch
	// bufs holds message buffers between calls when Buffer is not set.
	bufs bufPool
}

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("h2grpc: server closed")

// Serve accepts connections on l until Shutdown or Close, which close l;
// after them it closes l and returns at once.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	if s.lns == nil {
		s.lns = map[net.Listener]struct{}{}
	}
	s.lns[l] = struct{}{}
	s.mu.Unlock()
	for {
		nc, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			d := s.draining
			s.mu.Unlock()
			if d {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			return fmt.Errorf("h2grpc: accept: %w", err)
		}
		go s.ServeConn(nc)
	}
}

// ServeConn serves HTTP/2 on one accepted connection until it ends.
func (s *Server) ServeConn(nc net.Conn) {
	window := s.Window
	if window <= 0 || window > maxWindow {
		window = 16 << 20
	}
	window = max(window, initialWindow)
	maxStreams := s.MaxConcurrentStreams
	if maxStreams == 0 {
		maxStreams = 100
	}
	sc := &serverConn{s: s, c: newConn(nc, maxFrameSize, window), maxStreams: maxStreams,
		streams: map[uint32]*serverStream{}}
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		nc.Close()
		return
	}
	if s.conns == nil {
		s.conns = map[*serverConn]struct{}{}
	}
	s.conns[sc] = struct{}{}
	s.conWG.Add(1)
	s.mu.Unlock()
	sc.serve()
}

// Shutdown stops accepting, sends GOAWAY on every connection (calls
// already taken are answered; later ones fail UNAVAILABLE on the client),
// waits for the calls in flight or ctx, then closes the connections.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	for l := range s.lns {
		l.Close()
	}
	for sc := range s.conns {
		sc.goAway(errCodeNo)
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.streams.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.Close()
	return err
}

// Close closes the listeners and every connection at once.
func (s *Server) Close() {
	s.mu.Lock()
	s.draining = true
	for l := range s.lns {
		l.Close()
	}
	for sc := range s.conns {
		sc.c.nc.Close()
	}
	s.mu.Unlock()
	s.conWG.Wait()
}

type serverConn struct {
	s          *Server
	c          *conn
	maxStreams uint32

	mu      sync.Mutex // guards streams, last, away, multi
	streams map[uint32]*serverStream
	last    uint32 // highest stream taken
	away    bool   // GOAWAY sent: no stream above last is taken
	multi   bool   // seen with two calls at once: no handler runs inline

	ready *serverStream // a complete request for the reading goroutine to run
}

type serverStream struct {
	id      uint32
	method  string
	ctx     context.Context
	cancel  context.CancelFunc
	stopCut func() bool // stops the watch that cuts the stream when ctx ends

	// bufMu guards buf and recv: the reading goroutine holds it while it
	// reads one DATA frame of the stream, cut while it frees the buffer.
	bufMu sync.Mutex
	buf   []byte
	free  func() // gives buf back to Server.Buffer; nil for pool's
	pool  *bufPool
	recv  int // received on the stream, not credited back

	tooBig    bool
	answering atomic.Bool   // its answer is being written: the client may send the next call
	inline    *inlineRun    // set while the handler runs on the reading goroutine
	fb        *fallbackBody // set for a call served by Server.Fallback
	started   bool          // guarded by the conn's mu; written by the reader only
	isCut     atomic.Bool   // set under the conn's mu by cut
}

// cutGrace is how long cut waits for a DATA frame of the cut stream that is
// being read to end before it closes the connection: a peer that stops in
// the middle of a frame holds the connection's reader and the stream's
// buffer, which must not outlive the call.
const cutGrace = time.Second

// presizeMax is how much of a declared message is allocated before its
// bytes arrive (like the HTTP server's first read).
const presizeMax = 1 << 20

func (sc *serverConn) goAway(code uint32) {
	sc.mu.Lock()
	if sc.away {
		sc.mu.Unlock()
		return
	}
	sc.away = true
	last := sc.last
	n := len(sc.streams)
	sc.mu.Unlock()
	sc.c.write(appendGoAway(nil, last, code))
	if n == 0 {
		// Nothing to finish: closing ends the read loop.
		sc.c.nc.Close()
	}
}

func (sc *serverConn) serve() {
	c := sc.c
	pre := make([]byte, len(clientPreface))
	if _, err := io.ReadFull(c.r, pre); err != nil || string(pre) != clientPreface {
		sc.readEnd()
		return
	}
	if err := c.write(appendSettings(nil, maxFrameSize, c.window, sc.maxStreams)); err != nil {
		sc.readEnd()
		return
	}
	sc.loop()
}

// loop reads frames until the connection ends. When a request is complete,
// the goroutine that read it runs its handler: the request is served
// without waking another goroutine first. A new goroutine takes over the
// reading at once, or, on a connection that carries one call at a time,
// only if the handler runs long (inline.go).
func (sc *serverConn) loop() {
	for {
		err := sc.frame()
		var ce connError
		if errors.As(err, &ce) {
			sc.goAway(ce.code)
		}
		if err != nil {
			sc.readEnd()
			return
		}
		if st := sc.ready; st != nil {
			sc.ready = nil
			sc.mu.Lock()
			inline := !sc.multi && sc.c.r.Buffered() == 0
			sc.mu.Unlock()
			if !inline {
				go sc.loop()
				sc.run(st)
				return
			}
			r := &inlineRun{sc: sc}
			st.inline = r
			sc.s.inline.add(r)
			sc.run(st)
			sc.s.inline.remove(r)
			if !r.finish() {
				return // a new goroutine reads the connection
			}
		}
	}
}

// readEnd closes the connection once its reading ended, and cancels the
// calls still running on it.
func (sc *serverConn) readEnd() {
	sc.c.fail(net.ErrClosed)
	sc.c.nc.Close()
	sc.mu.Lock()
	for _, st := range sc.streams {
		st.cancel()
		if st.fb != nil {
			st.fb.end(errStreamReset)
		}
	}
	sc.mu.Unlock()
	s := sc.s
	s.mu.Lock()
	delete(s.conns, sc)
	s.mu.Unlock()
	s.conWG.Done()
}

func (sc *serverConn) frame() error {
	c := sc.c
	h, err := c.readFrame()
	if err != nil {
		return err
	}
	switch h.typ {
	case frameHeaders:
		return sc.headers(h)
	case frameData:
		return sc.data(h)
	case frameRSTStream:
		p, err := c.payload(h.length)
		if err != nil {
			return err
		}
		if len(p) != 4 || h.stream == 0 {
			return connError{errCodeProtocol, "malformed RST_STREAM"}
		}
		sc.mu.Lock()
		if st := sc.streams[h.stream]; st != nil {
			st.cancel()
			if st.fb != nil {
				st.fb.end(errStreamReset)
			}
			if !st.started {
				delete(sc.streams, h.stream)
				st.dropBuf()
			}
			// No answer goes out on a reset stream: a writer waiting
			// for its window, or about to write, finds it gone.
			c.wmu.Lock()
			delete(c.streamSend, h.stream)
			c.wcond.Broadcast()
			c.wmu.Unlock()
		}
		sc.mu.Unlock()
		return nil
	case frameGoAway:
		_, err := c.r.Discard(h.length)
		sc.goAway(errCodeNo)
		return err
	case framePushPromise, frameContinuation:
		return connError{errCodeProtocol, "unexpected frame"}
	}
	_, err = c.r.Discard(h.length)
	return err
}

func (sc *serverConn) headers(h frameHeader) error {
	c := sc.c
	if err := c.readHeaders(h); err != nil {
		return err
	}
	if h.stream%2 == 0 {
		return connError{errCodeProtocol, "even stream identifier from a client"}
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if st := sc.streams[h.stream]; st != nil {
		// Trailers of a request: gRPC clients send none for unary calls.
		if st.fb != nil && h.flags&flagEndStream != 0 {
			st.fb.end(io.EOF)
		}
		return nil
	}
	if h.stream <= sc.last {
		return connError{errCodeProtocol, "stream identifier reused"}
	}
	if sc.away {
		return c.write(appendRSTStream(nil, h.stream, errCodeRefusedStream))
	}
	sc.last = h.stream
	if uint32(len(sc.streams)) >= sc.maxStreams {
		return c.write(appendRSTStream(nil, h.stream, errCodeRefusedStream))
	}
	ctx, cancel := context.WithCancel(context.Background())
	if t := c.field("grpc-timeout"); t != "" {
		if d, ok := parseTimeout(t); ok {
			ctx, cancel = context.WithTimeout(ctx, d)
		}
	}
	st := &serverStream{id: h.stream, method: c.field(":path"), ctx: ctx, cancel: cancel, stopCut: func() bool { return false }, pool: &sc.s.bufs}
	for _, o := range sc.streams {
		// A call whose answer is on its way does not count: a client
		// with one call at a time may send the next one as soon as the
		// answer is in, before the stream is cleaned up here.
		if !o.answering.Load() {
			sc.multi = true
			break
		}
	}
	sc.streams[h.stream] = st
	// The send window exists from the stream's start, so that a
	// WINDOW_UPDATE the client sends before the answer is counted.
	c.wmu.Lock()
	c.streamSend[h.stream] = c.peerInitWin
	c.wmu.Unlock()
	var refuse error
	if c.field(":method") != "POST" || !strings.HasPrefix(c.field("content-type"), "application/grpc") {
		refuse = status.Error(codes.Unimplemented, "h2grpc: not a gRPC request")
	} else if sc.s.Fallback != nil && sc.s.Unary != nil && !sc.s.Unary(st.method) {
		// The fallback handler reads its body as the reader queues it.
		sc.multi = true
		sc.startFallback(st, c.fields)
		if h.flags&flagEndStream != 0 {
			st.fb.end(io.EOF)
		}
		return nil
	} else if sc.s.Admit != nil {
		actx, err := sc.s.Admit(ctx, st.method)
		if err != nil {
			refuse = err
		} else {
			st.ctx = actx
		}
	}
	if refuse != nil {
		st.started = true
		sc.s.streams.Add(1)
		go sc.finish(st, refuse)
		return nil
	}
	// A call whose context ends (the Admit hook's read timeout, the
	// client's deadline, a drain) before its message is complete is
	// dropped at once, its buffer with it, whether or not more arrives.
	st.stopCut = context.AfterFunc(st.ctx, func() { sc.cut(st) })
	if h.flags&flagEndStream != 0 {
		sc.start(st)
	}
	return nil
}

// cut drops a stream whose context ended before its message was complete:
// the client is told RST_STREAM (CANCEL), later DATA for it is read and
// dropped (still counted against the connection window), and its buffer
// goes back to the pool now, or as soon as the frame being read into it
// ends.
func (sc *serverConn) cut(st *serverStream) {
	sc.mu.Lock()
	if st.started || sc.streams[st.id] != st {
		sc.mu.Unlock()
		return
	}
	st.isCut.Store(true)
	delete(sc.streams, st.id)
	closeNow := sc.away && len(sc.streams) == 0
	sc.mu.Unlock()
	st.cancel()
	c := sc.c
	c.wmu.Lock()
	delete(c.streamSend, st.id)
	c.writeLocked(appendRSTStream(nil, st.id, errCodeCancel))
	c.wmu.Unlock()
	if !st.bufMu.TryLock() {
		t := time.AfterFunc(cutGrace, func() { c.nc.Close() })
		st.bufMu.Lock()
		t.Stop()
	}
	st.dropBuf()
	st.bufMu.Unlock()
	if closeNow {
		c.nc.Close()
	}
}

func (sc *serverConn) data(h frameHeader) error {
	c := sc.c
	sc.mu.Lock()
	st := sc.streams[h.stream]
	sc.mu.Unlock()
	if st != nil && st.fb != nil {
		p, err := c.readData(h, nil)
		if err != nil {
			return err
		}
		if !st.fb.push(p, c.window) {
			return connError{errCodeFlowControl, "peer sent past the stream window"}
		}
		if h.flags&flagEndStream != 0 {
			st.fb.end(io.EOF)
		}
		return nil
	}
	if st == nil || st.started {
		// A reset or finished stream: its bytes still count against the
		// connection window.
		_, err := c.readData(h, nil)
		return err
	}
	st.bufMu.Lock()
	defer st.bufMu.Unlock()
	if st.isCut.Load() {
		st.dropBuf()
		_, err := c.readData(h, nil)
		return err
	}
	limit := sc.s.MaxRecvMsgSize
	if limit <= 0 {
		limit = 64 << 20
	}
	var err error
	if st.tooBig || len(st.buf)+h.length > limit+grpcPrefixLen {
		st.tooBig = true
		st.dropBuf()
		_, err = c.readData(h, nil)
	} else {
		if st.buf == nil && sc.s.Buffer != nil {
			sc.placeBuf(st, h, limit)
		}
		if n := len(st.buf); n >= grpcPrefixLen {
			// Past presizeMax the buffer doubles when the arriving bytes
			// need more room, but not beyond the declared message.
			if cap(st.buf)-n < h.length {
				want := grpcPrefixLen + int(binary.BigEndian.Uint32(st.buf[1:5]))
				st.growBuf(max(n+h.length, min(2*cap(st.buf), want)))
			}
		} else {
			if cap(st.buf)-n < h.length {
				st.growBuf(max(n+h.length, 2*cap(st.buf)))
			}
		}
		st.buf, err = c.readData(h, st.buf)
		if n := len(st.buf); err == nil && n >= grpcPrefixLen {
			// Once the prefix is in, the buffer is made as large as the
			// declared message up to presizeMax, so that most messages
			// arrive without another copy, while a client that declares
			// a large one and stalls holds no more than that.
			want := grpcPrefixLen + int(binary.BigEndian.Uint32(st.buf[1:5]))
			if want <= limit+grpcPrefixLen {
				st.growBuf(min(want, max(n, presizeMax)))
			}
		}
	}
	if err != nil {
		return err
	}
	if st.isCut.Load() {
		// Cut while the frame was read: cut waits for this to return.
		st.dropBuf()
		return nil
	}
	if st.recv += h.length; st.recv > c.window {
		return connError{errCodeFlowControl, "peer sent past the stream window"}
	}
	if st.recv >= c.window/2 {
		if err := c.write(appendWindowUpdate(nil, st.id, uint32(st.recv))); err != nil {
			return err
		}
		st.recv = 0
	}
	if h.flags&flagEndStream != 0 {
		sc.mu.Lock()
		if !st.isCut.Load() {
			sc.start(st)
		}
		sc.mu.Unlock()
	}
	return nil
}

// placeBuf asks Server.Buffer for the memory of st's message when its
// first DATA frame h (not yet read) arrives. The message's first bytes are
// peeked at from the read buffer (they are part of h, so waiting for them
// waits for nothing but h). Call with st.bufMu held.
func (sc *serverConn) placeBuf(st *serverStream, h frameHeader, limit int) {
	if h.flags&flagPadded != 0 || h.length < grpcPrefixLen {
		return
	}
	head, err := sc.c.r.Peek(min(h.length, grpcPrefixLen+4<<10))
	if err != nil {
		return // the read that follows meets the same error
	}
	n := int(binary.BigEndian.Uint32(head[1:5]))
	if n > limit || grpcPrefixLen+n < h.length || grpcPrefixLen+n > max(h.length, presizeMax) {
		return
	}
	buf, free := sc.s.Buffer(st.method, n, head[grpcPrefixLen:])
	if buf == nil {
		return
	}
	if len(buf) != grpcPrefixLen+n {
		if free != nil {
			free()
		}
		return
	}
	st.buf, st.free = buf[:0:len(buf)], free
}

// growBuf makes st.buf's capacity at least n, moving it to a pooled
// buffer when needed. Call with st.bufMu held.
func (st *serverStream) growBuf(n int) {
	if cap(st.buf) >= n {
		return
	}
	nb := append(st.pool.get(n), st.buf...)
	st.dropBuf()
	st.buf = nb
}

// dropBuf gives st's buffer back to where it came from.
func (st *serverStream) dropBuf() {
	if st.free != nil {
		st.free()
		st.free = nil
	} else {
		st.pool.put(st.buf)
	}
	st.buf = nil
}

// start hands a complete request to the handler. Call with sc.mu held.
func (sc *serverConn) start(st *serverStream) {
	st.started = true
	st.stopCut()
	sc.s.streams.Add(1)
	if sc.ready != nil {
		go sc.run(sc.ready)
	}
	sc.ready = st
}

func (sc *serverConn) run(st *serverStream) {
	if st.tooBig {
		sc.finish(st, status.Errorf(codes.ResourceExhausted, "h2grpc: received message larger than max (%d bytes)", sc.s.MaxRecvMsgSize))
		return
	}
	msg, err := unframe(st.buf)
	if err != nil {
		if s, ok := status.FromError(err); ok && s.Code() == codes.Internal {
			err = status.Error(codes.InvalidArgument, s.Message())
		}
		sc.finish(st, err)
		return
	}
	reply, done, err := sc.s.Handler(st.ctx, st.method, msg)
	if err != nil {
		sc.finish(st, err)
		return
	}
	sc.reply(st, reply)
	if done != nil {
		done()
	}
}

// reply sends headers, the reply message and OK trailers.
func (sc *serverConn) reply(st *serverStream, reply [][]byte) {
	c := sc.c
	c.wmu.Lock()
	if _, ok := c.streamSend[st.id]; !ok {
		// Reset by the client: no answer. The headers must not even be
		// encoded: a block encoded and not sent would leave the client's
		// HPACK table behind the encoder's (COMPRESSION_ERROR later).
		c.wmu.Unlock()
		sc.end(st)
		return
	}
	var wait func() error
	if r := st.inline; r != nil {
		// Only a reader can open the window this answer waits for.
		wait = func() error {
			r.handOff()
			c.wcond.Wait()
			return nil
		}
	}
	st.answering.Store(true)
	head := c.encodeHeaders(nil, st.id, false, ":status", "200", "content-type", "application/grpc")
	err := c.writeMessage(st.id, head, reply, false, func() []byte {
		return c.encodeHeaders(nil, st.id, true, "grpc-status", "0")
	}, wait)
	c.wmu.Unlock()
	if errors.Is(err, errStreamClosed) {
		c.write(appendRSTStream(nil, st.id, errCodeCancel))
	}
	sc.end(st)
}

// finish ends a call with a trailers-only answer carrying err's status.
func (sc *serverConn) finish(st *serverStream, err error) {
	var s *status.Status
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		s = status.FromContextError(err)
	} else {
		s = status.Convert(err)
	}
	c := sc.c
	st.answering.Store(true)
	c.wmu.Lock()
	head := c.encodeHeaders(nil, st.id, true, ":status", "200", "content-type", "application/grpc",
		"grpc-status", strconv.Itoa(int(s.Code())), "grpc-message", encodeGRPCMessage(s.Message()))
	c.writeLocked(head)
	c.wmu.Unlock()
	sc.end(st)
}

func (sc *serverConn) end(st *serverStream) {
	st.cancel()
	sc.c.wmu.Lock()
	delete(sc.c.streamSend, st.id)
	sc.c.wmu.Unlock()
	st.dropBuf()
	sc.mu.Lock()
	delete(sc.streams, st.id)
	closeNow := sc.away && len(sc.streams) == 0
	sc.mu.Unlock()
	sc.s.streams.Done()
	if closeNow {
		sc.c.nc.Close()
	}
}

// parseTimeout reads a grpc-timeout value.
func parseTimeout(v string) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	unit := map[byte]time.Duration{'H': time.Hour, 'M': time.Minute, 'S': time.Second,
		'm': time.Millisecond, 'u': time.Microsecond, 'n': time.Nanosecond}[v[len(v)-1]]
	if unit == 0 {
		return 0, false
	}
	return time.Duration(n) * unit, true
}
