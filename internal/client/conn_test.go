package client_test

import (
	"context"
	"testing"
	"time"

	"goinfer/internal/client"
	"goinfer/internal/server/servertest"
)

// TestConnectionOptions sends requests over connections with busy-polling
// reads and set socket buffers, with each protocol, and checks the answers
// and the lean HTTP client's send and wait times.
func TestConnectionOptions(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	x := images(2, 16, 40)
	want := s.Expected(t, x.Float32s(), 2)
	for _, opts := range []client.Options{
		{},
		{BusyPoll: 500 * time.Microsecond},
		{SocketBuffer: 1 << 20},
		{BusyPoll: 2 * time.Millisecond, SocketBuffer: 4 << 20},
	} {
		for proto, url := range urls(s) {
			c := dial(t, url, opts)
			const n = 3
			for range n {
				got, err := c.Infer(context.Background(), x, nil)
				if err != nil {
					t.Fatalf("%s %+v: %v", proto, opts, err)
				}
				if e := servertest.RelErr(got, want); e > 1e-3 {
					t.Fatalf("%s %+v: logits off by %g", proto, opts, e)
				}
			}
			st := c.Stats()
			if timed := st.Send > 0 && st.Wait > 0; timed != (proto == "http") {
				t.Errorf("%s %+v: send %v, wait %v; want both > 0 for the lean HTTP client only", proto, opts, st.Send, st.Wait)
			}
		}
	}
}
