package h2grpc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"golang.org/x/net/http2/hpack"
)

// maxHeaderBytes bounds one header block (HEADERS and its CONTINUATIONs).
const maxHeaderBytes = 64 << 10

// conn is the part of an HTTP/2 connection both ends share: reading frames
// (connection-level ones are answered here), decoding header blocks, and
// writing under a lock with the peer's flow-control windows respected.
type conn struct {
	nc        net.Conn
	src       fillLimiter // what r reads from: nc
	r         *bufio.Reader
	hd        [frameHeaderLen]byte
	readLimit int // our SETTINGS_MAX_FRAME_SIZE
	window    int // our initial stream window and connection window
	dec       *hpack.Decoder
	fields    []hpack.HeaderField
	hdrBuf    []byte
	recvConn  int // bytes received on the connection not yet credited back

	wmu         sync.Mutex // guards everything below and writes to nc
	wcond       *sync.Cond // signalled when a window opens or the conn fails
	enc         *hpack.Encoder
	encBuf      bytes.Buffer
	peerFrame   int
	peerInitWin int64
	connSend    int64
	streamSend  map[uint32]int64
	werr        error
	vectored    bool   // nc writes net.Buffers with one writev
	wbuf        []byte // where coalesce gathers small buffers
}

// coalesce copies runs of small buffers (frame headers, HEADERS, short
// messages) into one, for connections that write each buffer of a
// net.Buffers with its own system call (a wrapped net.Conn): a 4 KB answer
// then leaves in one segment, not six.
func (c *conn) coalesce(b [][]byte) [][]byte {
	const small = 64 << 10
	total := 0
	for _, p := range b {
		total += min(len(p), small+1)
	}
	c.wbuf = c.wbuf[:0]
	if cap(c.wbuf) < total {
		c.wbuf = make([]byte, 0, total)
	}
	out := b[:0:0]
	start := 0
	for _, p := range b {
		if len(p) <= small {
			c.wbuf = append(c.wbuf, p...)
			continue
		}
		if len(c.wbuf) > start {
			out = append(out, c.wbuf[start:])
			start = len(c.wbuf)
		}
		out = append(out, p)
	}
	if len(c.wbuf) > start {
		out = append(out, c.wbuf[start:])
	}
	return out
}

// bigFrame is the DATA frame size from which a peer is taken to send
// messages in few large frames; smallFill is how much the read buffer then
// takes from the socket at a time.
const (
	bigFrame  = 64 << 10
	smallFill = 16 << 10
)

// fillLimiter is the read buffer's source. A peer that sends small frames
// (gRPC-Go's 16 KiB) is read in large gulps, many frames a system call;
// for one that sends a message in one large frame, the buffer takes only
// smallFill at a time, so that reading a frame header does not also pull
// hundreds of KiB of the payload that follows into the buffer, to be
// copied out again: readData reads the rest of a payload straight from
// the socket into the message.
type fillLimiter struct {
	nc    net.Conn
	limit int // 0: none
}

func (f *fillLimiter) Read(p []byte) (int, error) {
	if f.limit > 0 && len(p) > f.limit {
		p = p[:f.limit]
	}
	return f.nc.Read(p)
}

func newConn(nc net.Conn, readLimit, window int) *conn {
	c := &conn{nc: nc, src: fillLimiter{nc: nc}, readLimit: readLimit, window: window,
		peerFrame: minFrameSize, peerInitWin: initialWindow, connSend: initialWindow,
		streamSend: map[uint32]int64{}}
	c.r = bufio.NewReaderSize(&c.src, 256<<10)
	c.wcond = sync.NewCond(&c.wmu)
	switch nc.(type) {
	case *net.TCPConn, *net.UnixConn:
		c.vectored = true
	}
	c.dec = hpack.NewDecoder(4096, func(f hpack.HeaderField) { c.fields = append(c.fields, f) })
	c.dec.SetMaxStringLength(maxHeaderBytes)
	c.enc = hpack.NewEncoder(&c.encBuf)
	return c
}

// fail records the first write-side error and wakes writers waiting for a
// window.
func (c *conn) fail(err error) {
	c.wmu.Lock()
	if c.werr == nil {
		c.werr = err
	}
	c.wcond.Broadcast()
	c.wmu.Unlock()
}

