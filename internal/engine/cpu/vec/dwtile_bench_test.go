package vec

import (
	"fmt"
	"testing"
)

// BenchmarkDWTile times one 16-channel block of a 3x3 stride-1 depthwise
// layer, split into its parts: interleave the input planes, convolve,
// write the planes back.
func BenchmarkDWTile(b *testing.B) {
	for _, m := range []int{7, 14, 28} {
		hp, wp := m+2, m+2
		tile := make([]float32, hp*wp*DWLanes)
		out := make([]float32, m*m*DWLanes)
		planes := make([]float32, DWLanes*m*m)
		w := make([]float32, 9*DWLanes)
		var offs []int
		for ky := 0; ky < 3; ky++ {
			for kx := 0; kx < 3; kx++ {
				offs = append(offs, ky*wp+kx)
			}
		}
		b.Run(fmt.Sprintf("conv/%dx%d", m, m), func(b *testing.B) {
			for range b.N {
				DWTile(out, tile, w, w, offs, m, m, wp, 1)
			}
		})
		b.Run(fmt.Sprintf("interleave/%dx%d", m, m), func(b *testing.B) {
			for range b.N {
				Interleave(tile[(wp+1)*DWLanes:], planes, DWLanes, m*m, m, m, m, wp)
			}
		})
		b.Run(fmt.Sprintf("deinterleave/%dx%d", m, m), func(b *testing.B) {
			for range b.N {
				Deinterleave(planes, out, DWLanes, m*m, m*m)
			}
		})
	}
}
