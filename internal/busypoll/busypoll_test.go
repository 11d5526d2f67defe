package busypoll

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// pair returns the two ends of a loopback TCP connection, the dialed end
// wrapped with spin.
func pair(t *testing.T, spin time.Duration) (client, server net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return Wrap(c, spin), s
}

func TestRead(t *testing.T) {
	for _, tt := range []struct {
		name string
		spin time.Duration
		wrap bool
	}{
		{"off", 0, false},
		{"short spin, data after it", 10 * time.Microsecond, true},
		{"long spin, data within it", time.Second, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, s := pair(t, tt.spin)
			if _, ok := c.(*Conn); ok != tt.wrap {
				t.Fatalf("Wrap gave %T", c)
			}
			// Data that arrives late, in parts, larger than one read.
			want := bytes.Repeat([]byte("0123456789abcdef"), 64<<10)
			go func() {
				time.Sleep(20 * time.Millisecond)
				s.Write(want[:100])
				time.Sleep(5 * time.Millisecond)
				s.Write(want[100:])
				s.Close()
			}()
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("read %d bytes, not the %d written", len(got), len(want))
			}
			// After EOF, reads keep saying EOF.
			if n, err := c.Read(make([]byte, 8)); n != 0 || err != io.EOF {
				t.Fatalf("read after EOF: %d, %v", n, err)
			}
		})
	}
}

func TestReadDeadline(t *testing.T) {
	for _, spin := range []time.Duration{time.Microsecond, 200 * time.Millisecond} {
		c, _ := pair(t, spin)
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		start := time.Now()
		_, err := c.Read(make([]byte, 8))
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("spin %v: read past the deadline: %v, want a timeout", spin, err)
		}
		// The spin bounds how late the deadline is noticed.
		if took := time.Since(start); took > spin+2*time.Second {
			t.Fatalf("spin %v: the deadline took %v", spin, took)
		}
	}
}

func TestReadAfterClose(t *testing.T) {
	c, _ := pair(t, time.Millisecond)
	c.Close()
	if _, err := c.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read on a closed conn: %v", err)
	}
}

// TestHTTPServer serves keep-alive requests with bodies through a
// Listener, as the server does.
func TestHTTPServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		w.Write(b)
	})}
	go srv.Serve(&Listener{Listener: l, Spin: 100 * time.Microsecond, Buffer: 1 << 20})
	defer srv.Close()
	hc := &http.Client{}
	body := bytes.Repeat([]byte{7}, 750_000)
	for i := range 5 {
		resp, err := hc.Post("http://"+l.Addr().String(), "application/octet-stream", bytes.NewReader(body[:len(body)-i]))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Equal(got, body[:len(body)-i]) {
			t.Fatalf("request %d: %d bytes back, err %v", i, len(got), err)
		}
	}
}