// write sends b under the write lock.
func (c *conn) write(b ...[]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeLocked(b...)
}

func (c *conn) writeLocked(b ...[]byte) error {
	if c.werr != nil {
		return c.werr
	}
	if !c.vectored && len(b) > 1 {
		b = c.coalesce(b)
	}
	bufs := net.Buffers(b)
	if _, err := bufs.WriteTo(c.nc); err != nil {
		c.werr = err
		c.wcond.Broadcast()
		return err
	}
	return nil
}

// readFrame returns the next frame that is not handled at the connection
// level (SETTINGS, PING, WINDOW_UPDATE, PRIORITY and unknown types are);
// the caller reads or discards its payload.
func (c *conn) readFrame() (frameHeader, error) {
	for {
		h, handled, err := c.readAnyFrame()
		if err != nil || !handled {
			return h, err
		}
	}
}

// readAnyFrame reads one frame header; a connection-level frame is handled
// here (handled is true), any other is left to the caller.
func (c *conn) readAnyFrame() (h frameHeader, handled bool, err error) {
	if _, err := io.ReadFull(c.r, c.hd[:]); err != nil {
		return h, false, err
	}
	if h, err = parseFrameHeader(c.hd[:], c.readLimit); err != nil {
		return h, false, err
	}
	switch h.typ {
	case frameData, frameHeaders, frameRSTStream, frameGoAway, framePushPromise, frameContinuation:
		return h, false, nil
	case frameSettings:
		err = c.readSettings(h)
	case framePing:
		err = c.readPing(h)
	case frameWindowUpdate:
		err = c.readWindowUpdate(h)
	default:
		_, err = c.r.Discard(h.length)
	}
	return h, true, err
}

// payload reads a control frame's payload of n bytes into a reused
// buffer; no control frame this package reads may be longer than a header
// block, so a peer cannot make it allocate more.
func (c *conn) payload(n int) ([]byte, error) {
	if n > maxHeaderBytes {
		return nil, connError{errCodeFrameSize, fmt.Sprintf("control frame of %d bytes", n)}
	}
	if cap(c.hdrBuf) < n {
		c.hdrBuf = make([]byte, n)
	}
	p := c.hdrBuf[:n]
	_, err := io.ReadFull(c.r, p)
	return p, err
}

