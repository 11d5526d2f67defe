package irexec

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"goinfer/internal/cputime"
	"goinfer/internal/engine/cpu/winograd"
	"goinfer/internal/ir"
	"goinfer/internal/onnx"
	"goinfer/internal/tensor"
	"goinfer/internal/torchvision"
)

// TestProfileArchs prints, per op kind, the time full-size torchvision
// architectures spend in each step (random weights, compiled). It is a
// tool, not a check: it runs only with IREXEC_PROFILE=arch[,arch] set, and
// IREXEC_WINOGRAD=off for direct 3x3 convolutions, IREXEC_BATCH (default 1) and IREXEC_THREADS (default GOMAXPROCS), IREXEC_SECONDS of whole
// forwards (default 2), IREXEC_NOSTEPS to skip the per-step profile, IREXEC_PROFILE_STEPS to list every step's minimum and mean, IREXEC_PROFILE_CONV to
// list GEMM convolutions by channels and map, IREXEC_SPLIT=chunk to time
// Split (chunks of that many images, one single-threaded Exec per thread;
// 0: the whole batch; unset: as the cpu engine chooses by default, with
// SplitPays and SplitChunk); an entry ending in .onnx is that file.
func TestProfileArchs(t *testing.T) {
	archs := os.Getenv("IREXEC_PROFILE")
	if archs == "" {
		t.Skip("a profiling tool: set IREXEC_PROFILE=mobilenet_v3_large,... to run it")
	}
	batch := envInt("IREXEC_BATCH", 1)
	for _, arch := range strings.Split(archs, ",") {
		g, err := profileGraph(arch)
		if err != nil {
			t.Fatal(err)
		}
		threads, _ := strconv.Atoi(os.Getenv("IREXEC_THREADS"))
		chunk, err := profileChunk(g, batch, threads)
		if err != nil {
			t.Fatal(err)
		}
		if chunk > 0 && batch > chunk && batch%chunk == 0 {
			profileSplit(t, arch, g, batch, chunk, threads)
			continue
		}
		b, _, err := ir.Optimize(g, batch)
		if err != nil {
			t.Fatal(err)
		}
		opts := Options{Threads: threads}
		if os.Getenv("IREXEC_WINOGRAD") == "off" {
			opts.Winograd = winograd.Off
		}
		p, err := Compile(context.Background(), b, opts)
		if err != nil {
			t.Fatal(err)
		}
		x := p.NewExec()
		in := tensor.New(tensor.Float32, p.vals[p.inputs[0]].shape...)
		outs, err := x.RunTensors(context.Background(), []*tensor.Tensor{in})
		if err != nil {
			t.Fatal(err)
		}
		// Whole forwards for about two seconds: the fastest is the figure
		// comparable across a loaded machine's runs.
		var bestRun, sum time.Duration
		runs := 0
		cpu0 := cputime.Process()
		ib, ob := [][]byte{in.Data}, [][]byte{outs[0].Data}
		secs, _ := strconv.ParseFloat(os.Getenv("IREXEC_SECONDS"), 64)
		for start := time.Now(); runs < 3 || time.Since(start).Seconds() < max(secs, 2); runs++ {
			t0 := time.Now()
			if err := x.Run(context.Background(), ib, ob); err != nil {
				t.Fatal(err)
			}
			d := time.Since(t0)
			sum += d
			if runs == 0 || d < bestRun {
				bestRun = d
			}
		}
		cpu := cputime.Process() - cpu0
		fmt.Printf("%s bs%d threads %d: best %.2f ms (%.1f img/s), mean %.2f ms over %d forwards, %.2f CPU-ms each\n", arch, batch, p.threads,
			float64(bestRun.Microseconds())/1e3, float64(batch)/bestRun.Seconds(), float64(sum.Microseconds())/1e3/float64(runs), runs,
			float64(cpu.Microseconds())/1e3/float64(runs))
		if os.Getenv("IREXEC_NOSTEPS") != "" {
			x.Close()
			continue
		}
		// Each step's fastest of several runs: the machine is shared, and
		// the minimum is what the step costs without interference.
		// The mean beside it shows what hand-offs and interference add.
		best := make([]time.Duration, len(p.steps))
		sums := make([]time.Duration, len(p.steps))
		iters := profileIters()
		for it := range iters {
			for i, s := range p.steps {
				t0 := time.Now()
				if err := s.s.run(x); err != nil {
					t.Fatal(err)
				}
				d := time.Since(t0)
				if it == 0 || d < best[i] {
					best[i] = d
				}
				sums[i] += d
			}
		}
		if os.Getenv("IREXEC_PROFILE_STEPS") != "" {
			for i, s := range p.steps {
				fmt.Printf("  %3d %-60.60s %8.1f us mean %8.1f us\n", i, stepKind(s), float64(best[i].Nanoseconds())/1e3,
					float64(sums[i].Nanoseconds())/1e3/float64(iters))
			}
		}
		per, perMean := map[string]time.Duration{}, map[string]time.Duration{}
		count := map[string]int{}
		var total, totalMean time.Duration
		for i, s := range p.steps {
			k := stepKind(s)
			per[k] += best[i]
			perMean[k] += sums[i] / time.Duration(iters)
			count[k]++
			total += best[i]
			totalMean += sums[i] / time.Duration(iters)
		}
		keys := make([]string, 0, len(per))
		for k := range per {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return per[keys[i]] > per[keys[j]] })
		fmt.Printf("%s bs%d: %.2f ms/forward (step means %.2f ms), %d steps\n", arch, batch, float64(total.Microseconds())/1e3,
			float64(totalMean.Microseconds())/1e3, len(p.steps))
		for _, k := range keys {
			fmt.Printf("  %-40s %8.3f ms %5.1f%% (%d) mean %.3f ms\n", k, float64(per[k].Microseconds())/1e3, 100*float64(per[k])/float64(total), count[k],
				float64(perMean[k].Microseconds())/1e3)
		}
		x.Close()
	}
}

