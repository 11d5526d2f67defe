package backend

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"goinfer/internal/checkpoint"
	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
	"goinfer/internal/engine/cuda"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
)

// BenchmarkIdleRequestGPU is BenchmarkIdleRequest on a GPU with a real
// model: a lone batch-1 request, pinned, inline, as the server submits a
// one-in-flight client's request (issue #16). Set GOINFER_R18_CHECKPOINT to
// a torchvision ResNet-18 checkpoint (compiled, fp16, 224x224, three
// workers as serve's default). It reports the p50 of the round trip and,
// with profile=true, the p50 of each step of the request's timeline, the
// device's spans included, in microseconds.
func BenchmarkIdleRequestGPU(b *testing.B) {
	path := os.Getenv("GOINFER_R18_CHECKPOINT")
	if path == "" {
		b.Skip("set GOINFER_R18_CHECKPOINT to a torchvision ResNet-18 checkpoint")
	}
	if err := cu.Usable(); err != nil {
		b.Skipf("no CUDA GPU/libraries: %v", err)
	}
	sd, err := checkpoint.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	g, err := model.FromStateDict(sd)
	sd.Close()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		profile bool
		fill    string
	}{{false, "none"}, {true, "none"}, {false, "memmove"}, {false, "socket"}, {true, "socket"}} {
		profile := c.profile
		b.Run(fmt.Sprintf("profile=%v/fill=%s", profile, c.fill), func(b *testing.B) {
			m, err := cuda.Engine{}.Load(ctx, g, engine.Options{Compile: true, Precision: engine.FP16, MaxBatch: 1, Height: 224, Width: 224})
			if err != nil {
				b.Fatal(err)
			}
			be := New(Config{NumWorkers: 3, CopyStreams: true, Profile: profile})
			if err := be.Start(ctx, loaderOf(m)); err != nil {
				b.Fatal(err)
			}
			defer be.Close(ctx)
			<-be.Ready()
			info := m.Info()
			hb, err := m.Device().AllocHost(info.InputBytes())
			if err != nil {
				b.Fatal(err)
			}
			defer hb.Free()
			in, err := tensor.FromBytes(tensor.Float32, tensor.Shape{1, 3, 224, 224}, hb.Bytes())
			if err != nil {
				b.Fatal(err)
			}
			x := tensor.BytesF32(hb.Bytes())
			r := rand.New(rand.NewPCG(1, 2))
			for k := range x {
				x[k] = float32(r.NormFloat64())
			}
			// fill puts the input in place before each request as the
			// server finds it: untouched since the last one, written by the
			// CPU, or read from a loopback TCP connection.
			fill := func() {}
			src := slices.Clone(hb.Bytes())
			switch c.fill {
			case "memmove":
				fill = func() { copy(hb.Bytes(), src) }
			case "socket":
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				defer ln.Close()
				go func() {
					conn, err := ln.Accept()
					if err != nil {
						return
					}
					defer conn.Close()
					one := make([]byte, 1)
					for {
						if _, err := io.ReadFull(conn, one); err != nil {
							return
						}
						if _, err := conn.Write(src); err != nil {
							return
						}
					}
				}()
				conn, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				fill = func() {
					if _, err := conn.Write([]byte{1}); err != nil {
						b.Fatal(err)
					}
					if _, err := io.ReadFull(conn, hb.Bytes()); err != nil {
						b.Fatal(err)
					}
				}
			}
			reply := make(chan Response, 1)
			out := make([]float32, info.OutputElems())
			steps := map[string][]float64{}
			add := func(name string, from, to time.Time) {
				if !from.IsZero() && !to.IsZero() {
					steps[name] = append(steps[name], float64(to.Sub(from).Nanoseconds())/1e3)
				}
			}
			for i := range b.N {
				for t0 := time.Now(); time.Since(t0) < 150*time.Microsecond; {
				}
				fill()
				t0 := time.Now()
				if err := be.Submit(Request{ID: uint64(i), Input: in, Reply: reply, Output: out, Inline: true, Pinned: true}); err != nil {
					b.Fatal(err)
				}
				res := <-reply
				t1 := time.Now()
				if res.Err != nil {
					b.Fatal(res.Err)
				}
				s := res.Stages
				add("round trip", t0, t1)
				add("submit>dequeued", t0, s.Dequeued)
				add("dequeued>staged", s.Dequeued, s.Staged)
				add("staged>worker_end", s.Staged, s.WorkerEnd)
				add("worker_end>reply_start", s.WorkerEnd, s.ReplyStart)
				add("reply_start>done", s.ReplyStart, res.DoneAt)
				add("done>received", res.DoneAt, t1)
				add("dequeued>gpu_h2d_start", s.Dequeued, s.GPUH2D.Start)
				add("gpu_h2d", s.GPUH2D.Start, s.GPUH2D.End)
				add("gpu_h2d_end>compute_start", s.GPUH2D.End, s.GPUCompute.Start)
				add("gpu_compute", s.GPUCompute.Start, s.GPUCompute.End)
				add("gpu_compute_end>d2h_start", s.GPUCompute.End, s.GPUD2H.Start)
				add("gpu_d2h", s.GPUD2H.Start, s.GPUD2H.End)
				add("gpu_d2h_end>done", s.GPUD2H.End, res.DoneAt)
			}
			b.StopTimer()
			if got := be.Stats()[0].Inline; got != uint64(b.N) {
				b.Errorf("%d of %d requests ran inline", got, b.N)
			}
			names := make([]string, 0, len(steps))
			for k := range steps {
				names = append(names, k)
			}
			slices.Sort(names)
			var sb strings.Builder
			for _, k := range names {
				v := steps[k]
				slices.Sort(v)
				fmt.Fprintf(&sb, "\n  %-28s p50 %7.1f us  p90 %7.1f us", k, v[len(v)/2], v[len(v)*9/10])
			}
			b.Logf("profile=%v fill=%s, %d requests:%s", profile, c.fill, b.N, sb.String())
			rt := steps["round trip"]
			b.ReportMetric(rt[len(rt)/2], "p50-us")
		})
	}
}
