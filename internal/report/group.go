package report

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"goinfer/internal/metrics"
)

// Metric is one aggregated column of the result rows.
type Metric int

// The metrics the tables and plots show.
const (
	WarmupLatency Metric = iota
	AverageLatency
	P99Latency
	Throughput
	GPUUtil
	numMetrics
)

// Metrics lists every metric, in table order.
var Metrics = []Metric{WarmupLatency, AverageLatency, P99Latency, Throughput, GPUUtil}

// Column is the metric's CSV column name.
func (m Metric) Column() string {
	switch m {
	case WarmupLatency:
		return "warmup_latency"
	case AverageLatency:
		return "average_latency"
	case P99Latency:
		return "p99_latency"
	case Throughput:
		return "throughput"
	case GPUUtil:
		return "gpu_util"
	}
	return fmt.Sprintf("metric(%d)", int(m))
}

// Title names the metric for headings and axes, without its unit.
func (m Metric) Title() string {
	switch m {
	case WarmupLatency:
		return "Warmup latency"
	case AverageLatency:
		return "Average latency"
	case P99Latency:
		return "p99 latency"
	case Throughput:
		return "Throughput"
	case GPUUtil:
		return "GPU utilization"
	}
	return m.Column()
}

// Unit is the metric's unit as the reference's tables spell it.
func (m Metric) Unit() string {
	switch m {
	case Throughput:
		return "samples/sec"
	case GPUUtil:
		return "%"
	}
	return "s"
}

func (m Metric) value(r metrics.Row) float64 {
	switch m {
	case WarmupLatency:
		return r.WarmupLatency
	case AverageLatency:
		return r.AverageLatency
	case P99Latency:
		return r.P99Latency
	case Throughput:
		return r.Throughput
	case GPUUtil:
		return r.GPUUtil
	}
	return math.NaN()
}

// Platform is where rows were measured. Rows from different platforms are
// never averaged together: each platform gets its own tables and plots.
type Platform struct {
	Engine string
	Device string
}

// String describes the platform for headings ("cuda engine on NVIDIA H200").
func (p Platform) String() string {
	e, d := p.Engine, p.Device
	switch {
	case e == "" && d == "":
		return "unknown engine and device"
	case e == "":
		return d
	case d == "":
		return e + " engine"
	}
	return e + " engine on " + d
}

// Slug is a file-name-safe form of the platform, used as the sub-folder
// name when one report covers several platforms.
func (p Platform) Slug() string {
	s := slug(p.Engine + " " + p.Device)
	if s == "" {
		return "unknown"
	}
	return s
}

func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '_' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
			continue
		}
		dash = true
	}
	return b.String()
}

// Setup is what, besides the experiment name, batch size and compile flag,
// changes a run's result. Rows that differ in it are different series even
// under one experiment name (say, one sweep at 64x64 images and one at
// 250x250), so they are never averaged together.
type Setup struct {
	Arch        string
	Precision   string
	InputDType  string
	Mode        string
	ImageSize   int
	NumIters    int
	NumWorkers  int
	NumDevices  int
	CopyStreams bool
}

func setupOf(r metrics.Row) Setup {
	// A CSV without num_devices (older, or the reference's) ran on one.
	devices := max(r.NumDevices, 1)
	return Setup{
		Arch: r.Arch, Precision: r.Precision, InputDType: r.InputDType, Mode: r.Mode,
		ImageSize: r.ImageSize, NumIters: r.NumIters, NumWorkers: r.NumWorkers,
		NumDevices: devices, CopyStreams: r.CopyStreams,
	}
}

// setupField is one field of Setup as a label fragment; fragments are empty
// for unknown values (columns a CSV did not have).
type setupField struct {
	name string
	frag func(Setup) string
}

