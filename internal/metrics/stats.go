package metrics

import (
	"math"
	"slices"
	"time"
)

// Stats summarizes a set of latencies, in seconds.
//
// Std is the sample standard deviation (n-1 in the denominator), NaN for
// fewer than two values. Percentiles interpolate linearly between the two
// nearest ranks of the sorted values (numpy's default "linear" method,
// Hyndman & Fan type 7): Pp = x[floor(r)] + (r - floor(r)) *
// (x[floor(r)+1] - x[floor(r)]) with r = p/100*(n-1), so P0 is the minimum,
// P100 the maximum, and P50 of an even count the mean of the middle two.
// Every field is NaN when there are no values.
type Stats struct {
	N             int
	Mean, Std     float64
	Min, Max      float64
	P50, P90, P99 float64
	Sum           float64
}

// Summarize computes Stats over v (seconds). v is not modified.
func Summarize(v []float64) Stats {
	nan := math.NaN()
	s := Stats{N: len(v), Mean: nan, Std: nan, Min: nan, Max: nan, P50: nan, P90: nan, P99: nan}
	if len(v) == 0 {
		return s
	}
	sorted := slices.Clone(v)
	slices.Sort(sorted)
	// Two passes (mean, then squared deviations) rather than a running sum of
	// squares: latencies are close together, and the one-pass formula loses
	// the difference to cancellation.
	for _, x := range sorted {
		s.Sum += x
	}
	s.Mean = s.Sum / float64(len(v))
	if len(v) > 1 {
		var ss float64
		for _, x := range sorted {
			d := x - s.Mean
			ss += d * d
		}
		s.Std = math.Sqrt(ss / float64(len(v)-1))
	}
	s.Min, s.Max = sorted[0], sorted[len(sorted)-1]
	s.P50 = percentileSorted(sorted, 50)
	s.P90 = percentileSorted(sorted, 90)
	s.P99 = percentileSorted(sorted, 99)
	return s
}

// Percentile returns the p-th percentile (0 <= p <= 100) of v with the
// interpolation described on Stats; NaN when v is empty or p is out of
// range. v is not modified.
func Percentile(v []float64, p float64) float64 {
	sorted := slices.Clone(v)
	slices.Sort(sorted)
	return percentileSorted(sorted, p)
}

func percentileSorted(sorted []float64, p float64) float64 {
	if len(sorted) == 0 || !(p >= 0 && p <= 100) {
		return math.NaN()
	}
	r := p / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(r))
	if lo >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	frac := r - float64(lo)
	return sorted[lo] + frac*(sorted[lo+1]-sorted[lo])
}

// Throughput is the reference's corrected formula (its PR #116188): images
// completed divided by the wall time from the first request sent to the last
// response received. It is NaN when the span is not positive.
func Throughput(images int, firstSend, lastResponse time.Time) float64 {
	span := lastResponse.Sub(firstSend).Seconds()
	if span <= 0 {
		return math.NaN()
	}
	return float64(images) / span
}

// GFLOPS is the effective compute rate: 2 FLOPs per multiply-accumulate,
// macsPerImage MACs per image, at imagesPerSecond.
func GFLOPS(macsPerImage int64, imagesPerSecond float64) float64 {
	return 2 * float64(macsPerImage) * imagesPerSecond / 1e9
}
