package transportfloor_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	"goinfer/internal/h2grpc"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// HTTP/2 transports other than gRPC-Go's for the same gRPC unary call: the
// wire is the same (a 5-byte length prefix before the message, grpc-status
// in the trailers), only the frame sizes, windows and copies differ.

const floorMethod = "/floor.Floor/Call"

// startFloorH2NetHTTP serves the gRPC-framed call with net/http's own
// HTTP/2 (unencrypted, prior knowledge) and the largest frames and windows
// it accepts.
func startFloorH2NetHTTP(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	answer := make([]byte, 5+floorAnswer)
	binary.BigEndian.PutUint32(answer[1:], floorAnswer)
	bufs := sync.Pool{New: func() any { b := make([]byte, floorRequest); return &b }}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var pre [5]byte
			if _, err := io.ReadFull(r.Body, pre[:]); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			n := binary.BigEndian.Uint32(pre[1:])
			buf := bufs.Get().(*[]byte)
			defer bufs.Put(buf)
			if _, err := io.ReadFull(r.Body, (*buf)[:n]); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			h := w.Header()
			h["Content-Type"] = []string{"application/grpc"}
			h["Trailer"] = []string{"Grpc-Status"}
			w.Write(answer)
			h["Grpc-Status"] = []string{"0"}
		}),
		Protocols: new(http.Protocols),
		HTTP2: &http.HTTP2Config{MaxReadFrameSize: 16 << 20, MaxReceiveBufferPerConnection: 4<<20 - 1,
			MaxReceiveBufferPerStream: 4<<20 - 1},
	}
	srv.Protocols.SetUnencryptedHTTP2(true)
	go srv.Serve(l)
	b.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// floorGRPCClient times gRPC-Go's client (bench's settings) against addr.
func floorGRPCClient(b *testing.B, addr string) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(16<<20), grpc.WithInitialConnWindowSize(16<<20),
		grpc.WithReadBufferSize(1<<20), grpc.WithWriteBufferSize(1<<20),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(floorCodec{})))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	req, resp := make([]byte, floorRequest), make([]byte, 0, floorAnswer)
	floorLatency(b, func() error {
		if err := conn.Invoke(context.Background(), floorMethod, &req, &resp); err != nil {
			return err
		}
		if len(resp) != floorAnswer {
			return fmt.Errorf("answer of %d bytes", len(resp))
		}
		return nil
	})
}

