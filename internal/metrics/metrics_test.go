package metrics

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func near(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b))
}

func TestSummarize(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name string
		in   []float64
		want Stats
	}{
		{"empty", nil, Stats{Mean: nan, Std: nan, Min: nan, Max: nan, P50: nan, P90: nan, P99: nan}},
		// One value: the sample std is undefined, not 0.
		{"one", []float64{2}, Stats{N: 1, Mean: 2, Std: nan, Min: 2, Max: 2, P50: 2, P90: 2, P99: 2, Sum: 2}},
		// Sample std of 1,2,3,4 is sqrt(5/3) (population std would be sqrt(5/4)).
		// P50 of an even count is the mean of the middle two; P90 at rank
		// 0.9*3 = 2.7 is 3 + 0.7*(4-3); P99 at rank 2.97.
		{"four unsorted", []float64{4, 1, 3, 2}, Stats{N: 4, Mean: 2.5, Std: math.Sqrt(5.0 / 3), Min: 1, Max: 4, P50: 2.5, P90: 3.7, P99: 3.97, Sum: 10}},
		// Eleven values 0..10: rank p/10 exactly, no interpolation.
		{"0..10", []float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, Stats{N: 11, Mean: 5, Std: math.Sqrt(11), Min: 0, Max: 10, P50: 5, P90: 9, P99: 9.9, Sum: 55}},
		// Large offset, small spread: the two-pass std keeps its precision.
		{"offset", []float64{1e9 + 1, 1e9 + 2, 1e9 + 3}, Stats{N: 3, Mean: 1e9 + 2, Std: 1, Min: 1e9 + 1, Max: 1e9 + 3, P50: 1e9 + 2, P90: 1e9 + 2.8, P99: 1e9 + 2.98, Sum: 3e9 + 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]float64(nil), tt.in...)
			got := Summarize(in)
			if got.N != tt.want.N {
				t.Errorf("N = %d, want %d", got.N, tt.want.N)
			}
			for _, f := range []struct {
				name      string
				got, want float64
			}{
				{"Mean", got.Mean, tt.want.Mean}, {"Std", got.Std, tt.want.Std},
				{"Min", got.Min, tt.want.Min}, {"Max", got.Max, tt.want.Max},
				{"P50", got.P50, tt.want.P50}, {"P90", got.P90, tt.want.P90},
				{"P99", got.P99, tt.want.P99}, {"Sum", got.Sum, tt.want.Sum},
			} {
				if !near(f.got, f.want) {
					t.Errorf("%s = %v, want %v", f.name, f.got, f.want)
				}
			}
			for i := range in {
				if in[i] != tt.in[i] {
					t.Fatalf("Summarize modified its input: %v, was %v", in, tt.in)
				}
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	v := []float64{5, 1, 3}
	for _, tt := range []struct{ p, want float64 }{
		{0, 1}, {25, 2}, {50, 3}, {75, 4}, {100, 5}, {-1, math.NaN()}, {101, math.NaN()}, {math.NaN(), math.NaN()},
	} {
		if got := Percentile(v, tt.p); !near(got, tt.want) {
			t.Errorf("Percentile(%v, %v) = %v, want %v", v, tt.p, got, tt.want)
		}
	}
	if got := Percentile(nil, 50); !math.IsNaN(got) {
		t.Errorf("Percentile(nil) = %v, want NaN", got)
	}
}

func TestThroughputAndGFLOPS(t *testing.T) {
	t0 := time.Now()
	tests := []struct {
		name   string
		images int
		span   time.Duration
		want   float64
	}{
		{"100 batches of 32 in 2s", 3200, 2 * time.Second, 1600},
		{"zero span", 10, 0, math.NaN()},
		{"negative span", 10, -time.Second, math.NaN()},
	}
	for _, tt := range tests {
		if got := Throughput(tt.images, t0, t0.Add(tt.span)); !near(got, tt.want) {
			t.Errorf("%s: Throughput = %v, want %v", tt.name, got, tt.want)
		}
	}
	// ResNet-18 at 224x224 is ~1.82 GMAC: 1000 img/s is ~3640 GFLOP/s.
	if got := GFLOPS(1_820_000_000, 1000); !near(got, 3640) {
		t.Errorf("GFLOPS = %v, want 3640", got)
	}
}

func TestParseNvidiaSMI(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		want    GPUSample
		wantErr string
	}{
		// Recorded from an 8-GPU host (the query of NvidiaSMIProbe).
		{"one gpu", "37, 1234\n", GPUSample{Util: 37, MemMiB: 1234}, ""},
		{"two gpus", "10, 500\n30, 81559\n", GPUSample{Util: 20, MemMiB: 81559}, ""},
		{"crlf and blank lines", "\r\n 0, 4 \r\n\r\n", GPUSample{Util: 0, MemMiB: 4}, ""},
		{"not supported", "[Not Supported], 100\n", GPUSample{}, `utilization.gpu "[Not Supported]"`},
		{"na memory", "5, [N/A]\n", GPUSample{}, `memory.used "[N/A]"`},
		{"empty", "", GPUSample{}, "no GPU lines"},
		{"error text", "No devices were found\n", GPUSample{}, "want 2 comma-separated fields"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseNvidiaSMI([]byte(tt.out))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestSampler(t *testing.T) {
	t.Run("nil probe is unknown, not zero", func(t *testing.T) {
		st := StartSampler(context.Background(), nil, 0).Stop()
		if !math.IsNaN(st.MeanUtil) || !math.IsNaN(st.PeakMemMiB) || st.Samples != 0 {
			t.Fatalf("stats = %+v, want NaN and no samples", st)
		}
	})
	t.Run("mean and peak", func(t *testing.T) {
		var calls atomic.Int64
		seq := []GPUSample{{10, 100}, {30, 300}, {20, 200}}
		enough := make(chan struct{})
		p := func(ctx context.Context) (GPUSample, error) {
			i := calls.Add(1) - 1
			if i >= int64(len(seq)) {
				if i == int64(len(seq)) {
					close(enough)
				}
				<-ctx.Done() // hold further samples until Stop
				return GPUSample{}, ctx.Err()
			}
			return seq[i], nil
		}
		s := StartSampler(context.Background(), p, time.Millisecond)
		<-enough
		st := s.Stop()
		if st.Samples != 3 || st.Failures != 0 || !near(st.MeanUtil, 20) || st.PeakMemMiB != 300 {
			t.Fatalf("stats = %+v, want 3 samples, mean 20, peak 300", st)
		}
		if again := s.Stop(); again.Samples != st.Samples {
			t.Fatalf("second Stop = %+v, want %+v", again, st)
		}
	})
	t.Run("failures only", func(t *testing.T) {
		boom := errors.New("boom")
		var calls atomic.Int64
		p := func(ctx context.Context) (GPUSample, error) { calls.Add(1); return GPUSample{}, boom }
		s := StartSampler(context.Background(), p, time.Millisecond)
		for calls.Load() < 3 {
			time.Sleep(time.Millisecond)
		}
		st := s.Stop()
		if !math.IsNaN(st.MeanUtil) || !math.IsNaN(st.PeakMemMiB) || st.Failures < 3 || !errors.Is(st.Err, boom) {
			t.Fatalf("stats = %+v, want NaN, >=3 failures, err boom", st)
		}
	})
	t.Run("first sample at once", func(t *testing.T) {
		got := make(chan struct{}, 1)
		p := func(ctx context.Context) (GPUSample, error) {
			select {
			case got <- struct{}{}:
			default:
			}
			return GPUSample{Util: 50, MemMiB: 1}, nil
		}
		s := StartSampler(context.Background(), p, time.Hour)
		<-got
		if st := s.Stop(); st.Samples != 1 || st.MeanUtil != 50 {
			t.Fatalf("stats = %+v, want the one immediate sample", st)
		}
	})
}

func TestMultiProbe(t *testing.T) {
	ok := func(u, m float64) Probe {
		return func(context.Context) (GPUSample, error) { return GPUSample{u, m}, nil }
	}
	bad := func(context.Context) (GPUSample, error) { return GPUSample{}, errors.New("gpu 1 lost") }
	got, err := MultiProbe(ok(10, 100), ok(30, 50), bad)(context.Background())
	if err != nil || got != (GPUSample{20, 100}) {
		t.Fatalf("got %+v, %v; want {20 100}", got, err)
	}
	if _, err := MultiProbe(bad)(context.Background()); err == nil {
		t.Fatal("all probes failing: want an error")
	}
	if _, err := MultiProbe()(context.Background()); err == nil {
		t.Fatal("no probes: want an error")
	}
}

func TestAppendRow(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "results", "out.csv")
	r1 := Row{BatchSize: 32, Compile: true, Throughput: 123.5, GPUUtil: math.NaN(), GPUMemPeak: math.NaN(), Mode: "flood", Experiment: "a,b"}
	r2 := Row{BatchSize: 1, Throughput: 7, GPUUtil: 42, GPUMemPeak: 1000, Mode: "rate=10"}
	if err := AppendRow(path, r1); err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := AppendRow(path, r2); err != nil {
		t.Fatal(err)
	}
	all, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(all), string(first)) {
		t.Fatalf("second append rewrote the first row:\n%s\nthen\n%s", first, all)
	}
	if n := strings.Count(string(all), strings.Join(Columns, ",")); n != 1 {
		t.Fatalf("header appears %d times, want once:\n%s", n, all)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := ReadRows(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].BatchSize != 32 || rows[0].Experiment != "a,b" || !math.IsNaN(rows[0].GPUUtil) ||
		rows[1].GPUUtil != 42 || rows[1].Mode != "rate=10" {
		t.Fatalf("read back %+v", rows)
	}
	// gpu_util without a GPU is an empty cell, never 0.
	if !strings.Contains(string(first), ",123.5,,") {
		t.Fatalf("NaN gpu_util not written as an empty cell:\n%s", first)
	}

	t.Run("empty existing file gets a header", func(t *testing.T) {
		p := filepath.Join(dir, "empty.csv")
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := AppendRow(p, r2); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(p)
		if !strings.HasPrefix(string(b), strings.Join(Columns, ",")+"\n") {
			t.Fatalf("no header:\n%s", b)
		}
	})
	refuse := []struct{ name, content, wantErr string }{
		{"reference header", "batch_size,compile,torch_load_time,warmup_latency\n32,True,1,2\n", `column 3 is "torch_load_time", want "load_time"`},
		{"fewer columns", strings.Join(Columns[:5], ",") + "\n", "5 columns, want"},
		{"cut short", strings.Join(Columns, ",") + "\n32,true,1", "no final newline"},
	}
	for _, tt := range refuse {
		t.Run("refuses "+tt.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_")+".csv")
			if err := os.WriteFile(p, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			err := AppendRow(p, r1)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), p) {
				t.Fatalf("err = %v, want it to name %s and contain %q", err, p, tt.wantErr)
			}
			if b, _ := os.ReadFile(p); string(b) != tt.content {
				t.Fatalf("refused file was modified:\n%s", b)
			}
		})
	}
}
