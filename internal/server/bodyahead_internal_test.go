package server

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

func TestBodyAhead(t *testing.T) {
	const n = 1000
	data := make([]byte, n+10)
	for i := range data {
		data[i] = byte(i * 7)
	}
	broken := errors.New("connection reset")
	tests := []struct {
		name     string
		body     io.Reader
		want     int    // take's argument
		taken    bool   // take returns the buffer
		rest     []byte // what Read gives afterwards (all of the body if not taken)
		endsWith error  // Read's final error
	}{
		{"exact", bytes.NewReader(data[:n]), n, true, nil, io.EOF},
		{"extra bytes after", bytes.NewReader(data), n, true, data[n:], io.EOF},
		{"body short", bytes.NewReader(data[:n-10]), n, false, data[:n-10], io.EOF},
		{"other size wanted", bytes.NewReader(data), n - 1, false, data, io.EOF},
		{"error after 600 bytes", io.MultiReader(bytes.NewReader(data[:600]), iotest.ErrReader(broken)), n, false, data[:600], broken},
		{"error after all bytes", io.MultiReader(bytes.NewReader(data[:n]), iotest.ErrReader(broken)), n, true, nil, broken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := &requestPool{bufs: &bufPool{}}
			a := startBodyAhead(iotest.HalfReader(tt.body), n, pool)
			defer a.release()
			b := a.take(tt.want)
			if (b != nil) != tt.taken {
				t.Fatalf("take(%d) gave a buffer: %v, want %v", tt.want, b != nil, tt.taken)
			}
			if b != nil {
				if !bytes.Equal(*b, data[:n]) {
					t.Fatal("taken buffer holds other bytes than the body's first")
				}
				if a.take(tt.want) != nil {
					t.Fatal("second take gave the buffer again")
				}
				defer pool.Put(b)
			}
			got, err := io.ReadAll(iotest.OneByteReader(a))
			if tt.endsWith == io.EOF {
				if err != nil {
					t.Fatalf("Read ended with %v, want the end of the body", err)
				}
			} else if !errors.Is(err, tt.endsWith) {
				t.Fatalf("Read ended with %v, want %v", err, tt.endsWith)
			}
			if !bytes.Equal(got, tt.rest) {
				t.Fatalf("Read gave %d bytes, want %d", len(got), len(tt.rest))
			}
		})
	}
}

// TestBodyAheadReleaseWaits checks that release returns only once the
// early read has ended, so that a handler never returns while its body is
// being read, and that the unused buffer goes back to the pool.
func TestBodyAheadReleaseWaits(t *testing.T) {
	pr, pw := io.Pipe()
	pool := &requestPool{bufs: &bufPool{}}
	a := startBodyAhead(pr, 4096, pool)
	released := make(chan struct{})
	go func() { a.release(); close(released) }()
	pw.Write(make([]byte, 100))
	select {
	case <-released:
		t.Fatal("release returned while the body was still being read")
	default:
	}
	pw.CloseWithError(errors.New("client went away"))
	<-released
	if a.buf != nil {
		t.Fatal("release kept the buffer")
	}
}
