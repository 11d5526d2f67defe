package sweep

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"goinfer/internal/metrics"
)

func mustExperiments(t *testing.T, names ...string) []Experiment {
	t.Helper()
	e, err := LookupExperiments(names)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// doneRow is a row as bench records a run of cfg's experiment exp.
func doneRow(exp string, bs int, compile bool) metrics.Row {
	r := metrics.Row{
		Experiment: exp, BatchSize: bs, Compile: compile, Throughput: 1,
		Engine: "cpu", Precision: "fp32", InputDType: "float32", ImageSize: 32, NumIters: 5,
		Mode: "flood", NumWorkers: 1, CopyStreams: true,
	}
	if exp == "original" {
		r.CopyStreams = false
	}
	return r
}

func testConfig(t *testing.T) Config {
	return Config{
		Experiments: mustExperiments(t, "original", "copy_streams"),
		BatchSizes:  []int{1, 32},
		Compile:     []bool{true, false},
		Repeats:     3,
		Bench:       []Flag{{"engine", "cpu"}, {"image_size", "32"}, {"num_iters", "5"}},
	}
}

func TestPlanFreshRunsEveryRepeatRepeatByRepeat(t *testing.T) {
	cfg := testConfig(t)
	plan, err := cfg.Plan(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != cfg.Total() || cfg.Total() != 2*2*2*3 {
		t.Fatalf("%d runs, total %d, want 24", len(plan), cfg.Total())
	}
	// The first 8 runs are every configuration's first repeat.
	seen := map[string]bool{}
	for i, r := range plan[:8] {
		if r.Repeat != 1 || seen[r.String()] {
			t.Errorf("run %d: %s repeat %d", i, r, r.Repeat)
		}
		seen[r.String()] = true
	}
	if got := plan[0].String(); got != "original bs=1 compile=true" {
		t.Errorf("first run %s", got)
	}
	want := []string{
		"--batch_size=1", "--compile=true", "--experiment=original",
		"--engine=cpu", "--image_size=32", "--num_iters=5", "--input_dtype=fp32", "--seed=0",
		"--copy_streams=false", "--num_workers=1",
	}
	if !slices.Equal(plan[0].Args, want) {
		t.Errorf("args %q\nwant %q", plan[0].Args, want)
	}
}

func TestPlanResumesWithTheMissingRepeats(t *testing.T) {
	cfg := testConfig(t)
	other := doneRow("original", 1, true)
	other.NumIters = 100 // another sweep's row: does not count
	gpu := doneRow("original", 1, true)
	gpu.Engine = "cuda" // --engine cpu was asked for
	wrongWorkers := doneRow("copy_streams", 1, true)
	wrongWorkers.NumWorkers = 2
	done := []metrics.Row{
		doneRow("original", 1, true), doneRow("original", 1, true),
		doneRow("original", 1, true), doneRow("original", 1, true), // more than needed
		doneRow("copy_streams", 32, false),
		other, gpu, wrongWorkers,
		doneRow("workers2", 1, true), // not in this sweep
	}
	plan, err := cfg.Plan(done)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string][]int{}
	for _, r := range plan {
		count[r.String()] = append(count[r.String()], r.Repeat)
	}
	if _, ok := count["original bs=1 compile=true"]; ok {
		t.Errorf("original bs=1 compile=true is complete but planned %v", count["original bs=1 compile=true"])
	}
	if got := count["copy_streams bs=32 compile=false"]; !slices.Equal(got, []int{2, 3}) {
		t.Errorf("copy_streams bs=32 compile=false repeats %v, want [2 3]", got)
	}
	if got := count["copy_streams bs=1 compile=true"]; !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("copy_streams bs=1 compile=true repeats %v, want [1 2 3] (a 2-worker row is another configuration)", got)
	}
	if len(plan) != 24-3-1 {
		t.Errorf("%d runs planned, want 20", len(plan))
	}
}

func TestMatches(t *testing.T) {
	exp := mustExperiments(t, "default", "fp16")
	base := Config{Experiments: exp, BatchSizes: []int{8}, Compile: []bool{false}, Repeats: 1,
		Bench: []Flag{{"image_size", "32"}, {"num_iters", "5"}}}
	r := doneRow("default", 8, false)
	tests := []struct {
		name  string
		bench []Flag
		exp   int
		edit  func(*metrics.Row)
		want  bool
	}{
		{"same", nil, 0, nil, true},
		{"engine auto matches any", []Flag{{"engine", "auto"}}, 0, func(r *metrics.Row) { r.Engine = "cuda" }, true},
		{"engine differs", []Flag{{"engine", "cuda"}}, 0, nil, false},
		{"precision spelled differently", []Flag{{"precision", "float32"}}, 0, nil, true},
		{"experiment precision", nil, 1, func(r *metrics.Row) { r.Experiment, r.Precision = "fp16", "fp16" }, true},
		{"experiment precision differs", nil, 1, func(r *metrics.Row) { r.Experiment = "fp16" }, false},
		{"input dtype alias", []Flag{{"input_dtype", "u8"}}, 0, func(r *metrics.Row) { r.InputDType = "uint8" }, true},
		{"default input dtype", nil, 0, func(r *metrics.Row) { r.InputDType = "uint8" }, false},
		{"seed", []Flag{{"seed", "7"}}, 0, func(r *metrics.Row) { r.Seed = 7 }, true},
		{"default seed", nil, 0, func(r *metrics.Row) { r.Seed = 7 }, false},
		{"concurrency", []Flag{{"concurrency", "4"}}, 0, func(r *metrics.Row) { r.Mode = "concurrency=4" }, true},
		{"flood row for concurrency", []Flag{{"concurrency", "4"}}, 0, nil, false},
		{"rate written differently", []Flag{{"rate", "100"}}, 0, func(r *metrics.Row) { r.Mode = "rate=100.0" }, true},
		{"empty mode is flood", nil, 0, func(r *metrics.Row) { r.Mode = "" }, true},
		{"arch without checkpoint", []Flag{{"arch", "resnet50"}}, 0, nil, false},
		{"arch with checkpoint", []Flag{{"arch", "resnet50"}, {"checkpoint", "x.pth"}}, 0, nil, true},
		{"unrecorded flag", []Flag{{"threads", "3"}}, 0, nil, true},
		{"devices", []Flag{{"devices", "0,1"}}, 0, func(r *metrics.Row) { r.NumDevices = 2 }, true},
		{"devices differ", []Flag{{"devices", "0,1"}}, 0, func(r *metrics.Row) { r.NumDevices = 1 }, false},
		{"batch size", nil, 0, func(r *metrics.Row) { r.BatchSize = 9 }, false},
		{"compile", nil, 0, func(r *metrics.Row) { r.Compile = true }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			cfg.Bench = append(slices.Clone(base.Bench), tt.bench...)
			rr := r
			if tt.edit != nil {
				tt.edit(&rr)
			}
			if got := cfg.Matches(rr, exp[tt.exp], 8, false); got != tt.want {
				t.Errorf("Matches = %t, want %t", got, tt.want)
			}
		})
	}
}

