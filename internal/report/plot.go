package report

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// PlotFile names one plot of a report.
type PlotFile struct {
	Metric Metric
	Name   string // file name, e.g. "throughput_plot.png"
	Title  string // e.g. "Throughput against batch size"
}

// PlotFiles are the plots a report draws, in order. The first two keep the
// reference's file names (src/throughput_plot.png, src/avg_latency_plot.png).
var PlotFiles = []PlotFile{
	{Throughput, "throughput_plot.png", "Throughput against batch size"},
	{AverageLatency, "avg_latency_plot.png", "Average latency against batch size"},
	{P99Latency, "p99_latency_plot.png", "p99 latency against batch size"},
	{GPUUtil, "gpu_util_plot.png", "GPU utilization against batch size"},
	{WarmupLatency, "warmup_latency_plot.png", "Warmup latency (cold start) against batch size"},
}

// PlotOptions set a plot's size in pixels.
type PlotOptions struct {
	Width, Height int // pixels; 0 means 1200 x 750
	DPI           int // 0 means 120
}

func (o PlotOptions) withDefaults() PlotOptions {
	if o.Width <= 0 {
		o.Width = 1200
	}
	if o.Height <= 0 {
		o.Height = 750
	}
	if o.DPI <= 0 {
		o.DPI = 120
	}
	return o
}

// palette is Okabe and Ito's colour-blind-safe set (yellow left out: it
// vanishes on white), then darker tones for more series; glyph shapes vary
// too, so series stay apart in grey scale.
var palette = []color.Color{
	color.RGBA{0, 114, 178, 255},   // blue
	color.RGBA{213, 94, 0, 255},    // vermillion
	color.RGBA{0, 158, 115, 255},   // bluish green
	color.RGBA{204, 121, 167, 255}, // reddish purple
	color.RGBA{86, 180, 233, 255},  // sky blue
	color.RGBA{230, 159, 0, 255},   // orange
	color.RGBA{0, 0, 0, 255},       // black
	color.RGBA{120, 60, 20, 255},   // brown
	color.RGBA{90, 90, 160, 255},   // slate
	color.RGBA{110, 130, 20, 255},  // olive
}

var glyphs = []draw.GlyphDrawer{
	draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PyramidGlyph{},
	draw.RingGlyph{}, draw.BoxGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{},
}

// noCompileDashes marks the compile=false lines.
var noCompileDashes = []vg.Length{vg.Points(7), vg.Points(4)}

var sans = font.Font{Typeface: "Liberation", Variant: "Sans"}

// axisLabel is the metric's axis title with its unit.
func axisLabel(m Metric) string {
	if m == Throughput {
		return "Throughput (images/s)"
	}
	return m.Title() + " (" + m.Unit() + ")"
}

// line is one series at one compile setting across batch sizes.
type line struct {
	series  int
	compile bool
	xs, ys  []float64
	stds    []float64 // NaN-free: 0 where unknown
}