func (c *conn) readSettings(h frameHeader) error {
	if h.stream != 0 || h.length%6 != 0 || (h.flags&flagAck != 0 && h.length != 0) {
		return connError{errCodeProtocol, "malformed SETTINGS"}
	}
	p, err := c.payload(h.length)
	if err != nil || h.flags&flagAck != 0 {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for ; len(p) >= 6; p = p[6:] {
		v := binary.BigEndian.Uint32(p[2:])
		switch binary.BigEndian.Uint16(p) {
		case settingInitialWindowSize:
			if v > maxWindow {
				return connError{errCodeFlowControl, "initial window over 2^31-1"}
			}
			// A new initial window moves every open stream's window by the
			// difference (RFC 9113 section 6.9.2).
			d := int64(v) - c.peerInitWin
			for id := range c.streamSend {
				c.streamSend[id] += d
			}
			c.peerInitWin = int64(v)
		case settingMaxFrameSize:
			if v < minFrameSize || v > maxFrameSize {
				return connError{errCodeProtocol, fmt.Sprintf("SETTINGS_MAX_FRAME_SIZE %d", v)}
			}
			c.peerFrame = int(v)
		}
	}
	c.wcond.Broadcast()
	return c.writeLocked(appendFrameHeader(nil, 0, frameSettings, flagAck, 0))
}

func (c *conn) readPing(h frameHeader) error {
	if h.stream != 0 || h.length != 8 {
		return connError{errCodeFrameSize, "malformed PING"}
	}
	var b [frameHeaderLen + 8]byte
	if _, err := io.ReadFull(c.r, b[frameHeaderLen:]); err != nil {
		return err
	}
	if h.flags&flagAck != 0 {
		return nil
	}
	appendFrameHeader(b[:0], 8, framePing, flagAck, 0)
	return c.write(b[:])
}

func (c *conn) readWindowUpdate(h frameHeader) error {
	if h.length != 4 {
		return connError{errCodeFrameSize, "malformed WINDOW_UPDATE"}
	}
	var b [4]byte
	if _, err := io.ReadFull(c.r, b[:]); err != nil {
		return err
	}
	n := int64(binary.BigEndian.Uint32(b[:]) & (1<<31 - 1))
	if n == 0 {
		return connError{errCodeProtocol, "WINDOW_UPDATE of 0"}
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if h.stream == 0 {
		c.connSend += n
		if c.connSend > maxWindow {
			return connError{errCodeFlowControl, "connection window over 2^31-1"}
		}
	} else if w, ok := c.streamSend[h.stream]; ok {
		c.streamSend[h.stream] = w + n
	}
	c.wcond.Broadcast()
	return nil
}

// readHeaders decodes the header block that starts with HEADERS frame h
// (and its CONTINUATIONs) into c.fields.
func (c *conn) readHeaders(h frameHeader) error {
	c.fields = c.fields[:0]
	p, err := c.payload(h.length)
	if err != nil {
		return err
	}
	if h.flags&flagPadded != 0 {
		if len(p) < 1 || int(p[0]) >= len(p) {
			return connError{errCodeProtocol, "padding longer than the frame"}
		}
		p = p[1 : len(p)-int(p[0])]
	}
	if h.flags&flagPriority != 0 {
		if len(p) < 5 {
			return connError{errCodeProtocol, "HEADERS too short for its priority"}
		}
		p = p[5:]
	}
	block := append([]byte(nil), p...)
	for f := h.flags; f&flagEndHeaders == 0; {
		ch, err := c.readFrame()
		if err != nil {
			return err
		}
		if ch.typ != frameContinuation || ch.stream != h.stream {
			return connError{errCodeProtocol, "header block not continued by CONTINUATION"}
		}
		if len(block)+ch.length > maxHeaderBytes {
			return connError{errCodeEnhanceCalm, "header block over 64 KiB"}
		}
		p, err := c.payload(ch.length)
		if err != nil {
			return err
		}
		block = append(block, p...)
		f = ch.flags
	}
	if _, err := c.dec.Write(block); err != nil {
		return connError{errCodeProtocol, "HPACK: " + err.Error()}
	}
	return nil
}

func (c *conn) field(name string) string {
	for _, f := range c.fields {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// readData reads DATA frame h's payload onto dst, without padding, and
// credits the connection window back once half of it is used.
func (c *conn) readData(h frameHeader, dst []byte) ([]byte, error) {
	n, pad := h.length, 0
	if h.flags&flagPadded != 0 {
		if n < 1 {
			return dst, connError{errCodeProtocol, "padded DATA without its pad length"}
		}
		b, err := c.r.ReadByte()
		if err != nil {
			return dst, err
		}
		pad, n = int(b), n-1
		if pad > n {
			return dst, connError{errCodeProtocol, "padding longer than the frame"}
		}
	}
	m := n - pad
	l := len(dst)
	dst = grow(dst, m)
	if err := c.readPayload(dst[l:]); err != nil {
		return dst[:l], err
	}
	if h.length >= bigFrame {
		c.src.limit = smallFill
	} else {
		c.src.limit = 0
	}
	if _, err := c.r.Discard(pad); err != nil {
		return dst, err
	}
	c.recvConn += h.length
	if c.recvConn > c.window {
		return dst, connError{errCodeFlowControl, "peer sent past the connection window"}
	}
	if c.recvConn >= c.window/2 {
		n := c.recvConn
		c.recvConn = 0
		if err := c.write(appendWindowUpdate(nil, 0, uint32(n))); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// readPayload fills p with the next bytes of the connection. A large rest
// (past what the read buffer holds) is read straight from the socket: the
// buffer is empty then, and p ends where the payload does, so nothing is
// read past it. A small one goes through the buffer, whose fill may bring
// the frames that follow in the same system call.
func (c *conn) readPayload(p []byte) error {
	k := 0
	if b := c.r.Buffered(); b > 0 {
		k, _ = c.r.Read(p[:min(len(p), b)])
	}
	if len(p)-k < bigFrame {
		_, err := io.ReadFull(c.r, p[k:])
		return err
	}
	_, err := io.ReadFull(c.nc, p[k:])
	return err
}

// grow extends b by n bytes, reallocating at most once.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), max(2*cap(b), len(b)+n))
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n]
}

// encodeHeaders appends a HEADERS frame (and CONTINUATIONs where the block
// is larger than the peer's frames) for fields, pairs of name and value.
// Call with wmu held: the encoder's state is the connection's.
func (c *conn) encodeHeaders(dst []byte, stream uint32, endStream bool, fields ...string) []byte {
	c.encBuf.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		c.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	block := c.encBuf.Bytes()
	typ, flags := byte(frameHeaders), byte(0)
	if endStream {
		flags = flagEndStream
	}
	for {
		n := min(len(block), c.peerFrame)
		f := flags
		if n == len(block) {
			f |= flagEndHeaders
		}
		dst = appendFrameHeader(dst, n, typ, f, stream)
		dst = append(dst, block[:n]...)
		block = block[n:]
		if len(block) == 0 {
			return dst
		}
		typ, flags = frameContinuation, 0
	}
}

// errStreamClosed is returned to a writer whose stream was reset or whose
// connection ended while it waited for a window.
var errStreamClosed = errors.New("h2grpc: stream closed")

// writeMessage sends head (HEADERS already encoded, may be empty), one
// gRPC message made of parts (prefix added here) as DATA frames no larger
// than the peer's, and tail (trailers, may be nil), in as few writes as
// the peer's windows allow. closeStream ends the stream with the last
// DATA frame (a client's request). Call with wmu held.
//
// When a window is closed, wait runs with wmu held; nil means the server's
// way: wait for the reader goroutine to signal wcond.
func (c *conn) writeMessage(stream uint32, head []byte, parts [][]byte, closeStream bool, tail func() []byte, wait func() error) error {
	total := grpcPrefixLen
	for _, p := range parts {
		total += len(p)
	}
	var prefix [grpcPrefixLen]byte
	binary.BigEndian.PutUint32(prefix[1:], uint32(total-grpcPrefixLen))
	return c.writeData(stream, head, append([][]byte{prefix[:]}, parts...), total, closeStream, tail, wait)
}

// writeData is writeMessage's frame writer: head, then the total bytes of
// src as DATA frames within the peer's windows, then tail(). Call with wmu
// held.
func (c *conn) writeData(stream uint32, head []byte, src [][]byte, total int, closeStream bool, tail func() []byte, wait func() error) error {
	bufs := make(net.Buffers, 0, 2*len(src)+total/c.peerFrame+4)
	if len(head) > 0 {
		bufs = append(bufs, head)
	}
	hdrs := make([]byte, 0, frameHeaderLen*(total/minFrameSize+len(src)+2))
	for total > 0 {
		for {
			if c.werr != nil {
				return c.werr
			}
			w, ok := c.streamSend[stream]
			if !ok {
				return errStreamClosed
			}
			if min(w, c.connSend) > 0 {
				break
			}
			if len(bufs) > 0 {
				if err := c.writeLocked(bufs...); err != nil {
					return err
				}
				bufs = bufs[:0]
			}
			if wait == nil {
				c.wcond.Wait()
			} else if err := wait(); err != nil {
				return err
			}
		}
		n := int(min(int64(total), int64(c.peerFrame), c.streamSend[stream], c.connSend))
		c.streamSend[stream] -= int64(n)
		c.connSend -= int64(n)
		total -= n
		flags := byte(0)
		if total == 0 && closeStream {
			flags = flagEndStream
		}
		if cap(hdrs)-len(hdrs) < frameHeaderLen {
			hdrs = make([]byte, 0, 16*frameHeaderLen)
		}
		s := len(hdrs)
		hdrs = appendFrameHeader(hdrs, n, frameData, flags, stream)
		bufs = append(bufs, hdrs[s:])
		for n > 0 {
			k := min(n, len(src[0]))
			if k > 0 {
				bufs = append(bufs, src[0][:k])
			}
			src[0] = src[0][k:]
			n -= k
			if len(src[0]) == 0 {
				src = src[1:]
			}
			if len(src) == 0 {
				break
			}
		}
		for len(src) > 0 && len(src[0]) == 0 {
			src = src[1:]
		}
	}
	if tail != nil {
		bufs = append(bufs, tail())
	}
	return c.writeLocked(bufs...)
}