// profileChunk is the Split chunk TestProfileArchs times for batch
// images: IREXEC_SPLIT's, or the cpu engine's default choice when unset.
func profileChunk(g *ir.Graph, batch, threads int) (int, error) {
	if s, ok := os.LookupEnv("IREXEC_SPLIT"); ok {
		return strconv.Atoi(s)
	}
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	if ir.BatchIndependent(g) != nil {
		return 0, nil
	}
	pays, err := SplitPays(g)
	if err != nil || !pays {
		return 0, err
	}
	return SplitChunk(batch, threads), nil
}

// profileGraph is a torchvision architecture with random weights, or an
// ONNX file when name ends in .onnx.
func profileGraph(name string) (*ir.Graph, error) {
	if strings.HasSuffix(name, ".onnx") {
		return onnx.Load(name)
	}
	sd, err := torchvision.RandomStateDict(name, 1000, 1)
	if err != nil {
		return nil, err
	}
	defer sd.Close()
	return torchvision.Build(name, sd, torchvision.Options{ImageSize: 224})
}

// stepKind names a step by its node's op kind and Go type.
func stepKind(s planStep) string {
	k := s.node
	if i := strings.Index(k, "("); i > 0 {
		k = k[i+1:]
	}
	if i := strings.IndexAny(k, "( "); i > 0 {
		k = k[:i]
	}
	if c, ok := s.s.(*convStep); ok {
		k += fmt.Sprintf(" %dx%d out %dx%d", c.kh, c.kw, c.oh, c.ow)
		if c.oh*c.ow > 1 {
			k = fmt.Sprintf("%s %dx%d", s.node[strings.Index(s.node, "(")+1:], c.kh, c.kw)
		}
	}
	if c, ok := s.s.(*convStep); ok && os.Getenv("IREXEC_PROFILE_CONV") != "" {
		k += fmt.Sprintf(" %d->%d %dx%d act %d", c.inC, c.outC, c.oh, c.ow, c.act.kind)
	}
	if w, ok := s.s.(*winoStep); ok {
		k += fmt.Sprintf(" %dc %dx%d", w.l.C, w.l.OH, w.l.OW)
	}
	if m, ok := s.s.(*mmStep); ok {
		k += fmt.Sprintf(" constR=%v %dx%dx%d", m.pr != nil, m.rows, m.k, m.cols)
	}
	if d, ok := s.s.(*dwStep); ok && os.Getenv("IREXEC_PROFILE_DW") != "" {
		k += fmt.Sprintf(" %dx%d/%d %dx%dx%d act %d", d.kh, d.kw, d.sh, d.inC, d.ih, d.iw, d.act.kind)
	}
	if d, ok := s.s.(*dwBlockStep); ok && os.Getenv("IREXEC_PROFILE_DW") != "" {
		k += fmt.Sprintf(" %dx%d/%d %dx%dx%d act %d", d.kh, d.kw, d.sh, d.inC, d.ih, d.iw, d.act.kind)
	}
	return fmt.Sprintf("%T %s", s.s, k)
}

// profileIters is how often each step runs for its minimum
// (IREXEC_ITERS, default 15).
func profileIters() int { return envInt("IREXEC_ITERS", 15) }

// envInt is the positive integer in the environment variable name, or def
// where it is unset or not one: the profiling tools' settings.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// profileSplit times whole forwards of batch images run by a Split of
// chunk-image plans on threads workers.
func profileSplit(t *testing.T, arch string, g *ir.Graph, batch, chunk, threads int) {
	b, _, err := ir.Optimize(g, chunk)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(context.Background(), b, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	s, err := NewSplit(p, chunk, threads)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	in := make([]byte, batch/chunk*p.vals[p.inputs[0]].nbytes)
	out := make([][]byte, len(p.outputs))
	for i, v := range p.outputs {
		out[i] = make([]byte, batch/chunk*p.vals[v].nbytes)
	}
	var bestRun, sum time.Duration
	runs := 0
	cpu0 := cputime.Process()
	secs, _ := strconv.ParseFloat(os.Getenv("IREXEC_SECONDS"), 64)
	for start := time.Now(); runs < 3 || time.Since(start).Seconds() < max(secs, 2); runs++ {
		t0 := time.Now()
		if err := s.Run(context.Background(), [][]byte{in}, out, batch); err != nil {
			t.Fatal(err)
		}
		d := time.Since(t0)
		sum += d
		if runs == 0 || d < bestRun {
			bestRun = d
		}
	}
	cpu := cputime.Process() - cpu0
	fmt.Printf("%s bs%d threads %d: best %.2f ms (%.1f img/s), mean %.2f ms over %d forwards, %.2f CPU-ms each (split in chunks of %d)\n", arch, batch, threads,
		float64(bestRun.Microseconds())/1e3, float64(batch)/bestRun.Seconds(), float64(sum.Microseconds())/1e3/float64(runs), runs,
		float64(cpu.Microseconds())/1e3/float64(runs), chunk)
}