// WritePlot draws pf.Metric of p against batch size as a PNG: one line per
// experiment (solid with compile, dashed without), points at the means,
// error bars of one sample standard deviation, log-scale batch size axis and
// a log-scale value axis when the values span more than a factor of 10.
// It returns false, writing nothing, when no row has a value for it (gpu_util
// on the cpu engine).
//
// Log axes are drawn by plotting log2(batch size) and log10(value) on linear
// axes with ticks labelled in the original units, rather than with
// plot.LogScale: that one places a vertical axis title at the linear
// midpoint (shrinking the data area) and panics on error bars reaching zero.
func WritePlot(w io.Writer, p *PlatformReport, pf PlotFile, opt PlotOptions) (bool, error) {
	opt = opt.withDefaults()
	m := pf.Metric
	lines := collectLines(p, m)
	if len(lines) == 0 {
		return false, nil
	}

	pl := plot.New()
	for _, ax := range []*plot.Axis{&pl.X, &pl.Y} {
		ax.Label.TextStyle.Font = font.From(sans, 12)
		ax.Tick.Label.Font = font.From(sans, 10)
	}
	pl.X.Label.Text = "Batch size (images per request, log scale)"
	pl.Y.Label.Text = axisLabel(m)

	// The batch size axis: log2-spaced, ticks at the sizes measured.
	var xt []plot.Tick
	for _, b := range p.BatchSizes {
		xt = append(xt, plot.Tick{Value: math.Log2(float64(b)), Label: strconv.Itoa(b)})
	}
	pl.X.Tick.Marker = plot.ConstantTicks(xt)
	xlo := math.Log2(float64(p.BatchSizes[0])) - 0.4
	xhi := math.Log2(float64(p.BatchSizes[len(p.BatchSizes)-1])) + 0.4

	ymin, ymax, logY := yRange(m, lines)
	ty := func(v float64) float64 { return v }
	if logY {
		// Zero (a run that measured nothing) has no place on a log axis.
		lines = positive(lines)
		ty = math.Log10
		pl.Y.Tick.Marker = logTicks{}
		pl.Y.Label.Text += ", log scale"
	} else {
		pl.Y.Tick.Marker = plainTicks{}
	}

	grid := plotter.NewGrid()
	grid.Vertical.Color = color.Gray{Y: 225}
	grid.Horizontal.Color = color.Gray{Y: 225}
	pl.Add(grid)

	// Lines at one batch size are shifted apart a little so that their
	// error bars do not hide each other.
	step := math.Min(0.04, 0.35/float64(len(lines)))
	for k, ln := range lines {
		shift := (float64(k) - float64(len(lines)-1)/2) * step
		xys := make(plotter.XYs, len(ln.xs))
		errs := make(plotter.YErrors, len(ln.xs))
		for i := range ln.xs {
			y, sd := ln.ys[i], ln.stds[i]
			// A bar cannot reach below the axis (zero, on a log axis): it
			// stops at the bottom of the plot, which still says "lower".
			low := math.Max(y-sd, ymin)
			xys[i] = plotter.XY{X: math.Log2(ln.xs[i]) + shift, Y: ty(y)}
			errs[i].Low, errs[i].High = ty(y)-ty(low), ty(y+sd)-ty(y)
		}
		col := palette[ln.series%len(palette)]
		l, err := plotter.NewLine(xys)
		if err != nil {
			return false, fmt.Errorf("%s: series %q: %w", pf.Name, p.Series[ln.series].Label, err)
		}
		l.LineStyle = lineStyle(col, ln.compile)
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return false, fmt.Errorf("%s: series %q: %w", pf.Name, p.Series[ln.series].Label, err)
		}
		sc.GlyphStyle = glyphStyle(col, ln.series)
		eb := &plotter.YErrorBars{
			XYs: xys, YErrors: errs, CapWidth: vg.Points(6),
			LineStyle: draw.LineStyle{Color: col, Width: vg.Points(1.2)},
		}
		pl.Add(l, eb, sc)
	}
	// Set the ranges after Add, which widens them to the data.
	pl.Y.Min, pl.Y.Max = ty(ymin), ty(ymax)
	pl.X.Min, pl.X.Max = xlo, xhi

	leg := legendFor(p, lines)

	wIn := vg.Length(float64(opt.Width)/float64(opt.DPI)) * vg.Inch
	hIn := vg.Length(float64(opt.Height)/float64(opt.DPI)) * vg.Inch
	cv := vgimg.NewWith(vgimg.UseWH(wIn, hIn), vgimg.UseDPI(opt.DPI))
	dc := draw.New(cv)
	margin := vg.Points(10)
	dc = draw.Crop(dc, margin, -margin, margin/2, -margin)
	dc = drawTitle(dc, pf.Title, subtitle(p))

	legW := legendWidth(&leg) + vg.Points(16)
	if maxW := dc.Size().X * 0.4; legW > maxW {
		legW = maxW
	}
	plotArea := draw.Crop(dc, 0, -legW, 0, 0)
	pl.Draw(plotArea)
	legArea := draw.Crop(dc, dc.Size().X-legW+vg.Points(16), 0, 0, 0)
	legArea.Max.Y = pl.DataCanvas(plotArea).Max.Y
	leg.Draw(legArea)

	if _, err := (vgimg.PngCanvas{Canvas: cv}).WriteTo(w); err != nil {
		return false, fmt.Errorf("%s: encoding PNG: %w", pf.Name, err)
	}
	return true, nil
}