func TestExperimentFlagsWin(t *testing.T) {
	cfg := Config{Experiments: mustExperiments(t, "workers2", "default"), BatchSizes: []int{1},
		Compile: []bool{false}, Repeats: 1, Bench: []Flag{{"num_workers", "8"}}}
	plan, err := cfg.Plan(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(plan[0].Args, "--num_workers=2") || slices.Contains(plan[0].Args, "--num_workers=8") {
		t.Errorf("workers2 args %q: want --num_workers=2 only", plan[0].Args)
	}
	if !slices.Contains(plan[1].Args, "--num_workers=8") {
		t.Errorf("default args %q: want the forwarded --num_workers=8", plan[1].Args)
	}
}

func TestValidate(t *testing.T) {
	ok := testConfig(t)
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no experiments", func(c *Config) { c.Experiments = nil }, "no experiments"},
		{"zero batch", func(c *Config) { c.BatchSizes = []int{0} }, "batch size 0"},
		{"dup batch", func(c *Config) { c.BatchSizes = []int{1, 1} }, "given twice"},
		{"repeats", func(c *Config) { c.Repeats = 0 }, "repeats 0"},
		{"unknown flag", func(c *Config) { c.Bench = []Flag{{"batch_size", "3"}} }, "--batch_size is not a bench flag"},
		{"bool flag value", func(c *Config) { c.Bench = []Flag{{"profile", "maybe"}} }, "--profile=maybe"},
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tt := range tests {
		c := testConfig(t)
		tt.edit(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.want)
		}
	}
}

func TestParsers(t *testing.T) {
	if got, err := ParseInts(" 1, 32,64 "); err != nil || !slices.Equal(got, []int{1, 32, 64}) {
		t.Errorf("ParseInts = %v, %v", got, err)
	}
	for _, bad := range []string{"", "1,x", ","} {
		if _, err := ParseInts(bad); err == nil {
			t.Errorf("ParseInts(%q): no error", bad)
		}
	}
	for in, want := range map[string][]bool{"both": {true, false}, "true": {true}, "false": {false}} {
		if got, err := ParseCompile(in); err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseCompile(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseCompile("sometimes"); err == nil {
		t.Error("ParseCompile(sometimes): no error")
	}
	if _, err := LookupExperiments([]string{"workers9"}); err == nil || !strings.Contains(err.Error(), "workers2") {
		t.Errorf("unknown experiment: %v, want an error listing the known ones", err)
	}
	if _, err := LookupExperiments([]string{"fp16", "fp16"}); err == nil {
		t.Error("repeated experiment: no error")
	}
	if e := mustExperiments(t, DefaultExperiments...); len(e) != 6 {
		t.Errorf("default experiments: %d", len(e))
	}
}

func TestLoadCSVCutsAnIncompleteLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sweep.csv")
	if err := metrics.AppendRow(path, doneRow("original", 1, true)); err != nil {
		t.Fatal(err)
	}
	whole, _ := os.ReadFile(path)
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("32,false,0.1,0.2") // a cut-short append
	f.Close()

	rows, err := ReadCSV(path)
	if err != nil || len(rows) != 1 {
		t.Fatalf("ReadCSV: %d rows, %v; want the 1 complete row", len(rows), err)
	}
	if b, _ := os.ReadFile(path); len(b) == len(whole) {
		t.Fatal("ReadCSV changed the file")
	}
	rows, note, err := loadCSV(path)
	if err != nil || len(rows) != 1 || !strings.Contains(note, "incomplete last line") {
		t.Fatalf("loadCSV: %d rows, note %q, %v", len(rows), note, err)
	}
	if b, _ := os.ReadFile(path); string(b) != string(whole) {
		t.Errorf("after loadCSV:\n%s\nwant:\n%s", b, whole)
	}
	if rows, _, err := loadCSV(filepath.Join(t.TempDir(), "none.csv")); err != nil || rows != nil {
		t.Errorf("missing CSV: %v, %v; want no rows, no error", rows, err)
	}
	foreign := filepath.Join(t.TempDir(), "ref.csv")
	os.WriteFile(foreign, []byte("batch_size,compile,torch_load_time\n32,True,1.5\n"), 0o644)
	if _, _, err := loadCSV(foreign); err == nil || !strings.Contains(err.Error(), "--output_file") {
		t.Errorf("foreign CSV: %v, want a refusal", err)
	}
}
