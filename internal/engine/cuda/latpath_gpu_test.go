package cuda

import (
	"context"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
	"goinfer/internal/tensor"
)

// BenchmarkBatch1Path times one batch-1 request's device path, from its
// input being in page-locked host memory to its logits being there, in
// the ways the calls can be arranged (issue #16: the server's part of a
// request's latency). Set GOINFER_R18_CHECKPOINT to a torchvision
// ResNet-18 checkpoint; it runs compiled, fp16, 224x224. Each way reports
// its p50 and p90 in microseconds over b.N requests, spaced as a
// one-in-flight client spaces them, and must give the same logits as the
// first.
func BenchmarkBatch1Path(b *testing.B) {
	path := os.Getenv("GOINFER_R18_CHECKPOINT")
	if path == "" {
		b.Skip("set GOINFER_R18_CHECKPOINT to a torchvision ResNet-18 checkpoint")
	}
	if err := cu.Usable(); err != nil {
		b.Skipf("no CUDA GPU/libraries: %v", err)
	}
	ctx := context.Background()
	m, err := Engine{}.Load(ctx, loadGraph(b, path), engine.Options{Compile: true, Precision: engine.FP16, MaxBatch: 1, Height: 224, Width: 224})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	ei, err := m.NewInstance(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer ei.Close()
	i := ei.(*instance)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rt, drv, st := i.d.rt, i.drv, i.stream
	if err := rt.SetDevice(i.d.ordinal); err != nil {
		b.Fatal(err)
	}
	p := i.plans[1]
	if p == nil || p.exec == 0 {
		b.Fatal("no captured plan for batch 1")
	}
	classes := m.Info().OutputElems()
	hin := must[[]byte](b)(rt.HostAlloc(i.inBytes))
	hout := must[[]byte](b)(rt.HostAlloc(classes * 4))
	flag := must[[]byte](b)(rt.HostAlloc(64))
	devIn := must[cu.DevPtr](b)(rt.Malloc(int64(i.inBytes)))
	devOut := must[cu.DevPtr](b)(rt.Malloc(int64(classes * 4)))
	ev := must[cu.Event](b)(rt.EventCreate(false))
	evq := must[cu.Event](b)(rt.EventCreate(false))
	defer func() {
		rt.FreeHost(hin)
		rt.FreeHost(hout)
		rt.FreeHost(flag)
		rt.Free(devIn)
		rt.Free(devOut)
		rt.EventDestroy(ev)
		rt.EventDestroy(evq)
	}()
	x := tensor.BytesF32(hin)
	r := rand.New(rand.NewPCG(1, 2))
	for k := range x {
		x[k] = float32(r.NormFloat64())
	}
	hostPtr := func(b []byte) cu.DevPtr { return cu.DevPtr(uintptr(unsafe.Pointer(&b[0]))) }
	ck := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	// capture records enqueue as one graph.
	capture := func(enqueue func()) cu.GraphExec {
		ck(rt.StreamBeginCapture(st, cu.CaptureModeThreadLocal))
		enqueue()
		g, err := rt.StreamEndCapture(st)
		ck(err)
		e, err := rt.GraphInstantiate(g)
		ck(err)
		ck(rt.GraphUpload(e, st))
		ck(rt.StreamSynchronize(st))
		return e
	}
	whole := capture(func() {
		ck(rt.MemcpyHtoDAsync(devIn, hin, st))
		ck(i.enqueueInput(devIn, 1))
		ck(i.runOps(p))
		ck(i.enqueueLogits(devOut, 1))
		ck(rt.MemcpyDtoHAsync(hout, devOut, st))
	})
	zeroCopy := capture(func() {
		ck(i.enqueueInput(hostPtr(hin), 1))
		ck(i.runOps(p))
		ck(i.enqueueLogits(hostPtr(hout), 1))
	})
	wait := func() { ck(rt.EventRecord(ev, st)); ck(rt.EventSynchronize(ev)) }
	var seq uint32
	flagWord := (*uint32)(unsafe.Pointer(&flag[0]))
	type way struct {
		name    string
		arm     func() // untimed: what can be enqueued before the input is in
		run     func()
		needOps bool
	}
	// calls is the path as separate calls; flush adds a query after the
	// graph launch, in case the driver defers submitting it.
	calls := func(flush bool) {
		ck(rt.MemcpyHtoDAsync(devIn, hin, st))
		ck(i.enqueueInput(devIn, 1))
		ck(rt.GraphLaunch(p.exec, st))
		if flush {
			ck(rt.EventRecord(evq, st))
			rt.EventQuery(evq)
		}
		ck(i.enqueueLogits(devOut, 1))
		ck(rt.MemcpyDtoHAsync(hout, devOut, st))
		wait()
	}
	// armed enqueues exec behind a wait on the host flag before the input
	// is in; the timed part is the flag's store and the wait for the
	// device (EventSynchronize, or a spin on EventQuery).
	armed := func(name string, exec cu.GraphExec, spin bool) way {
		return way{name: name, needOps: true, arm: func() {
			seq++
			ck(drv.StreamWaitValue32(st, hostPtr(flag), seq, cu.WaitValueGEQ))
			ck(rt.GraphLaunch(exec, st))
			ck(rt.EventRecord(ev, st))
		}, run: func() {
			atomic.StoreUint32(flagWord, seq)
			for spin {
				done, err := rt.EventQuery(ev)
				ck(err)
				if done {
					return
				}
			}
			ck(rt.EventSynchronize(ev))
		}}
	}
	ways := []way{
		{name: "calls", run: func() { calls(false) }}, // today's inline path
		{name: "calls-flush", run: func() { calls(true) }},
		{name: "zero-copy-calls", run: func() {
			ck(i.enqueueInput(hostPtr(hin), 1))
			ck(rt.GraphLaunch(p.exec, st))
			ck(i.enqueueLogits(hostPtr(hout), 1))
			wait()
		}},
		{name: "one-graph", run: func() { ck(rt.GraphLaunch(whole, st)); wait() }},
		{name: "one-graph-zero-copy", run: func() { ck(rt.GraphLaunch(zeroCopy, st)); wait() }},
		armed("armed-one-graph", whole, false),
		armed("armed-zero-copy", zeroCopy, false),
		armed("armed-zero-copy-spin", zeroCopy, true),
	}
	var ref []float32
	for _, w := range ways {
		b.Run(w.name, func(b *testing.B) {
			if w.needOps && !drv.HasStreamMemOps() {
				b.Skip("the driver has no stream memory operations")
			}
			lat := make([]float64, 0, b.N)
			for range b.N {
				clear(hout)
				if w.arm != nil {
					w.arm()
				}
				// The client's spacing: the device idles between requests.
				for t0 := time.Now(); time.Since(t0) < 150*time.Microsecond; {
				}
				t0 := time.Now()
				w.run()
				lat = append(lat, float64(time.Since(t0).Nanoseconds())/1e3)
			}
			got := slices.Clone(tensor.BytesF32(hout))
			if ref == nil {
				ref = got
			} else if e := relErr(got, ref); e > 1e-6 {
				b.Errorf("logits differ from the first way's by %.2e", e)
			}
			slices.Sort(lat)
			b.ReportMetric(lat[len(lat)/2], "p50-us")
			b.ReportMetric(lat[len(lat)*9/10], "p90-us")
		})
	}
}

// must returns a function that fails b on an error and passes the value
// on.
func must[T any](b *testing.B) func(T, error) T {
	return func(v T, err error) T {
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
}
