package h2grpc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ClientOptions configures a ClientConn.
type ClientOptions struct {
	// Window is the stream and connection window announced to the server
	// (default and maximum 1<<30).
	Window int
	// MaxRecvMsgSize bounds a reply (default 64 MiB).
	MaxRecvMsgSize int
}

// ClientConn is one HTTP/2 connection that carries one unary call at a
// time; the call runs on the caller's goroutine (no reader goroutine, so
// no hand-off between goroutines per call). Open one per call in flight.
type ClientConn struct {
	mu        sync.Mutex
	c         *conn
	authority string
	opts      ClientOptions
	next      uint32
	deadline  bool  // a deadline may be set on the connection
	err       error // set once the connection cannot carry another call
}

// Dial opens a connection to addr (host:port) with prior-knowledge HTTP/2.
func Dial(ctx context.Context, addr string, opts ClientOptions) (*ClientConn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("h2grpc: dial %s: %w", addr, err)
	}
	return NewClientConn(nc, addr, opts)
}

// NewClientConn starts HTTP/2 on nc, an open connection to authority.
func NewClientConn(nc net.Conn, authority string, opts ClientOptions) (*ClientConn, error) {
	if opts.Window <= 0 || opts.Window > 1<<30 {
		opts.Window = 1 << 30
	}
	opts.Window = max(opts.Window, initialWindow)
	if opts.MaxRecvMsgSize <= 0 {
		opts.MaxRecvMsgSize = 64 << 20
	}
	cc := &ClientConn{c: newConn(nc, maxFrameSize, opts.Window), authority: authority, opts: opts, next: 1}
	if err := cc.c.write(appendSettings([]byte(clientPreface), maxFrameSize, opts.Window, 0)); err != nil {
		nc.Close()
		return nil, fmt.Errorf("h2grpc: preface: %w", err)
	}
	return cc, nil
}

// Close closes the connection.
func (cc *ClientConn) Close() error {
	cc.c.fail(net.ErrClosed)
	return cc.c.nc.Close()
}

// Err is nil while the connection can carry another call.
func (cc *ClientConn) Err() error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.err
}

// Invoke calls method ("/package.Service/Method") with the message made
// of parts (already marshalled; sent without copying) and returns the
// reply message, in reply's memory when it is large enough. A non-OK
// grpc-status comes back as a status error; a transport failure, a
// cancelled or expired ctx, or a GOAWAY leaves the connection unusable
// (Err).
func (cc *ClientConn) Invoke(ctx context.Context, method string, parts [][]byte, reply []byte) ([]byte, error) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.err != nil {
		return nil, status.Error(codes.Unavailable, cc.err.Error())
	}
	if cc.next > maxWindow-2 {
		cc.err = errors.New("h2grpc: stream identifiers used up")
		return nil, status.Error(codes.Unavailable, cc.err.Error())
	}
	stream := cc.next
	cc.next += 2
	// Deadlines cost a timer each: set only when the call has one or the
	// last call left one.
	dl, hasDL := ctx.Deadline()
	if hasDL || cc.deadline {
		cc.c.nc.SetDeadline(dl)
		cc.deadline = hasDL
	}
	stop := func() bool { return true }
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() { cc.c.nc.SetDeadline(time.Unix(1, 0)) })
		cc.deadline = true
	}
	reply, err := cc.call(ctx, stream, method, parts, reply)
	if !stop() || ctx.Err() != nil {
		// The deadline cut a read or write short somewhere: the stream
		// state is unknown, so is the connection's.
		cc.fail(ctx.Err())
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	var se interface{ GRPCStatus() *status.Status }
	if err != nil && !errors.As(err, &se) {
		cc.fail(err)
		return nil, status.Errorf(codes.Unavailable, "h2grpc: %v", err)
	}
	return reply, err
}

func (cc *ClientConn) fail(err error) {
	if cc.err == nil {
		cc.err = err
	}
	cc.c.fail(err)
	cc.c.nc.Close()
}

// errAnswered stops the sending of a request the server already answered.
var errAnswered = errors.New("h2grpc: answered before the request was sent")

// reply is the state of one call's answer as its frames arrive.
type reply struct {
	stream     uint32
	buf        []byte
	gotHeaders bool
	recv       int
	done       bool
	err        error
}

