package cuda

import (
	"runtime"
	"testing"
)

// noopPTX is a kernel that does nothing, so that a launch's cost is the
// host's and the driver's alone.
const noopPTX = `.version 7.0
.target sm_80
.address_size 64
.visible .entry noop(.param .u64 p)
{
	ret;
}
`

// callBench holds what the call-cost benchmarks share: an idle stream, a
// no-op kernel, a pinned buffer of a batch-1 224x224 FP32 image and its
// device copy.
type callBench struct {
	libs   *Libs
	stream Stream
	noop   Function
	args   KernelArgs
	pinned []byte
	dev    DevPtr
}

func newCallBench(b *testing.B) *callBench {
	b.Helper()
	libs, err := Load()
	if err != nil || libs.Runtime == nil || libs.Driver == nil {
		b.Skipf("needs a GPU and the CUDA runtime and driver: %v", err)
	}
	if n, err := libs.Runtime.DeviceCount(); err != nil || n == 0 {
		b.Skipf("needs a GPU: %d devices (%v)", n, err)
	}
	runtime.LockOSThread()
	b.Cleanup(runtime.UnlockOSThread)
	r := libs.Runtime
	if err := r.SetDevice(0); err != nil {
		b.Fatal(err)
	}
	c := &callBench{libs: libs}
	if c.stream, err = r.StreamCreate(); err != nil {
		b.Fatal(err)
	}
	m, err := libs.Driver.ModuleLoad([]byte(noopPTX))
	if err != nil {
		b.Fatal(err)
	}
	if c.noop, err = libs.Driver.ModuleFunction(m, "noop"); err != nil {
		b.Fatal(err)
	}
	const imageBytes = 3 * 224 * 224 * 4
	if c.pinned, err = r.HostAlloc(imageBytes); err != nil {
		b.Fatal(err)
	}
	if c.dev, err = r.Malloc(imageBytes); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		r.Free(c.dev)
		r.FreeHost(c.pinned)
		r.StreamDestroy(c.stream)
		libs.Driver.ModuleUnload(m)
	})
	return c
}

func (c *callBench) launch(b *testing.B) {
	if err := c.libs.Driver.Launch(c.noop, 1, 32, c.stream, c.args.Reset().Ptr(c.dev)); err != nil {
		b.Fatal(err)
	}
}

func (c *callBench) sync(b *testing.B) {
	if err := c.libs.Runtime.StreamSynchronize(c.stream); err != nil {
		b.Fatal(err)
	}
}

// graph captures n no-op launches as one CUDA graph.
func (c *callBench) graph(b *testing.B, n int) GraphExec {
	r := c.libs.Runtime
	if err := r.StreamBeginCapture(c.stream, 0); err != nil {
		b.Fatal(err)
	}
	for range n {
		c.launch(b)
	}
	g, err := r.StreamEndCapture(c.stream)
	if err != nil {
		b.Fatal(err)
	}
	e, err := r.GraphInstantiate(g)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.GraphExecDestroy(e); r.GraphDestroy(g) })
	return e
}

// BenchmarkCallCost times the CUDA calls on a batch-1 request's path, one
// at a time, from Go through purego, so that a latency breakdown can tell
// the driver's cost from the device's (compare tools/latency/callcost.cu,
// the same calls from C). Enqueue-only cases synchronize every 64 calls,
// outside the timer's concern: the queue never fills.
func BenchmarkCallCost(b *testing.B) {
	cases := []struct {
		name string
		run  func(b *testing.B, c *callBench, i int)
	}{
		{"SetDevice", func(b *testing.B, c *callBench, i int) {
			if err := c.libs.Runtime.SetDevice(0); err != nil {
				b.Fatal(err)
			}
		}},
		{"Launch", func(b *testing.B, c *callBench, i int) {
			c.launch(b)
			if i%64 == 63 {
				c.sync(b)
			}
		}},
		{"LaunchSync", func(b *testing.B, c *callBench, i int) { c.launch(b); c.sync(b) }},
		{"H2D602KB", func(b *testing.B, c *callBench, i int) {
			if err := c.libs.Runtime.MemcpyHtoDAsync(c.dev, c.pinned, c.stream); err != nil {
				b.Fatal(err)
			}
			if i%64 == 63 {
				c.sync(b)
			}
		}},
		{"H2D602KBSync", func(b *testing.B, c *callBench, i int) {
			if err := c.libs.Runtime.MemcpyHtoDAsync(c.dev, c.pinned, c.stream); err != nil {
				b.Fatal(err)
			}
			c.sync(b)
		}},
		{"D2H4KBSync", func(b *testing.B, c *callBench, i int) {
			if err := c.libs.Runtime.MemcpyDtoHAsync(c.pinned[:4000], c.dev, c.stream); err != nil {
				b.Fatal(err)
			}
			c.sync(b)
		}},
		{"StreamSyncIdle", func(b *testing.B, c *callBench, i int) { c.sync(b) }},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			c := newCallBench(b)
			b.ResetTimer()
			for i := range b.N {
				tc.run(b, c, i)
			}
			b.StopTimer()
			c.sync(b)
		})
	}
	for _, name := range []string{"EventRecord", "EventRecordSync"} {
		b.Run(name, func(b *testing.B) {
			c := newCallBench(b)
			r := c.libs.Runtime
			e, err := r.EventCreate(false)
			if err != nil {
				b.Fatal(err)
			}
			defer r.EventDestroy(e)
			b.ResetTimer()
			for i := range b.N {
				if err := r.EventRecord(e, c.stream); err != nil {
					b.Fatal(err)
				}
				if name == "EventRecordSync" {
					if err := r.EventSynchronize(e); err != nil {
						b.Fatal(err)
					}
				} else if i%64 == 63 {
					c.sync(b)
				}
			}
		})
	}
	for _, n := range []int{1, 30} {
		for _, sync := range []bool{false, true} {
			name := "GraphLaunch" + map[int]string{1: "1", 30: "30"}[n]
			if sync {
				name += "Sync"
			}
			b.Run(name, func(b *testing.B) {
				c := newCallBench(b)
				e := c.graph(b, n)
				r := c.libs.Runtime
				b.ResetTimer()
				for i := range b.N {
					if err := r.GraphLaunch(e, c.stream); err != nil {
						b.Fatal(err)
					}
					if sync || i%64 == 63 {
						c.sync(b)
					}
				}
			})
		}
	}
}