var setupFields = []setupField{
	{"arch", func(s Setup) string { return s.Arch }},
	{"precision", func(s Setup) string { return s.Precision }},
	{"input", func(s Setup) string {
		if s.InputDType == "" {
			return ""
		}
		return s.InputDType + " input"
	}},
	{"image", func(s Setup) string {
		if s.ImageSize == 0 {
			return ""
		}
		return fmt.Sprintf("%dx%d images", s.ImageSize, s.ImageSize)
	}},
	{"iters", func(s Setup) string {
		if s.NumIters == 0 {
			return ""
		}
		return fmt.Sprintf("%d iterations per run", s.NumIters)
	}},
	{"workers", func(s Setup) string {
		if s.NumWorkers == 0 {
			return ""
		}
		return plural(s.NumWorkers, "worker")
	}},
	{"copy", func(s Setup) string {
		if s.NumWorkers == 0 && !s.CopyStreams {
			return "" // a CSV without the column: nothing known
		}
		if s.CopyStreams {
			return "copy streams"
		}
		return "no copy streams"
	}},
	{"devices", func(s Setup) string {
		if s.NumDevices <= 1 {
			return ""
		}
		return plural(s.NumDevices, "device")
	}},
	{"mode", func(s Setup) string { return s.Mode }},
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// Series is one line of a plot and one row of a table: an experiment run
// with one setup.
type Series struct {
	Experiment string
	Setup      Setup
	// Label is the experiment name, followed in parentheses by what sets
	// this series apart from others of the same name, if any.
	Label string
}

// Group is the aggregate of the rows of one series at one batch size and
// compile setting.
type Group struct {
	Series    *Series
	BatchSize int
	Compile   bool
	Runs      int
	stats     [numMetrics]Stat
}

// Stat returns the group's aggregate of m.
func (g *Group) Stat(m Metric) Stat { return g.stats[m] }

// PlatformReport is everything measured on one platform.
type PlatformReport struct {
	Platform Platform
	Series   []*Series // in display order
	// BatchSizes and Compiles are the values present, ascending.
	BatchSizes []int
	Compiles   []bool
	Groups     []*Group // by series, batch size, compile
	Rows       int
	// Common describes the setup fields every series shares
	// ("resnet18, fp16, float32 input, 250x250 images").
	Common string
}

// Group returns the aggregate for one cell, or nil when nothing was measured
// there.
func (p *PlatformReport) Group(s *Series, batchSize int, compile bool) *Group {
	for _, g := range p.Groups {
		if g.Series == s && g.BatchSize == batchSize && g.Compile == compile {
			return g
		}
	}
	return nil
}

// Aggregate groups rows by platform, series, batch size and compile flag and
// computes each group's statistics. order lists experiment names in the
// order they should be shown; other names follow alphabetically. Rows
// without an experiment name (plain bench runs) form the experiment
// "bench".
func Aggregate(rows []metrics.Row, order []string) []*PlatformReport {
	type cell struct {
		series    int
		batchSize int
		compile   bool
	}
	type platformAcc struct {
		rep    *PlatformReport
		series map[Series]int // Series without Label -> index
		cells  map[cell][]metrics.Row
	}
	byPlatform := map[Platform]*platformAcc{}
	var platforms []Platform
	for _, r := range rows {
		pl := Platform{Engine: r.Engine, Device: r.Device}
		acc := byPlatform[pl]
		if acc == nil {
			acc = &platformAcc{
				rep:    &PlatformReport{Platform: pl},
				series: map[Series]int{},
				cells:  map[cell][]metrics.Row{},
			}
			byPlatform[pl] = acc
			platforms = append(platforms, pl)
		}
		exp := r.Experiment
		if exp == "" {
			exp = "bench"
		}
		key := Series{Experiment: exp, Setup: setupOf(r)}
		si, ok := acc.series[key]
		if !ok {
			si = len(acc.rep.Series)
			s := key
			acc.rep.Series = append(acc.rep.Series, &s)
			acc.series[key] = si
		}
		c := cell{si, r.BatchSize, r.Compile}
		acc.cells[c] = append(acc.cells[c], r)
		acc.rep.Rows++
	}

	slices.SortFunc(platforms, func(a, b Platform) int {
		return cmp.Or(cmp.Compare(a.Engine, b.Engine), cmp.Compare(a.Device, b.Device))
	})
	rank := map[string]int{}
	for i, name := range order {
		if _, dup := rank[name]; !dup {
			rank[name] = i
		}
	}
	out := make([]*PlatformReport, 0, len(platforms))
	for _, pl := range platforms {
		acc := byPlatform[pl]
		rep := acc.rep
		rep.Common = labelSeries(rep.Series)
		// Index cells by series pointer before sorting reorders the slice.
		ptrs := slices.Clone(rep.Series)
		slices.SortStableFunc(rep.Series, func(a, b *Series) int {
			ra, oka := rank[a.Experiment]
			rb, okb := rank[b.Experiment]
			switch {
			case oka && okb && ra != rb:
				return cmp.Compare(ra, rb)
			case oka != okb:
				if oka {
					return -1
				}
				return 1
			}
			return cmp.Or(cmp.Compare(a.Experiment, b.Experiment), cmp.Compare(a.Label, b.Label))
		})
		bs := map[int]bool{}
		comp := map[bool]bool{}
		for c, rs := range acc.cells {
			g := &Group{Series: ptrs[c.series], BatchSize: c.batchSize, Compile: c.compile, Runs: len(rs)}
			vals := make([]float64, len(rs))
			for _, m := range Metrics {
				for i, r := range rs {
					vals[i] = m.value(r)
				}
				g.stats[m] = Summarize(vals)
			}
			rep.Groups = append(rep.Groups, g)
			bs[c.batchSize] = true
			comp[c.compile] = true
		}
		pos := map[*Series]int{}
		for i, s := range rep.Series {
			pos[s] = i
		}
		slices.SortFunc(rep.Groups, func(a, b *Group) int {
			return cmp.Or(cmp.Compare(pos[a.Series], pos[b.Series]),
				cmp.Compare(a.BatchSize, b.BatchSize), cmpBool(a.Compile, b.Compile))
		})
		for b := range bs {
			rep.BatchSizes = append(rep.BatchSizes, b)
		}
		slices.Sort(rep.BatchSizes)
		for _, c := range []bool{false, true} {
			if comp[c] {
				rep.Compiles = append(rep.Compiles, c)
			}
		}
		out = append(out, rep)
	}
	return out
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// labelSeries sets each series' Label and returns the description of the
// setup fields all series share. A field that varies between series of the
// same experiment goes into those series' labels; a field that is the same
// everywhere goes into the common description; a field that varies only
// between experiments (workers2 has 2 workers, workers3 has 3) is implied by
// the experiment names and shown nowhere else.
func labelSeries(series []*Series) string {
	var common []string
	for _, f := range setupFields {
		vals := map[string]bool{}
		for _, s := range series {
			vals[f.frag(s.Setup)] = true
		}
		if len(vals) == 1 {
			for v := range vals {
				if v != "" {
					common = append(common, v)
				}
			}
		}
	}
	byExp := map[string][]*Series{}
	for _, s := range series {
		byExp[s.Experiment] = append(byExp[s.Experiment], s)
	}
	for _, group := range byExp {
		if len(group) == 1 {
			group[0].Label = group[0].Experiment
			continue
		}
		var varying []setupField
		for _, f := range setupFields {
			first := f.frag(group[0].Setup)
			for _, s := range group[1:] {
				if f.frag(s.Setup) != first {
					varying = append(varying, f)
					break
				}
			}
		}
		for _, s := range group {
			var parts []string
			for _, f := range varying {
				v := f.frag(s.Setup)
				if v == "" {
					v = "no " + f.name
				}
				parts = append(parts, v)
			}
			s.Label = s.Experiment + " (" + strings.Join(parts, ", ") + ")"
		}
	}
	// Setups whose differences have no words (a field a CSV left empty
	// against one it set to its zero value) still need distinct labels.
	seen := map[string]int{}
	for _, s := range series {
		if seen[s.Label]++; seen[s.Label] > 1 {
			s.Label = fmt.Sprintf("%s #%d", s.Label, seen[s.Label])
		}
	}
	return strings.Join(common, ", ")
}