// floorH2NetHTTPClient times net/http's HTTP/2 client sending the
// gRPC-framed call.
func floorH2NetHTTPClient(b *testing.B, addr string) {
	tr := &http.Transport{Protocols: new(http.Protocols),
		HTTP2: &http.HTTP2Config{MaxReadFrameSize: 16 << 20, MaxReceiveBufferPerConnection: 4<<20 - 1,
			MaxReceiveBufferPerStream: 4<<20 - 1}}
	tr.Protocols.SetUnencryptedHTTP2(true)
	b.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}
	body := make([]byte, 5+floorRequest)
	binary.BigEndian.PutUint32(body[1:], floorRequest)
	answer := make([]byte, 5+floorAnswer)
	url := "http://" + addr + floorMethod
	floorLatency(b, func() error {
		req, err := http.NewRequest("POST", url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header["Content-Type"] = []string{"application/grpc"}
		req.Header["Te"] = []string{"trailers"}
		req.ContentLength = int64(len(body))
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.ReadFull(resp.Body, answer); err != nil {
			return err
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if s := resp.Trailer.Get("Grpc-Status"); s != "0" {
			return fmt.Errorf("grpc-status %q", s)
		}
		return nil
	})
}

var _ = tls.Config{}

// HTTP/2 frame types and flags the raw transport uses (RFC 9113).
const (
	fData, fHeaders, fRST, fSettings, fPing, fGoAway, fWindow, fCont = 0, 1, 3, 4, 6, 7, 8, 9
	flEndStream, flAck, flEndHeaders, flPadded, flPriority           = 1, 1, 4, 8, 0x20
	rawMaxFrame                                                      = 1<<24 - 1
	rawWindow                                                        = 1<<31 - 1
	h2Preface                                                        = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
)

func frameHead(dst []byte, n int, typ, flags byte, stream uint32) []byte {
	return append(dst, byte(n>>16), byte(n>>8), byte(n), typ, flags,
		byte(stream>>24), byte(stream>>16), byte(stream>>8), byte(stream))
}

func settingsFrame(dst []byte) []byte {
	dst = frameHead(dst, 12, fSettings, 0, 0)
	dst = append(dst, 0, 4) // INITIAL_WINDOW_SIZE
	dst = binary.BigEndian.AppendUint32(dst, rawWindow)
	dst = append(dst, 0, 5) // MAX_FRAME_SIZE
	dst = binary.BigEndian.AppendUint32(dst, rawMaxFrame)
	dst = frameHead(dst, 4, fWindow, 0, 0)
	return binary.BigEndian.AppendUint32(dst, rawWindow-65535)
}

// rawConn is one end of a minimal HTTP/2 connection: frame headers are
// read from a small buffer, DATA payloads straight into the caller's
// memory, and each message leaves in one write.
type rawConn struct {
	c       net.Conn
	r       *bufio.Reader
	w       []byte
	hd      [9]byte
	peerMax int   // peer's SETTINGS_MAX_FRAME_SIZE
	peerWin int64 // peer's initial stream window
	connWin int64 // what we may still send on the connection
	recvd   int64 // received, not yet returned by WINDOW_UPDATE
	dec     *hpack.Decoder
	enc     *hpack.Encoder
	encBuf  bytes.Buffer
	fields  map[string]string
}

func newRawConn(c net.Conn) *rawConn {
	rc := &rawConn{c: c, r: bufio.NewReaderSize(c, 256<<10), peerMax: 16384, peerWin: 65535, connWin: 65535,
		fields: map[string]string{}}
	rc.dec = hpack.NewDecoder(4096, func(f hpack.HeaderField) { rc.fields[f.Name] = f.Value })
	rc.enc = hpack.NewEncoder(&rc.encBuf)
	return rc
}

// next reads one frame header and handles connection-level frames; it
// returns frames for streams (HEADERS, DATA, RST_STREAM) and GOAWAY.
func (rc *rawConn) next() (n int, typ, flags byte, stream uint32, err error) {
	for {
		if _, err = io.ReadFull(rc.r, rc.hd[:]); err != nil {
			return
		}
		n = int(rc.hd[0])<<16 | int(rc.hd[1])<<8 | int(rc.hd[2])
		typ, flags = rc.hd[3], rc.hd[4]
		stream = binary.BigEndian.Uint32(rc.hd[5:]) & (1<<31 - 1)
		switch typ {
		case fSettings:
			p := make([]byte, n)
			if _, err = io.ReadFull(rc.r, p); err != nil {
				return
			}
			if flags&flAck != 0 {
				continue
			}
			for i := 0; i+6 <= len(p); i += 6 {
				v := binary.BigEndian.Uint32(p[i+2:])
				switch binary.BigEndian.Uint16(p[i:]) {
				case 4:
					rc.peerWin = int64(v)
				case 5:
					rc.peerMax = int(v)
				}
			}
			if _, err = rc.c.Write(frameHead(nil, 0, fSettings, flAck, 0)); err != nil {
				return
			}
		case fPing:
			p := make([]byte, 9+8)
			if _, err = io.ReadFull(rc.r, p[9:]); err != nil {
				return
			}
			if flags&flAck == 0 {
				frameHead(p[:0], 8, fPing, flAck, 0)
				if _, err = rc.c.Write(p); err != nil {
					return
				}
			}
		case fWindow:
			var p [4]byte
			if _, err = io.ReadFull(rc.r, p[:]); err != nil {
				return
			}
			if stream == 0 {
				rc.connWin += int64(binary.BigEndian.Uint32(p[:]) & (1<<31 - 1))
			}
			return
		case fData, fHeaders, fRST, fGoAway, fCont:
			return

		default:
			if _, err = rc.r.Discard(n); err != nil {
				return
			}
		}
	}
}

// headers decodes a HEADERS payload of n bytes (END_HEADERS assumed).
func (rc *rawConn) headers(n int, flags byte) error {
	p := make([]byte, n)
	if _, err := io.ReadFull(rc.r, p); err != nil {
		return err
	}
	if flags&flPadded != 0 {
		p = p[1 : len(p)-int(p[0])]
	}
	if flags&flPriority != 0 {
		p = p[5:]
	}
	clear(rc.fields)
	if _, err := rc.dec.Write(p); err != nil {
		return err
	}
	if flags&flEndHeaders == 0 {
		return errors.New("CONTINUATION not supported")
	}
	return nil
}

// data reads a DATA payload of n bytes into dst (appending) and returns
// the flow-control credit.
func (rc *rawConn) data(dst []byte, n int, flags byte, stream uint32) ([]byte, error) {
	pad := 0
	if flags&flPadded != 0 {
		b, err := rc.r.ReadByte()
		if err != nil {
			return dst, err
		}
		pad, n = int(b), n-1
	}
	m := n - pad
	l := len(dst)
	if cap(dst)-l < m {
		dst = append(dst[:cap(dst)], make([]byte, m-(cap(dst)-l))...)
	}
	dst = dst[:l+m]
	if _, err := io.ReadFull(rc.r, dst[l:]); err != nil {
		return dst, err
	}
	if _, err := rc.r.Discard(pad); err != nil {
		return dst, err
	}
	rc.recvd += int64(n + pad)
	if rc.recvd > 1<<28 {
		w := frameHead(nil, 4, fWindow, 0, 0)
		w = binary.BigEndian.AppendUint32(w, uint32(rc.recvd))
		rc.recvd = 0
		if _, err := rc.c.Write(w); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// writeMessage sends a 5-byte-prefixed message as DATA frames of at most
// the peer's size after head, in one writev, waiting for window if needed.
func (rc *rawConn) writeMessage(head []byte, stream uint32, msg []byte, endStream bool, tail []byte) error {
	bufs := net.Buffers{head}
	var pre [5]byte
	binary.BigEndian.PutUint32(pre[1:], uint32(len(msg)))
	total := 5 + len(msg)
	for int64(total) > rc.connWin || int64(total) > rc.peerWin {
		if _, err := bufs.WriteTo(rc.c); err != nil {
			return err
		}
		bufs = nil
		_, typ, _, _, err := rc.next()
		if err != nil {
			return err
		}
		if typ != fWindow {
			return fmt.Errorf("frame %d while waiting for window", typ)
		}
	}
	rc.connWin -= int64(total)
	hdrs := make([]byte, 0, 9*(total/rc.peerMax+2)+5)
	off := -5
	for off < len(msg) {
		m := min(rc.peerMax, len(msg)-off)
		fl := byte(0)
		if off+m == len(msg) && endStream {
			fl = flEndStream
		}
		s := len(hdrs)
		hdrs = frameHead(hdrs, m, fData, fl, stream)
		if off < 0 {
			hdrs = append(hdrs, pre[:]...)
			bufs = append(bufs, hdrs[s:], msg[:m-5])
		} else {
			bufs = append(bufs, hdrs[s:], msg[off:off+m])
		}
		off += m
	}
	if tail != nil {
		bufs = append(bufs, tail)
	}
	_, err := bufs.WriteTo(rc.c)
	return err
}

func (rc *rawConn) encode(dst []byte, flags byte, stream uint32, fields ...string) []byte {
	rc.encBuf.Reset()
	for i := 0; i < len(fields); i += 2 {
		rc.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	dst = frameHead(dst, rc.encBuf.Len(), fHeaders, flags|flEndHeaders, stream)
	return append(dst, rc.encBuf.Bytes()...)
}

// startFloorRawH2 serves the call with the minimal HTTP/2 server.
func startFloorRawH2(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go rawServe(c)
		}
	}()
	b.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

func rawServe(c net.Conn) {
	defer c.Close()
	rc := newRawConn(c)
	pre := make([]byte, len(h2Preface))
	if _, err := io.ReadFull(rc.r, pre); err != nil || string(pre) != h2Preface {
		return
	}
	if _, err := c.Write(settingsFrame(nil)); err != nil {
		return
	}
	answer := make([]byte, floorAnswer)
	buf := make([]byte, 0, 5+floorRequest)
	for {
		n, typ, flags, stream, err := rc.next()
		if err != nil {
			return
		}
		switch typ {
		case fHeaders:
			if err := rc.headers(n, flags); err != nil {
				return
			}
			buf = buf[:0]
		case fData:
			if buf, err = rc.data(buf, n, flags, stream); err != nil {
				return
			}
			if flags&flEndStream == 0 {
				continue
			}
			if len(buf) < 5 || int(binary.BigEndian.Uint32(buf[1:])) != len(buf)-5 {
				return
			}
			head := rc.encode(nil, 0, stream, ":status", "200", "content-type", "application/grpc")
			tail := rc.encode(nil, flEndStream, stream, "grpc-status", "0")
			if rc.writeMessage(head, stream, answer, false, tail) != nil {
				return
			}
		case fGoAway:
			return
		case fWindow:
		default:
			if _, err := rc.r.Discard(n); err != nil {
				return
			}
		}
	}
}

// floorRawH2Client times the minimal HTTP/2 client against addr.
func floorRawH2Client(b *testing.B, addr string) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	rc := newRawConn(c)
	if _, err := c.Write(settingsFrame([]byte(h2Preface))); err != nil {
		b.Fatal(err)
	}
	req := make([]byte, floorRequest)
	resp := make([]byte, 0, 5+floorAnswer)
	stream := uint32(1)
	floorLatency(b, func() error {
		head := rc.encode(nil, 0, stream, ":method", "POST", ":scheme", "http", ":path", floorMethod,
			":authority", addr, "content-type", "application/grpc", "te", "trailers")
		if err := rc.writeMessage(head, stream, req, true, nil); err != nil {
			return err
		}
		resp = resp[:0]
		for {
			n, typ, flags, s, err := rc.next()
			if err != nil {
				return err
			}
			switch {
			case typ == fData && s == stream:
				if resp, err = rc.data(resp, n, flags, s); err != nil {
					return err
				}
			case typ == fWindow:
				continue
			case typ == fHeaders && s == stream:
				if err := rc.headers(n, flags); err != nil {
					return err
				}
			default:
				if _, err := rc.r.Discard(n); err != nil {
					return err
				}
			}
			if s == stream && flags&flEndStream != 0 && (typ == fData || typ == fHeaders) {
				break
			}
		}
		if rc.fields["grpc-status"] != "0" || len(resp) != 5+floorAnswer {
			return fmt.Errorf("status %q, %d bytes", rc.fields["grpc-status"], len(resp))
		}
		stream += 2
		return nil
	})
}

// BenchmarkTransportFloorH2 is BenchmarkTransportFloor for HTTP/2
// transports other than gRPC-Go's, each server with each client.
func BenchmarkTransportFloorH2(b *testing.B) {
	servers := []struct {
		name  string
		start func(*testing.B) string
	}{
		{"grpcgo", func(b *testing.B) string { return startFloorGRPC(b, false) }},
		{"nethttp", startFloorH2NetHTTP},
		{"raw", startFloorRawH2},
		{"h2grpc", startFloorH2GRPC},
	}
	clients := []struct {
		name string
		run  func(*testing.B, string)
	}{
		{"grpcgo", floorGRPCClient},
		{"nethttp", floorH2NetHTTPClient},
		{"raw", floorRawH2Client},
		{"h2grpc", floorH2GRPCClient},
	}
	for _, s := range servers {
		for _, c := range clients {
			b.Run(s.name+"-server/"+c.name+"-client", func(b *testing.B) { c.run(b, s.start(b)) })
		}
	}
}

// startFloorH2GRPC serves the call with internal/h2grpc, the transport
// built from the raw case.
func startFloorH2GRPC(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	answer := [][]byte{make([]byte, floorAnswer)}
	s := &h2grpc.Server{Handler: func(_ context.Context, _ string, msg []byte) ([][]byte, func(), error) {
		if len(msg) != floorRequest {
			return nil, nil, fmt.Errorf("request of %d bytes", len(msg))
		}
		return answer, nil, nil
	}}
	go s.Serve(l)
	b.Cleanup(s.Close)
	return l.Addr().String()
}

// floorH2GRPCClient times internal/h2grpc's client against addr.
func floorH2GRPCClient(b *testing.B, addr string) {
	cc, err := h2grpc.Dial(context.Background(), addr, h2grpc.ClientOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	req, resp := [][]byte{make([]byte, floorRequest)}, make([]byte, 0, 5+floorAnswer)
	floorLatency(b, func() error {
		got, err := cc.Invoke(context.Background(), floorMethod, req, resp)
		if err != nil {
			return err
		}
		if len(got) != floorAnswer {
			return fmt.Errorf("answer of %d bytes", len(got))
		}
		return nil
	})
}
