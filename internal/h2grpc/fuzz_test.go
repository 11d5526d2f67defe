package h2grpc

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// byteConn is a net.Conn that reads a fixed input and discards writes.
type byteConn struct {
	r *bytes.Reader
}

func (c byteConn) Read(p []byte) (int, error)     { return c.r.Read(p) }
func (byteConn) Write(p []byte) (int, error)      { return len(p), nil }
func (byteConn) Close() error                     { return nil }
func (byteConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (byteConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (byteConn) SetDeadline(time.Time) error      { return nil }
func (byteConn) SetReadDeadline(time.Time) error  { return nil }
func (byteConn) SetWriteDeadline(time.Time) error { return nil }

// seedFrames is a well-formed client session: SETTINGS, a call with its
// message split over two DATA frames, a PING and a WINDOW_UPDATE.
func seedFrames() []byte {
	c := newConn(byteConn{bytes.NewReader(nil)}, maxFrameSize, initialWindow)
	b := appendSettings([]byte(clientPreface), maxFrameSize, 1<<20, 0)
	b = c.encodeHeaders(b, 1, false, ":method", "POST", ":scheme", "http", ":path", "/t.T/Echo",
		"content-type", "application/grpc", "grpc-timeout", "100m")
	b = appendFrameHeader(b, 7, frameData, 0, 1)
	b = append(b, 0, 0, 0, 0, 4, 'a', 'b')
	b = appendFrameHeader(b, 3, frameData, flagEndStream|flagPadded, 1)
	b = append(b, 0, 'c', 'd')
	// A call that Unary does not claim, served by the fallback handler.
	b = c.encodeHeaders(b, 3, false, ":method", "POST", ":scheme", "http", ":path", "/t.T/Stream",
		"content-type", "application/grpc")
	b = appendFrameHeader(b, 4, frameData, 0, 3)
	b = append(b, 0, 0, 0, 0)
	b = appendFrameHeader(b, 1, frameData, flagEndStream, 3)
	b = append(b, 0)
	b = appendFrameHeader(b, 8, framePing, 0, 0)
	b = append(b, 1, 2, 3, 4, 5, 6, 7, 8)
	return appendWindowUpdate(b, 0, 1000)
}

// FuzzServerConn feeds arbitrary bytes after the preface to a server
// connection: the frame decoder, HPACK, flow control and stream handling
// must not panic, hang or allocate more than the limits allow.
func FuzzServerConn(f *testing.F) {
	seed := seedFrames()
	f.Add(seed[len(clientPreface):])
	f.Add(appendFrameHeader(nil, 1<<24-1, frameHeaders, flagEndHeaders, 1))
	f.Add(appendFrameHeader(nil, 0, frameData, flagPadded, 1))
	f.Fuzz(func(t *testing.T, in []byte) {
		s := &Server{Handler: testHandler(nil), MaxRecvMsgSize: 1 << 16,
			Unary: func(m string) bool { return m == "/t.T/Echo" }, Fallback: echoFallback{}}
		s.ServeConn(byteConn{bytes.NewReader(append([]byte(clientPreface), in...))})
		// ServeConn returns when its goroutine's call ends; another may
		// still be reading the connection. Close waits for the reading to
		// end, so that no call starts after the wait below begins.
		s.Close()
		done := make(chan struct{})
		go func() { s.streams.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("calls still running after the connection ended")
		}
	})
}

// echoFallback answers a fallback call with its body and a trailer.
type echoFallback struct{}

func (echoFallback) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Trailer", "Grpc-Status")
	w.WriteHeader(http.StatusOK)
	io.Copy(w, r.Body)
	w.Header().Set("Grpc-Status", "0")
}
