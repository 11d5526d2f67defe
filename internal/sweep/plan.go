package sweep

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"goinfer/internal/engine"
	"goinfer/internal/metrics"
	"goinfer/internal/tensor"
)

// BenchFlag is a `goinfer bench` flag that sweep forwards to every run.
type BenchFlag struct {
	Name  string
	Bool  bool   // takes no value on the command line ("--profile")
	Usage string // for sweep's help
	// Default, when not empty, is passed explicitly when the flag is not
	// given, so that every row records it and resuming compares like with
	// like whatever bench's own default is.
	Default string
	// match reports whether a row was made with value v of this flag; nil
	// when rows do not record the flag (it then does not tell configurations
	// apart when resuming).
	match func(r metrics.Row, v string, given map[string]string) bool
}

// benchFlags are the flags forwarded to bench. batch_size, compile,
// experiment, results_dir and output_file are not among them: the sweep
// sets those itself.
var benchFlags = []BenchFlag{
	{Name: "num_iters", Usage: "`N` requests per run after the warmup one", Default: "100", match: intField(func(r metrics.Row) int { return r.NumIters })},
	{Name: "image_size", Usage: "image height and width in `PIXELS`", Default: "250", match: intField(func(r metrics.Row) int { return r.ImageSize })},
	{Name: "input_dtype", Usage: "request `DTYPE`: fp32, fp16 or uint8", Default: "fp32", match: matchDType},
	{Name: "seed", Usage: "`SEED` for random weights and inputs", Default: "0", match: func(r metrics.Row, v string, _ map[string]string) bool {
		n, err := strconv.ParseUint(v, 10, 64)
		return err == nil && r.Seed == n
	}},
	{Name: "engine", Usage: "`ENGINE`: auto, cpu or cuda", match: matchEngine},
	{Name: "precision", Usage: "arithmetic `PRECISION`: fp32, tf32, fp16 or bf16 (default: the engine's)", match: matchPrecision},
	{Name: "checkpoint", Usage: "checkpoint `FILE` (.pth, .pt or .safetensors)"},
	{Name: "model_dir", Usage: "`DIR` to look for the reference's checkpoint in"},
	{Name: "download", Bool: true, Usage: "fetch the reference's checkpoint when missing"},
	{Name: "arch", Usage: "`ARCH` of the random weights used without a checkpoint", match: matchArch},
	{Name: "threads", Usage: "cpu engine `THREADS` (0: all cores)"},
	{Name: "device", Usage: "GPU `ORDINAL` for the cuda engine"},
	{Name: "num_workers", Usage: "`N` prediction workers (experiments that set it win)", match: intField(func(r metrics.Row) int { return r.NumWorkers })},
	{Name: "copy_streams", Bool: true, Usage: "separate H2D/D2H stages (experiments that set it win)", match: matchCopyStreams},
	{Name: "concurrency", Usage: "closed loop with `C` requests in flight instead of flooding"},
	{Name: "rate", Usage: "open loop at `R` requests/s (Poisson) instead of flooding"},
	{Name: "devices", Usage: "comma-separated GPU `ORDINALS`, one pipeline on each", match: matchDevices},
	{Name: "pin_inputs", Bool: true, Usage: "generate requests in page-locked memory"},
	{Name: "queue_depth", Usage: "request queue capacity `N`"},
	{Name: "profile", Bool: true, Usage: "write a Chrome trace of each run (to --profile_file, overwritten by each run)"},
	{Name: "profile_file", Usage: "trace `FILE` for --profile"},
}

// BenchFlags lists the flags sweep forwards to bench.
func BenchFlags() []BenchFlag { return slices.Clone(benchFlags) }

func lookupFlag(name string) (BenchFlag, bool) {
	i := slices.IndexFunc(benchFlags, func(f BenchFlag) bool { return f.Name == name })
	if i < 0 {
		return BenchFlag{}, false
	}
	return benchFlags[i], true
}

func intField(get func(metrics.Row) int) func(metrics.Row, string, map[string]string) bool {
	return func(r metrics.Row, v string, _ map[string]string) bool {
		n, err := strconv.Atoi(v)
		return err == nil && get(r) == n
	}
}

func matchDType(r metrics.Row, v string, _ map[string]string) bool {
	want, err := tensor.ParseDType(v)
	if err != nil {
		return false
	}
	got, err := tensor.ParseDType(r.InputDType)
	return err == nil && got == want
}

