package report

import (
	"math"
	"testing"
)

// The expected values are what pandas gives for Series(xs).mean() and
// Series(xs).std(), computed by hand.
func TestSummarizeMatchesPandas(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name      string
		xs        []float64
		mean, std float64
		n         int
	}{
		{"four values", []float64{1, 2, 3, 4}, 2.5, math.Sqrt(5.0 / 3), 4},
		{"two values", []float64{518.884, 551.909}, 535.3965, (551.909 - 518.884) / math.Sqrt2, 2},
		{"NaN skipped", []float64{1, nan, 3}, 2, math.Sqrt2, 2},
		{"one value has NaN std", []float64{5.355}, 5.355, nan, 1},
		{"one value among NaNs", []float64{nan, 7, nan}, 7, nan, 1},
		{"all NaN", []float64{nan, nan}, nan, nan, 0},
		{"empty", nil, nan, nan, 0},
		{"identical values", []float64{3, 3, 3}, 3, 0, 3},
		// A one-pass formula (sum of squares minus square of sum) loses
		// every digit here; pandas' two-pass result is exactly 1.
		{"large close values", []float64{1e9 + 1, 1e9 + 2, 1e9 + 3}, 1e9 + 2, 1, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Summarize(tt.xs)
			if !close(s.Mean, tt.mean) || !close(s.Std, tt.std) || s.N != tt.n {
				t.Errorf("Summarize(%v) = %+v, want mean %v std %v n %d", tt.xs, s, tt.mean, tt.std, tt.n)
			}
		})
	}
}

func close(got, want float64) bool {
	if math.IsNaN(want) {
		return math.IsNaN(got)
	}
	return math.Abs(got-want) <= 1e-12*math.Max(1, math.Abs(want))
}

func TestFormatStat(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		s    Stat
		want string
	}{
		{Stat{14.172, 0.267, 10}, "14.172 +/- 0.267"},
		{Stat{518.8844, 7.8539, 10}, "518.884 +/- 7.854"},
		{Stat{0.5, 0.01, 3}, "0.500 +/- 0.010"},
		{Stat{0.0956, 0.0703, 3}, "0.0956 +/- 0.0703"},
		{Stat{0.00123, 0.00004, 3}, "0.00123 +/- 0.00004"},
		{Stat{3.2, nan, 1}, "3.200 +/- n/a"},
		{Stat{nan, nan, 0}, "n/a"},
		{Stat{0, 0, 2}, "0.000 +/- 0.000"},
	}
	for _, tt := range tests {
		if got := FormatStat(tt.s); got != tt.want {
			t.Errorf("FormatStat(%+v) = %q, want %q", tt.s, got, tt.want)
		}
	}
}
