package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/grpc/codes"

	"goinfer/internal/backend"
	"goinfer/internal/client"
	"goinfer/internal/engine"
	"goinfer/internal/server"
	"goinfer/internal/server/servertest"
	"goinfer/internal/shm"
	"goinfer/internal/tensor"
)

func allowSHM(c *server.Config) { c.AllowSharedMemory = true }

// shmObjects lists this process's client objects in /dev/shm, by key.
func shmObjects(t *testing.T) map[string]int64 {
	t.Helper()
	paths, err := filepath.Glob(fmt.Sprintf("/dev/shm/goinfer-%d-*", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]int64{}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		objs["/"+filepath.Base(p)] = st.Size()
	}
	return objs
}

func needSHM(t *testing.T) {
	t.Helper()
	if !shm.Supported() {
		t.Skip("system shared memory needs Linux")
	}
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skipf("no /dev/shm on this machine: %v", err)
	}
}

// checkNoObjects fails the test if a client object is left in /dev/shm.
func checkNoObjects(t *testing.T, when string) {
	t.Helper()
	if objs := shmObjects(t); len(objs) > 0 {
		t.Errorf("%s: shared memory objects left in /dev/shm: %v", when, objs)
	}
}

func regionsOf(t *testing.T, c *client.Client) []client.SharedMemoryRegion {
	t.Helper()
	rs, err := c.SharedMemoryStatus(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestSharedMemoryMatchesSocket runs the same inputs through shared memory
// and through the socket: the logits are the same, the client keeps one
// object per request in flight (grown for a bigger batch, reused after),
// and Close leaves nothing behind on either side.
func TestSharedMemoryMatchesSocket(t *testing.T) {
	needSHM(t)
	s := servertest.Start(t, servertest.Options{Server: allowSHM})
	x1, x3 := images(1, 16, 11), images(3, 16, 12)
	for proto, url := range urls(s) {
		t.Run(proto, func(t *testing.T) {
			sock := dial(t, url, client.Options{})
			c, err := client.DialOptions(context.Background(), url, client.Options{SharedMemory: true})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i, tc := range []struct {
				in       *tensor.Tensor
				wantSize int64 // of the one object, rounded up to pages
			}{
				{x1, pageUp(64*((len(x1.Data)+63)/64) + 4*10)},
				{x3, pageUp(64*((len(x3.Data)+63)/64) + 4*30)}, // grown
				{x1, pageUp(64*((len(x3.Data)+63)/64) + 4*30)}, // the big one reused
			} {
				n := tc.in.Shape[0]
				out := make([]float32, 10*n)
				got, err := c.Infer(context.Background(), tc.in, out)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if &got[0] != &out[0] {
					t.Error("logits were not written into the caller's buffer")
				}
				want, err := sock.Infer(context.Background(), tc.in, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("request %d: shared memory logits %v differ from the socket's %v", i, got, want)
				}
				if e := servertest.RelErr(got, s.Expected(t, tc.in.Float32s(), n)); e > 1e-3 {
					t.Fatalf("request %d: logits differ from the reference by %.2g", i, e)
				}
				objs := shmObjects(t)
				regions := regionsOf(t, c)
				if len(objs) != 1 || len(regions) != 1 {
					t.Fatalf("request %d: objects %v, server regions %+v; want one of each", i, objs, regions)
				}
				r := regions[0]
				if size, ok := objs[r.Key]; !ok || size != tc.wantSize || r.ByteSize != uint64(size) || r.Offset != 0 ||
					!strings.HasPrefix(r.Name, fmt.Sprintf("goinfer_%d_", os.Getpid())) {
					t.Fatalf("request %d: region %+v over objects %v; want one object of %d bytes", i, r, objs, tc.wantSize)
				}
			}
			// Nothing came back through the socket: a response carrying the
			// logits is an error on this path.
			if st := c.Stats(); st.Requests != 3 || st.Errors != 0 || st.Images != 5 {
				t.Errorf("stats %+v", st)
			}
			if err := c.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			checkNoObjects(t, "after Close")
			if rs := regionsOf(t, sock); len(rs) != 0 {
				t.Errorf("regions still registered after Close: %+v", rs)
			}
			if _, err := c.Infer(context.Background(), x1, nil); !errors.Is(err, backend.ErrClosed) {
				t.Errorf("Infer after Close: %v, want ErrClosed", err)
			}
		})
	}
}

func pageUp(n int) int64 {
	p := os.Getpagesize()
	return int64((n + p - 1) / p * p)
}

// TestSharedMemorySubmitConcurrent keeps many requests in flight through
// Submit: each gets its own logits back, the server batching them, and
// the client makes no more objects than requests in flight.
func TestSharedMemorySubmitConcurrent(t *testing.T) {
	needSHM(t)
	s := servertest.Start(t, servertest.Options{Server: allowSHM, MaxBatch: 4, MaxDelay: 10 * time.Millisecond, MaxQueue: 64})
	const n, inflight = 24, 6
	inputs := make([]*tensor.Tensor, n)
	wants := make([][]float64, n)
	for i := range inputs {
		inputs[i] = images(1, 16, uint64(200+i))
		wants[i] = s.Expected(t, inputs[i].Float32s(), 1)
	}
	for proto, url := range urls(s) {
		t.Run(proto, func(t *testing.T) {
			c := dial(t, url, client.Options{SharedMemory: true, MaxInflight: inflight})
			reply := make(chan backend.Response, n)
			for i, in := range inputs {
				if err := c.Submit(backend.Request{ID: uint64(i), Input: in, SentAt: time.Now(), Reply: reply, Output: make([]float32, 10)}); err != nil {
					t.Fatal(err)
				}
			}
			for range n {
				r := <-reply
				if r.Err != nil {
					t.Fatalf("request %d: %v", r.ID, r.Err)
				}
				if r.N != 1 || r.Classes != 10 {
					t.Fatalf("response %+v", r)
				}
				if e := servertest.RelErr(r.Logits, wants[r.ID]); e > 1e-3 {
					t.Fatalf("request %d got other logits (error %.2g)", r.ID, e)
				}
			}
			if objs := shmObjects(t); len(objs) < 1 || len(objs) > inflight {
				t.Errorf("%d objects for at most %d requests in flight: %v", len(objs), inflight, objs)
			}
			if st := c.Stats(); st.Requests != n || st.Errors != 0 {
				t.Errorf("stats %+v", st)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			checkNoObjects(t, "after Close")
		})
	}
}

// TestSharedMemoryRefused talks to a server that does not allow shared
// memory: the request fails with the server's reason, and the object made
// for it is gone at once, not only at Close.
func TestSharedMemoryRefused(t *testing.T) {
	needSHM(t)
	s := servertest.Start(t, servertest.Options{})
	for proto, url := range urls(s) {
		t.Run(proto, func(t *testing.T) {
			c := dial(t, url, client.Options{SharedMemory: true})
			for range 2 {
				_, err := c.Infer(context.Background(), images(1, 16, 3), nil)
				var se *client.ServerError
				if !errors.As(err, &se) || se.Code != codes.InvalidArgument || !strings.Contains(err.Error(), "--allow_shared_memory") {
					t.Fatalf("Infer: %v; want the server's InvalidArgument naming --allow_shared_memory", err)
				}
				checkNoObjects(t, "after the refused register")
			}
			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
}

// TestSharedMemoryAbandonedRequest cancels a request the server holds: its
// object is not reused (the server may still write the abandoned logits
// there) but removed and unregistered, and the next request gets a new one.
func TestSharedMemoryAbandonedRequest(t *testing.T) {
	needSHM(t)
	s := servertest.Start(t, servertest.Options{Server: allowSHM, Gated: true})
	x := images(1, 16, 21)
	want := s.Expected(t, x.Float32s(), 1)
	for proto, url := range urls(s) {
		t.Run(proto, func(t *testing.T) {
			c := dial(t, url, client.Options{SharedMemory: true})
			if _, err := c.Metadata(context.Background()); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			held := s.Gate.Held()
			go func() {
				_, err := c.Infer(ctx, x, nil)
				errc <- err
			}()
			s.Gate.WaitHeld(t, held+1)
			first := shmObjects(t)
			if len(first) != 1 {
				t.Fatalf("objects while the request is held: %v", first)
			}
			cancel()
			if err := <-errc; err == nil {
				t.Fatal("the cancelled request succeeded")
			}
			checkNoObjects(t, "after the cancelled request")
			if rs := regionsOf(t, c); len(rs) != 0 {
				t.Errorf("regions registered after the cancelled request: %+v", rs)
			}
			s.Gate.Release(2) // the abandoned batch and the next one
			got, err := c.Infer(context.Background(), x, nil)
			if err != nil {
				t.Fatal(err)
			}
			if e := servertest.RelErr(got, want); e > 1e-3 {
				t.Fatalf("logits after the abandoned request differ from the reference by %.2g", e)
			}
			objs := shmObjects(t)
			for k := range objs {
				if _, ok := first[k]; ok || len(objs) != 1 {
					t.Fatalf("objects %v after the abandoned request's %v; want one new one", objs, first)
				}
			}
		})
	}
}

// BenchmarkRoundTrip sends batch-1 250x250 FP32 requests (the reference's
// 750 KB tensors) one at a time: through the messages, through shared
// memory copied into a slot, and through shared memory in place (the
// input generated in a buffer from AllocShared). overhead-us/op is the
// latency less the server's queue and compute time: what moving the
// tensors and the protocol cost.
func BenchmarkRoundTrip(b *testing.B) {
	if !shm.Supported() {
		b.Skip("system shared memory needs Linux")
	}
	s := servertest.Start(b, servertest.Options{Server: allowSHM, Size: 250, MaxBatch: 1})
	x := images(1, 250, 1)
	out := make([]float32, 10)
	for proto, url := range urls(s) {
		for _, mode := range []string{"", "+shm", "+shm-inplace"} {
			b.Run(proto+mode, func(b *testing.B) {
				c, err := client.DialOptions(context.Background(), url, client.Options{SharedMemory: mode != "", Conns: 1})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				in := x
				if mode == "+shm-inplace" {
					buf, err := c.AllocShared(len(x.Data))
					if err != nil {
						b.Fatal(err)
					}
					defer buf.Free()
					copy(buf.Bytes(), x.Data)
					in = &tensor.Tensor{DType: x.DType, Shape: x.Shape, Data: buf.Bytes()}
				}
				if _, err := c.Infer(context.Background(), in, out); err != nil {
					b.Fatal(err)
				}
				st0 := c.Stats()
				b.ReportAllocs()
				start := time.Now()
				for b.Loop() {
					if _, err := c.Infer(context.Background(), in, out); err != nil {
						b.Fatal(err)
					}
				}
				elapsed := time.Since(start)
				st := c.Stats()
				n := st.Requests - st0.Requests
				server := st.ServerQueue + st.ServerCompute - st0.ServerQueue - st0.ServerCompute
				b.ReportMetric(float64((elapsed-server).Microseconds())/float64(n), "overhead-us/op")
			})
		}
	}
}

// sharedTensor places a copy of x in buf at byte offset off.
func sharedTensor(t *testing.T, buf engine.HostBuffer, off int, x *tensor.Tensor) *tensor.Tensor {
	t.Helper()
	data := buf.Bytes()[off : off+len(x.Data)]
	copy(data, x.Data)
	return &tensor.Tensor{DType: x.DType, Shape: x.Shape.Clone(), Data: data}
}

// TestAllocSharedZeroCopy sends inputs that lie in buffers from
// AllocShared: the client copies none of them (the copy counter stays 0
// and the slot is only big enough for the logits), the logits are the
// socket's for the same bytes, data written into a buffer later is what
// the next request reads, and Free and Close leave nothing behind.
func TestAllocSharedZeroCopy(t *testing.T) {
	needSHM(t)
	s := servertest.Start(t, servertest.Options{Server: allowSHM})
	x2, y2 := images(2, 16, 31), images(2, 16, 32)
	x1, y1 := images(1, 16, 33), images(1, 16, 34)
	for proto, url := range urls(s) {
		t.Run(proto, func(t *testing.T) {
			sock := dial(t, url, client.Options{})
			c, err := client.DialOptions(context.Background(), url, client.Options{SharedMemory: true})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			whole, err := c.AllocShared(len(x2.Data))
			if err != nil {
				t.Fatal(err)
			}
			// Two batch-1 tensors side by side: the second at an offset.
			pair, err := c.AllocShared(2 * len(x1.Data))
			if err != nil {
				t.Fatal(err)
			}
			if len(whole.Bytes()) != len(x2.Data) || len(pair.Bytes()) != 2*len(x1.Data) {
				t.Fatalf("buffers of %d and %d bytes; asked for %d and %d", len(whole.Bytes()), len(pair.Bytes()), len(x2.Data), 2*len(x1.Data))
			}
			for i, tc := range []struct {
				name string
				buf  engine.HostBuffer
				off  int
				x    *tensor.Tensor
			}{
				{"whole buffer", whole, 0, x2},
				{"rewritten in place", whole, 0, y2},
				{"at offset 0", pair, 0, x1},
				{"at an offset", pair, len(x1.Data), y1},
			} {
				in := sharedTensor(t, tc.buf, tc.off, tc.x)
				got, err := c.Infer(context.Background(), in, nil)
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				want, err := sock.Infer(context.Background(), tc.x, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%s: logits %v; the socket's for the same input %v", tc.name, got, want)
				}
				if st := c.Stats(); st.InputCopies != 0 || st.Requests != int64(i+1) {
					t.Fatalf("%s: stats %+v; want no input copied", tc.name, st)
				}
			}
			// Three objects: the two buffers, and one slot of a page: a
			// copy of the 6144-byte batch of two would have needed more.
			objs := shmObjects(t)
			if len(objs) != 3 {
				t.Fatalf("objects %v; want the two buffers and one slot", objs)
			}
			var slots int
			for _, size := range objs {
				if size == pageUp(4*20) && size < int64(len(x2.Data)) {
					slots++
				}
			}
			if slots != 1 {
				t.Errorf("objects %v; want one slot of %d bytes, for the logits only", objs, pageUp(4*20))
			}
			if rs := regionsOf(t, c); len(rs) != 3 {
				t.Errorf("regions %+v; want three", rs)
			}

			// A heap tensor still goes through a slot, copied.
			got, err := c.Infer(context.Background(), x1, nil)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := sock.Infer(context.Background(), x1, nil)
			if !slices.Equal(got, want) {
				t.Fatalf("copied input: logits %v, want %v", got, want)
			}
			if st := c.Stats(); st.InputCopies != 1 {
				t.Errorf("InputCopies %d after a heap input; want 1", st.InputCopies)
			}

			key := ""
			before := shmObjects(t)
			if err := pair.Free(); err != nil {
				t.Fatalf("Free: %v", err)
			}
			for k := range before {
				if _, ok := shmObjects(t)[k]; !ok {
					key = k
				}
			}
			if key == "" || len(shmObjects(t)) != len(before)-1 {
				t.Fatalf("objects %v after Free, %v before; want one gone", shmObjects(t), before)
			}
			for _, r := range regionsOf(t, c) {
				if r.Key == key {
					t.Errorf("region %+v still registered after Free", r)
				}
			}
			if err := pair.Free(); err != nil {
				t.Errorf("second Free: %v; want nil", err)
			}
			// Close frees the buffer still allocated.
			if err := c.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			checkNoObjects(t, "after Close")
			if rs := regionsOf(t, sock); len(rs) != 0 {
				t.Errorf("regions still registered after Close: %+v", rs)
			}
			if err := whole.Free(); err != nil {
				t.Errorf("Free after Close: %v; want nil", err)
			}
			if _, err := c.AllocShared(100); !errors.Is(err, backend.ErrClosed) {
				t.Errorf("AllocShared after Close: %v; want ErrClosed", err)
			}
		})
	}
}

// TestAllocSharedPartlyInside sends a tensor that starts in a shared buffer
// but runs past its end (into the padding of the mapping's last page): it
// is not the buffer's to name, so the client copies it, and the logits are
// those of the bytes it spans.
func TestAllocSharedPartlyInside(t *testing.T) {
	needSHM(t)
	s := servertest.Start(t, servertest.Options{Server: allowSHM})
	x := images(1, 16, 41)
	for proto, url := range urls(s) {
		t.Run(proto, func(t *testing.T) {
			sock := dial(t, url, client.Options{})
			c := dial(t, url, client.Options{SharedMemory: true})
			n := len(x.Data) + 100 // 3172 bytes of a 4096-byte mapping
			if pageUp(n) < int64(n+200) {
				t.Skipf("page size %d leaves no padding past a %d-byte buffer", os.Getpagesize(), n)
			}
			buf, err := c.AllocShared(n)
			if err != nil {
				t.Fatal(err)
			}
			b := buf.Bytes()
			copy(b[200:], x.Data)
			// b[200:n+200]: the last 200 bytes lie past the buffer, in
			// mapped (zero) padding.
			data := unsafe.Slice(&b[200], len(x.Data))
			in := &tensor.Tensor{DType: x.DType, Shape: x.Shape.Clone(), Data: data}
			heap := &tensor.Tensor{DType: x.DType, Shape: x.Shape.Clone(), Data: slices.Clone(data)}
			got, err := c.Infer(context.Background(), in, nil)
			if err != nil {
				t.Fatal(err)
			}
			want, err := sock.Infer(context.Background(), heap, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("logits %v; want %v", got, want)
			}
			if st := c.Stats(); st.InputCopies != 1 {
				t.Errorf("InputCopies %d; want the straddling input copied once", st.InputCopies)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			checkNoObjects(t, "after Close")
		})
	}
}

// TestAllocSharedErrors covers AllocShared's refusals: without
// Options.SharedMemory, a bad size, and a server that does not allow
// shared memory (whose reason comes back, with no object left behind).
func TestAllocSharedErrors(t *testing.T) {
	needSHM(t)
	s := servertest.Start(t, servertest.Options{})
	url := "grpc://" + s.GRPCAddr
	plain := dial(t, url, client.Options{})
	if _, err := plain.AllocShared(4096); err == nil || !strings.Contains(err.Error(), "Options.SharedMemory") {
		t.Errorf("AllocShared without shared memory: %v", err)
	}
	c := dial(t, url, client.Options{SharedMemory: true})
	for _, n := range []int{0, -1} {
		if _, err := c.AllocShared(n); err == nil || !strings.Contains(err.Error(), "positive") {
			t.Errorf("AllocShared(%d): %v", n, err)
		}
	}
	_, err := c.AllocShared(4096)
	var se *client.ServerError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "--allow_shared_memory") {
		t.Errorf("AllocShared against a server without shared memory: %v", err)
	}
	checkNoObjects(t, "after the refused register")
}

// TestAllocSharedSubmitConcurrent keeps requests in flight over a few
// shared buffers while another buffer is allocated and freed over and
// over: every request reads its own buffer, none is copied.
func TestAllocSharedSubmitConcurrent(t *testing.T) {
	needSHM(t)
	s := servertest.Start(t, servertest.Options{Server: allowSHM, MaxBatch: 4, MaxDelay: 5 * time.Millisecond, MaxQueue: 64})
	const bufs, n = 4, 24
	xs := make([]*tensor.Tensor, bufs)
	wants := make([][]float64, bufs)
	for i := range xs {
		xs[i] = images(1, 16, uint64(300+i))
		wants[i] = s.Expected(t, xs[i].Float32s(), 1)
	}
	for proto, url := range urls(s) {
		t.Run(proto, func(t *testing.T) {
			c := dial(t, url, client.Options{SharedMemory: true, MaxInflight: 8})
			ins := make([]*tensor.Tensor, bufs)
			for i, x := range xs {
				buf, err := c.AllocShared(len(x.Data))
				if err != nil {
					t.Fatal(err)
				}
				ins[i] = sharedTensor(t, buf, 0, x)
			}
			stop := make(chan struct{})
			churned := make(chan error, 1)
			go func() {
				for {
					select {
					case <-stop:
						churned <- nil
						return
					default:
					}
					b, err := c.AllocShared(1000)
					if err == nil {
						err = b.Free()
					}
					if err != nil {
						churned <- err
						return
					}
				}
			}()
			reply := make(chan backend.Response, n)
			for i := range n {
				if err := c.Submit(backend.Request{ID: uint64(i), Input: ins[i%bufs], SentAt: time.Now(), Reply: reply}); err != nil {
					t.Fatal(err)
				}
			}
			for range n {
				r := <-reply
				if r.Err != nil {
					t.Fatalf("request %d: %v", r.ID, r.Err)
				}
				if e := servertest.RelErr(r.Logits, wants[r.ID%bufs]); e > 1e-3 {
					t.Fatalf("request %d got other logits (error %.2g)", r.ID, e)
				}
			}
			close(stop)
			if err := <-churned; err != nil {
				t.Fatalf("allocating and freeing meanwhile: %v", err)
			}
			if st := c.Stats(); st.InputCopies != 0 || st.Errors != 0 {
				t.Errorf("stats %+v; want no input copied", st)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			checkNoObjects(t, "after Close")
		})
	}
}