func matchEngine(r metrics.Row, v string, _ map[string]string) bool {
	if strings.EqualFold(v, "auto") {
		return true // whatever auto picked
	}
	return strings.EqualFold(r.Engine, v)
}

func matchPrecision(r metrics.Row, v string, _ map[string]string) bool {
	want, err := engine.ParsePrecision(v)
	if err != nil {
		return false
	}
	got, err := engine.ParsePrecision(r.Precision)
	return err == nil && got == want
}

func matchArch(r metrics.Row, v string, given map[string]string) bool {
	if given["checkpoint"] != "" {
		return true // the checkpoint, not --arch, decides
	}
	return r.Arch == v
}

func matchDevices(r metrics.Row, v string, _ map[string]string) bool {
	return r.NumDevices == len(ParseList(v))
}

func matchCopyStreams(r metrics.Row, v string, _ map[string]string) bool {
	b, err := strconv.ParseBool(v)
	return err == nil && r.CopyStreams == b
}

// modeOf is the load mode bench records ("flood", "concurrency=C",
// "rate=R") for the given --concurrency and --rate.
func modeOf(given map[string]string) string {
	if c, err := strconv.Atoi(given["concurrency"]); err == nil && c > 0 {
		return "concurrency=" + strconv.Itoa(c)
	}
	if v, err := strconv.ParseFloat(given["rate"], 64); err == nil && v > 0 {
		return "rate=" + strconv.FormatFloat(v, 'g', -1, 64)
	}
	return "flood"
}

// normMode writes a recorded mode the way modeOf does, so "rate=100.0" and
// "rate=100" compare equal.
func normMode(m string) string {
	m = strings.TrimSpace(m)
	if m == "" {
		return "flood"
	}
	k, v, ok := strings.Cut(m, "=")
	if !ok {
		return m
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return k + "=" + strconv.FormatFloat(f, 'g', -1, 64)
	}
	return m
}

// Flag is a bench flag and its value, as forwarded.
type Flag struct {
	Name  string // without dashes
	Value string
}

// Config is a sweep: every experiment at every batch size and compile
// setting, Repeats times each.
type Config struct {
	Experiments []Experiment
	BatchSizes  []int
	Compile     []bool
	Repeats     int
	// Bench are flags forwarded to every run (see BenchFlags), in the order
	// given.
	Bench []Flag
}