// drawTitle writes the title centred at the top of c and the subtitle,
// smaller and wrapped to c's width, below it; it returns the rest of c.
func drawTitle(c draw.Canvas, title, sub string) draw.Canvas {
	ts := text.Style{
		Color: color.Black, Font: font.From(sans, 15),
		XAlign: draw.XCenter, YAlign: draw.YTop, Handler: plot.DefaultTextHandler,
	}
	ss := ts
	ss.Font = font.From(sans, 11)
	ss.Color = color.Gray{Y: 60}
	x := (c.Min.X + c.Max.X) / 2
	y := c.Max.Y
	c.FillText(ts, vg.Point{X: x, Y: y}, title)
	y -= ts.Height(title) + vg.Points(4)
	sub = wrapTo(sub, func(s string) bool { return ss.Width(s) <= c.Size().X })
	c.FillText(ss, vg.Point{X: x, Y: y}, sub)
	y -= ss.Height(sub) + vg.Points(10)
	c.Max.Y = y
	return c
}

func lineStyle(col color.Color, compile bool) draw.LineStyle {
	ls := draw.LineStyle{Color: col, Width: vg.Points(2)}
	if !compile {
		ls.Dashes = noCompileDashes
	}
	return ls
}

func glyphStyle(col color.Color, series int) draw.GlyphStyle {
	return draw.GlyphStyle{Color: col, Radius: vg.Points(3.5), Shape: glyphs[series%len(glyphs)]}
}

// collectLines gathers, per series and compile setting, the batch sizes
// where m has a value.
func collectLines(p *PlatformReport, m Metric) []line {
	var out []line
	for si, s := range p.Series {
		for _, c := range p.Compiles {
			var ln line
			for _, b := range p.BatchSizes {
				g := p.Group(s, b, c)
				if g == nil {
					continue
				}
				st := g.Stat(m)
				if !st.Valid() || math.IsInf(st.Mean, 0) {
					continue
				}
				sd := st.Std
				if math.IsNaN(sd) || math.IsInf(sd, 0) {
					sd = 0
				}
				ln.xs = append(ln.xs, float64(b))
				ln.ys = append(ln.ys, st.Mean)
				ln.stds = append(ln.stds, sd)
			}
			if len(ln.xs) > 0 {
				ln.series, ln.compile = si, c
				out = append(out, ln)
			}
		}
	}
	return out
}

// positive drops the points at or below zero, and lines left empty.
func positive(lines []line) []line {
	var out []line
	for _, ln := range lines {
		var kept line
		for i, y := range ln.ys {
			if y > 0 {
				kept.xs = append(kept.xs, ln.xs[i])
				kept.ys = append(kept.ys, y)
				kept.stds = append(kept.stds, ln.stds[i])
			}
		}
		if len(kept.xs) > 0 {
			kept.series, kept.compile = ln.series, ln.compile
			out = append(out, kept)
		}
	}
	return out
}

// yRange picks the value axis: GPU utilization is linear from 0 to at
// least 100 %; other metrics are linear from 0 unless their means span more
// than a factor of 10 (latency from batch 1 to 256, or compile on and off),
// where a log axis keeps the small values readable. A log axis reaches a
// little below the smallest mean; longer error bars are cut at its bottom.
func yRange(m Metric, lines []line) (lo, hi float64, logY bool) {
	minMean, minLow, maxHi := math.Inf(1), math.Inf(1), 0.0
	for _, ln := range lines {
		for i, y := range ln.ys {
			if y > 0 {
				minMean = math.Min(minMean, y)
				if l := y - ln.stds[i]; l > 0 {
					minLow = math.Min(minLow, l)
				}
			}
			maxHi = math.Max(maxHi, y+ln.stds[i])
		}
	}
	if m == GPUUtil {
		return 0, math.Max(100, maxHi*1.05), false
	}
	if maxHi <= 0 || math.IsInf(minMean, 1) {
		return 0, 1, false
	}
	maxMean := 0.0
	for _, ln := range lines {
		for _, y := range ln.ys {
			maxMean = math.Max(maxMean, y)
		}
	}
	if maxMean/minMean > 10 {
		return math.Max(minLow, minMean/4) / 1.3, maxHi * 1.3, true
	}
	return 0, maxHi * 1.08, false
}

