package report

import "math"

// Stat is the aggregate of one metric over the repeats of a configuration,
// computed the way pandas' Series.mean and Series.std compute it (the
// reference's process_metrics.py uses those): NaN cells are skipped, the
// standard deviation is the sample one (ddof=1), and fewer than two values
// give a NaN std (no values: NaN mean too).
type Stat struct {
	Mean float64
	Std  float64
	N    int // values that were not NaN
}

// Summarize aggregates xs. It uses two passes (mean, then squared
// deviations) so that large, close values keep their precision.
func Summarize(xs []float64) Stat {
	var sum float64
	n := 0
	for _, x := range xs {
		if !math.IsNaN(x) {
			sum += x
			n++
		}
	}
	if n == 0 {
		return Stat{Mean: math.NaN(), Std: math.NaN()}
	}
	mean := sum / float64(n)
	if n == 1 {
		return Stat{Mean: mean, Std: math.NaN(), N: 1}
	}
	var ss float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			d := x - mean
			ss += d * d
		}
	}
	return Stat{Mean: mean, Std: math.Sqrt(ss / float64(n-1)), N: n}
}

// Valid reports whether the stat has a mean (at least one value).
func (s Stat) Valid() bool { return s.N > 0 && !math.IsNaN(s.Mean) }
