package engine

import (
	"slices"
	"testing"
	"time"
)

func TestMedianTimes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		times [][]time.Duration
		div   int
		want  []time.Duration
	}{
		{"one forward", [][]time.Duration{{4, 9}}, 1, []time.Duration{4, 9}},
		{"odd, an outlier", [][]time.Duration{{1, 50}, {900, 60}, {3, 40}}, 1, []time.Duration{3, 50}},
		{"even, divided", [][]time.Duration{{2, 8}, {4, 12}}, 2, []time.Duration{1, 5}},
		{"none", nil, 1, nil},
	} {
		if got := MedianTimes(tc.times, tc.div); !slices.Equal(got, tc.want) {
			t.Errorf("%s: MedianTimes = %v, want %v", tc.name, got, tc.want)
		}
	}
}