// legendFor lists the series drawn (colour, glyph) and, when both appear,
// the line styles of compile on and off.
func legendFor(p *PlatformReport, lines []line) plot.Legend {
	leg := plot.NewLegend()
	leg.TextStyle.Font = font.From(sans, 11)
	leg.Top, leg.Left = true, true
	leg.ThumbnailWidth = vg.Points(28)
	leg.Padding = vg.Points(3)
	seen := map[int]bool{}
	comp := map[bool]bool{}
	for _, ln := range lines {
		comp[ln.compile] = true
		if seen[ln.series] {
			continue
		}
		seen[ln.series] = true
		col := palette[ln.series%len(palette)]
		l := &plotter.Line{LineStyle: lineStyle(col, true)}
		sc := &plotter.Scatter{GlyphStyle: glyphStyle(col, ln.series)}
		leg.Add(p.Series[ln.series].Label, l, sc)
	}
	grey := color.Gray{Y: 90}
	switch {
	case comp[true] && comp[false]:
		leg.Add("")
		leg.Add("compile: solid", &plotter.Line{LineStyle: lineStyle(grey, true)})
		leg.Add("no compile: dashed", &plotter.Line{LineStyle: lineStyle(grey, false)})
	case comp[false]:
		leg.Add("")
		leg.Add("all without compile", &plotter.Line{LineStyle: lineStyle(grey, false)})
	default:
		leg.Add("")
		leg.Add("all with compile", &plotter.Line{LineStyle: lineStyle(grey, true)})
	}
	leg.Add("bars: ±1 sample std")
	return leg
}

// legendWidth is the width the legend's widest entry needs.
func legendWidth(l *plot.Legend) vg.Length {
	r := l.Rectangle(draw.Canvas{})
	return r.Max.X - r.Min.X
}

// subtitle is the second title line: platform and shared setup.
func subtitle(p *PlatformReport) string {
	s := p.Platform.String()
	if p.Common != "" {
		s += "; " + p.Common
	}
	return s
}

// wrapTo breaks s at spaces into lines that fit (a word longer than a
// line gets a line of its own).
func wrapTo(s string, fits func(string) bool) string {
	var lines []string
	cur := ""
	for _, word := range strings.Fields(s) {
		if cur == "" {
			cur = word
			continue
		}
		if fits(cur + " " + word) {
			cur += " " + word
			continue
		}
		lines = append(lines, cur)
		cur = word
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return strings.Join(lines, "\n")
}

// logTicks marks an axis of log10 values: it labels 1-2-5 steps over
// narrow ranges and powers of ten over wide ones, with
// unlabelled minor ticks between, so a log axis always shows several
// readable values.
type logTicks struct{}

func (logTicks) Ticks(llo, lhi float64) []plot.Tick {
	lo, hi := math.Pow(10, llo), math.Pow(10, lhi)
	if !(hi > lo) || lo <= 0 {
		return nil
	}
	d0 := int(math.Floor(math.Log10(lo)))
	d1 := int(math.Ceil(math.Log10(hi)))
	wide := hi/lo > 500 // past 2.7 decades, 1-2-5 labels crowd the axis
	labelled := func(mult int) bool {
		if wide {
			return mult == 1
		}
		return mult == 1 || mult == 2 || mult == 5
	}
	build := func(all bool) ([]plot.Tick, int) {
		var ts []plot.Tick
		n := 0
		for d := d0; d <= d1; d++ {
			for mult := 1; mult <= 9; mult++ {
				v, _ := strconv.ParseFloat(fmt.Sprintf("%de%d", mult, d), 64)
				if v < lo || v > hi {
					continue
				}
				t := plot.Tick{Value: math.Log10(v)}
				if all || labelled(mult) {
					t.Label = tickLabel(v)
					n++
				}
				ts = append(ts, t)
			}
		}
		return ts, n
	}
	ts, n := build(false)
	if n < 3 {
		ts, _ = build(true)
	}
	return ts
}

// plainTicks is plot.DefaultTicks with labels that never use exponents.
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = tickLabel(ts[i].Value)
		}
	}
	return ts
}

// tickLabel writes v without an exponent and with thousands separators
// from 10,000 up.
func tickLabel(v float64) string {
	// Round off binary noise (0.30000000000000004) first.
	v, _ = strconv.ParseFloat(strconv.FormatFloat(v, 'g', 12, 64), 64)
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if math.Abs(v) < 10000 {
		return s
	}
	intPart, frac, _ := strings.Cut(s, ".")
	neg := strings.HasPrefix(intPart, "-")
	intPart = strings.TrimPrefix(intPart, "-")
	var b strings.Builder
	for i, r := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	out := b.String()
	if neg {
		out = "-" + out
	}
	if frac != "" {
		out += "." + frac
	}
	return out
}