// Validate checks the grid and the forwarded flags.
func (c Config) Validate() error {
	var errs []error
	if len(c.Experiments) == 0 {
		errs = append(errs, errors.New("no experiments"))
	}
	if len(c.BatchSizes) == 0 {
		errs = append(errs, errors.New("no batch sizes"))
	}
	for _, b := range c.BatchSizes {
		if b <= 0 {
			errs = append(errs, fmt.Errorf("batch size %d: must be at least 1", b))
		}
	}
	if len(c.Compile) == 0 {
		errs = append(errs, errors.New("no compile setting"))
	}
	if c.Repeats <= 0 {
		errs = append(errs, fmt.Errorf("repeats %d: must be at least 1", c.Repeats))
	}
	for _, f := range c.Bench {
		bf, ok := lookupFlag(f.Name)
		if !ok {
			errs = append(errs, fmt.Errorf("--%s is not a bench flag that sweep forwards", f.Name))
			continue
		}
		if bf.Bool {
			if _, err := strconv.ParseBool(f.Value); err != nil {
				errs = append(errs, fmt.Errorf("--%s=%s: want true or false", f.Name, f.Value))
			}
		}
	}
	if err := dupValues("batch size", c.BatchSizes); err != nil {
		errs = append(errs, err)
	}
	if err := dupValues("compile setting", c.Compile); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func dupValues[T comparable](what string, vs []T) error {
	seen := map[T]bool{}
	for _, v := range vs {
		if seen[v] {
			return fmt.Errorf("%s %v given twice", what, v)
		}
		seen[v] = true
	}
	return nil
}

// Run is one bench invocation of a sweep.
type Run struct {
	Experiment string
	BatchSize  int
	Compile    bool
	Repeat     int // 1-based, among the configuration's repeats
	// Args are bench's arguments, except where to write the row.
	Args []string
}

// String names the run in progress lines.
func (r Run) String() string {
	return fmt.Sprintf("%s bs=%d compile=%t", r.Experiment, r.BatchSize, r.Compile)
}

// effective returns the flag values one experiment's runs use: the
// forwarded flags, defaults for those not given, and the experiment's own
// flags on top.
func (c Config) effective(e Experiment) (map[string]string, []Flag) {
	vals := map[string]string{}
	var order []Flag
	set := func(name, v string) {
		if _, ok := vals[name]; !ok {
			order = append(order, Flag{Name: name})
		}
		vals[name] = v
	}
	for _, f := range c.Bench {
		set(f.Name, f.Value)
	}
	for _, bf := range benchFlags {
		if _, ok := vals[bf.Name]; !ok && bf.Default != "" {
			set(bf.Name, bf.Default)
		}
	}
	for _, a := range e.Args {
		name, v, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		set(name, v)
	}
	for i := range order {
		order[i].Value = vals[order[i].Name]
	}
	return vals, order
}

// Matches reports whether row r is a run of experiment e at the given batch
// size and compile setting with this config's forwarded flags: same
// experiment label, batch size and compile flag, and, for every effective
// flag that rows record, the same value, and the same load mode. Flags rows do not record
// (checkpoint, model_dir, threads, ...) cannot be told apart.
func (c Config) Matches(r metrics.Row, e Experiment, batchSize int, compile bool) bool {
	if r.Experiment != e.Name || r.BatchSize != batchSize || r.Compile != compile {
		return false
	}
	vals, _ := c.effective(e)
	for name, v := range vals {
		bf, ok := lookupFlag(name)
		if !ok || bf.match == nil {
			continue
		}
		if !bf.match(r, v, vals) {
			return false
		}
	}
	return modeOf(vals) == normMode(r.Mode)
}

// Plan lists the runs still to do, given the rows already in the CSV: a
// configuration with k matching rows needs Repeats-k more (none when k >=
// Repeats). Runs are ordered repeat by repeat (every configuration's first
// run, then every second run, ...), so that slow drift of the machine
// (clocks, temperature) spreads over all configurations instead of biasing
// the last ones, and an interrupted sweep already has a first result for
// each.
func (c Config) Plan(done []metrics.Row) ([]Run, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	type cfgKey struct {
		exp     int
		bs      int
		compile bool
	}
	have := map[cfgKey]int{}
	for ei, e := range c.Experiments {
		for _, b := range c.BatchSizes {
			for _, comp := range c.Compile {
				n := 0
				for _, r := range done {
					if c.Matches(r, e, b, comp) {
						n++
					}
				}
				have[cfgKey{ei, b, comp}] = n
			}
		}
	}
	var runs []Run
	for rep := 1; rep <= c.Repeats; rep++ {
		for _, b := range c.BatchSizes {
			for _, comp := range c.Compile {
				for ei, e := range c.Experiments {
					if have[cfgKey{ei, b, comp}] >= rep {
						continue
					}
					runs = append(runs, Run{
						Experiment: e.Name, BatchSize: b, Compile: comp, Repeat: rep,
						Args: c.args(e, b, comp),
					})
				}
			}
		}
	}
	return runs, nil
}

// Total is the number of runs in the whole grid.
func (c Config) Total() int {
	return len(c.Experiments) * len(c.BatchSizes) * len(c.Compile) * c.Repeats
}

func (c Config) args(e Experiment, batchSize int, compile bool) []string {
	args := []string{
		"--batch_size=" + strconv.Itoa(batchSize),
		"--compile=" + strconv.FormatBool(compile),
		"--experiment=" + e.Name,
	}
	_, flags := c.effective(e)
	for _, f := range flags {
		args = append(args, "--"+f.Name+"="+f.Value)
	}
	return args
}

// ParseInts reads a comma-separated list of integers ("1,32,64").
func ParseInts(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", p)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q lists no numbers", s)
	}
	return out, nil
}

// ParseCompile reads --compile: "both" (true then false, the reference's
// order), "true" or "false".
func ParseCompile(s string) ([]bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "both", "":
		return []bool{true, false}, nil
	case "true", "on", "yes", "1":
		return []bool{true}, nil
	case "false", "off", "no", "0":
		return []bool{false}, nil
	}
	return nil, fmt.Errorf("%q: want both, true or false", s)
}

// ParseList splits a comma-separated list of names.
func ParseList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
