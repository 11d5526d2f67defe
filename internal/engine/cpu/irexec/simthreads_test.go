package irexec

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"goinfer/internal/engine/cpu/parallel"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// TestSimThreads shows how each step of full-size torchvision architectures
// splits across many threads, on a machine with fewer cores: the plan is
// compiled for IREXEC_SIM_THREADS (default 16) threads and run on a
// parallel.Recorder, which times every task of every parallel loop on one
// core; each loop's makespan on that many workers (dynamic scheduling, no
// hand-off cost) then gives the step's parallel efficiency. It is a tool,
// not a check: it runs only with IREXEC_SIM=arch[,arch] set (an entry
// ending in .onnx is that file); IREXEC_BATCH (default 1), IREXEC_ITERS
// runs per step (default 15, per-step minima), IREXEC_SIM_ALL to list
// every step rather than those below 80% efficiency, IREXEC_SIM_LOOPS
// to detail each loop.
func TestSimThreads(t *testing.T) {
	archs := os.Getenv("IREXEC_SIM")
	if archs == "" {
		t.Skip("a planning tool: set IREXEC_SIM=resnet18,... to run it")
	}
	threads, batch := envInt("IREXEC_SIM_THREADS", 16), envInt("IREXEC_BATCH", 1)
	for _, arch := range strings.Split(archs, ",") {
		g, err := profileGraph(arch)
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := ir.Optimize(g, batch)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Compile(context.Background(), b, Options{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		var runs [][]time.Duration
		rec := parallel.NewRecorder(threads, func(ts []time.Duration) {
			runs = append(runs, append([]time.Duration(nil), ts...))
		})
		x, err := p.NewExecShared(rec, NewArena(p.ArenaBytes()))
		if err != nil {
			t.Fatal(err)
		}
		in := tensor.New(tensor.Float32, p.vals[p.inputs[0]].shape...)
		if _, err := x.RunTensors(context.Background(), []*tensor.Tensor{in}); err != nil {
			t.Fatal(err)
		}
		// Per step, the minimum over runs of: its whole time on one core,
		// the serial part outside parallel loops, the loops' work and
		// their makespans on threads workers.
		type stat struct {
			whole, work, span time.Duration
			loops, tasks      int
			detail            string // per loop: tasks, work and makespan
		}
		stats := make([]stat, len(p.steps))
		for it := range profileIters() {
			for i, s := range p.steps {
				runs = runs[:0]
				t0 := time.Now()
				if err := s.s.run(x); err != nil {
					t.Fatal(err)
				}
				whole := time.Since(t0)
				var work, span time.Duration
				tasks := 0
				detail := ""
				for _, r := range runs {
					var w time.Duration
					for _, d := range r {
						w += d
					}
					m := parallel.Makespan(r, threads)
					detail += fmt.Sprintf(" [%d tasks %.0f/%.0f us]", len(r), us(w), us(m))
					if os.Getenv("IREXEC_SIM_TASKS") != "" {
						detail += fmt.Sprint(r)
					}
					work += w
					span += m
					tasks += len(r)
				}
				st := &stats[i]
				if it == 0 || whole < st.whole {
					st.whole, st.work, st.span, st.loops, st.tasks, st.detail = whole, work, span, len(runs), tasks, detail
				}
			}
		}
		var whole, par, loops time.Duration
		nloops := 0
		fmt.Printf("%s bs%d, %d threads (efficiency = loop work / (threads x makespan)):\n", arch, batch, threads)
		for i, s := range p.steps {
			st := stats[i]
			serial := max(st.whole-st.work, 0)
			est := serial + st.span
			whole += st.whole
			par += est
			loops += st.span
			nloops += st.loops
			eff := 1.0
			if st.span > 0 {
				eff = float64(st.work) / float64(threads) / float64(st.span)
			}
			if os.Getenv("IREXEC_SIM_ALL") != "" || eff < 0.8 && st.whole > 20*time.Microsecond {
				fmt.Printf("  %3d %-58.58s %7.1f us 1t, %6.1f us %dt, %2d loops %4d tasks, eff %3.0f%%, serial %5.1f us\n",
					i, stepKind(s), us(st.whole), us(est), threads, st.loops, st.tasks, 100*eff, us(serial))
				if os.Getenv("IREXEC_SIM_LOOPS") != "" {
					fmt.Printf("       loops (tasks work/makespan):%s\n", st.detail)
				}
			}
		}
		fmt.Printf("  total: %.2f ms on 1 core; %.2f ms on %d workers without hand-off cost (%.1fx), %d parallel loops\n",
			us(whole)/1e3, us(par)/1e3, threads, float64(whole)/float64(par), nloops)
		x.Close()
		rec.Close()
	}
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