func (cc *ClientConn) call(ctx context.Context, stream uint32, method string, parts [][]byte, dst []byte) ([]byte, error) {
	c := cc.c
	fields := []string{":method", "POST", ":scheme", "http", ":path", method, ":authority", cc.authority,
		"content-type", "application/grpc", "te", "trailers"}
	if dl, ok := ctx.Deadline(); ok {
		fields = append(fields, "grpc-timeout", strconvTimeout(time.Until(dl)))
	}
	r := &reply{stream: stream, buf: dst[:0]}
	// With no reader goroutine, the caller reads while it waits for a
	// window: WINDOW_UPDATEs, and an answer that comes before the whole
	// request was sent (an error status).
	wait := func() error {
		c.wmu.Unlock()
		defer c.wmu.Lock()
		h, handled, err := c.readAnyFrame()
		if err != nil || handled {
			return err
		}
		if err := cc.frame(h, r); err != nil {
			return err
		}
		if r.done {
			return errAnswered
		}
		return nil
	}
	c.wmu.Lock()
	c.streamSend[stream] = c.peerInitWin
	head := c.encodeHeaders(nil, stream, false, fields...)
	err := c.writeMessage(stream, head, parts, true, nil, wait)
	c.wmu.Unlock()
	defer func() {
		c.wmu.Lock()
		delete(c.streamSend, stream)
		c.wmu.Unlock()
	}()
	if errors.Is(err, errAnswered) {
		// The rest of the request would still be flowing: the stream is
		// reset, the connection stays usable.
		if err := c.write(appendRSTStream(nil, stream, errCodeCancel)); err != nil {
			return nil, err
		}
		return r.buf, r.err
	}
	if err != nil {
		return nil, err
	}
	for !r.done {
		h, err := c.readFrame()
		if err != nil {
			return nil, err
		}
		if err := cc.frame(h, r); err != nil {
			return nil, err
		}
	}
	return r.buf, r.err
}

// frame handles one stream-level frame; a returned error is a transport
// failure, the call's own outcome is in r (done, buf, err).
func (cc *ClientConn) frame(h frameHeader, r *reply) error {
	c := cc.c
	switch h.typ {
	case frameHeaders:
		if err := c.readHeaders(h); err != nil {
			return err
		}
		if h.stream != r.stream {
			return nil
		}
		if !r.gotHeaders {
			r.gotHeaders = true
			if s := c.field(":status"); s != "200" {
				r.done, r.err = true, status.Errorf(codes.Unavailable, "h2grpc: HTTP status %s", s)
				return nil
			}
		}
		if h.flags&flagEndStream != 0 {
			r.done = true
			if r.err = statusFromTrailers(c.field("grpc-status"), c.field("grpc-message")); r.err == nil {
				r.buf, r.err = unframe(r.buf)
			}
		}
	case frameData:
		if h.stream != r.stream {
			_, err := c.readData(h, nil)
			return err
		}
		if len(r.buf)+h.length > cc.opts.MaxRecvMsgSize+grpcPrefixLen {
			r.done, r.err = true, status.Errorf(codes.ResourceExhausted, "h2grpc: reply over %d bytes", cc.opts.MaxRecvMsgSize)
			return errors.New("h2grpc: reply too large")
		}
		var err error
		if r.buf, err = c.readData(h, r.buf); err != nil {
			return err
		}
		if r.recv += h.length; r.recv >= c.window/2 {
			if err := c.write(appendWindowUpdate(nil, r.stream, uint32(r.recv))); err != nil {
				return err
			}
			r.recv = 0
		}
		if h.flags&flagEndStream != 0 {
			r.done, r.err = true, status.Error(codes.Internal, "h2grpc: stream ended without trailers")
		}
	case frameRSTStream:
		p, err := c.payload(h.length)
		if err != nil {
			return err
		}
		if len(p) != 4 {
			return connError{errCodeFrameSize, "RST_STREAM not 4 bytes"}
		}
		if h.stream == r.stream {
			r.done, r.err = true, rstStatus(binary.BigEndian.Uint32(p))
		}
	case frameGoAway:
		p, err := c.payload(h.length)
		if err != nil {
			return err
		}
		if len(p) < 8 {
			return connError{errCodeFrameSize, "GOAWAY too short"}
		}
		// No new call on this connection; this one goes on if the server
		// took it.
		cc.err = errors.New("h2grpc: server sent GOAWAY")
		if binary.BigEndian.Uint32(p)&(1<<31-1) < r.stream {
			r.done, r.err = true, status.Error(codes.Unavailable, "h2grpc: server going away, call not taken")
		}
	default:
		_, err := c.r.Discard(h.length)
		return err
	}
	return nil
}

// unframe checks the 5-byte prefix of one received message.
func unframe(b []byte) ([]byte, error) {
	if len(b) < grpcPrefixLen {
		return nil, status.Errorf(codes.Internal, "h2grpc: reply of %d bytes has no message", len(b))
	}
	if b[0] != 0 {
		return nil, status.Error(codes.Unimplemented, "h2grpc: compressed messages are not supported")
	}
	if n := binary.BigEndian.Uint32(b[1:5]); int(n) != len(b)-grpcPrefixLen {
		return nil, status.Errorf(codes.Internal, "h2grpc: message of %d bytes declares %d", len(b)-grpcPrefixLen, n)
	}
	return b[grpcPrefixLen:], nil
}

// strconvTimeout writes d as a grpc-timeout value (at most 8 digits).
func strconvTimeout(d time.Duration) string {
	d = max(d, time.Microsecond)
	if us := d / time.Microsecond; us < 1e8 {
		return fmt.Sprintf("%du", us)
	}
	if ms := d / time.Millisecond; ms < 1e8 {
		return fmt.Sprintf("%dm", ms)
	}
	return fmt.Sprintf("%dS", min(d/time.Second, 1e8-1))
}
