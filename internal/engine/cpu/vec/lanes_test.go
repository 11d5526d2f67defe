package vec

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestInterleave checks Interleave and Deinterleave on every path
// against their definitions, and that they write nothing else.
func TestInterleave(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 1))
	wide := useAVX512
	defer func() { useAVX512 = wide }()
	for _, path := range []bool{wide, false} {
		useAVX512 = path
		for _, nc := range []int{1, 3, 8, 9, 15, 16} {
			for _, n := range []int{1, 7, 8, 9, 15, 16, 17, 49, 64, 100} {
				for _, plane := range []int{n, n + 5} {
					name := fmt.Sprintf("avx512 %v nc %d n %d plane %d", path, nc, n, plane)
					src := data(r, nc*plane, false)
					tile := make([]float32, n*DWLanes+1)
					tile[n*DWLanes] = 42
					Interleave(tile, src, nc, plane, 1, n, n, n)
					for p := 0; p < n; p++ {
						for c := 0; c < nc; c++ {
							if got, want := tile[p*DWLanes+c], src[c*plane+p]; got != want {
								t.Fatalf("%s: Interleave pixel %d lane %d = %v, want %v", name, p, c, got, want)
							}
						}
					}
					if tile[n*DWLanes] != 42 {
						t.Fatalf("%s: Interleave wrote past its pixels", name)
					}
					back := make([]float32, nc*plane)
					for i := range back {
						back[i] = -1
					}
					Deinterleave(back, tile, nc, plane, n)
					for c := 0; c < nc; c++ {
						for p := 0; p < plane; p++ {
							want := float32(-1)
							if p < n {
								want = src[c*plane+p]
							}
							if got := back[c*plane+p]; got != want {
								t.Fatalf("%s: Deinterleave channel %d pixel %d = %v, want %v", name, c, p, got, want)
							}
						}
					}
				}
			}
		}
	}
}

// TestInterleaveRows checks rows of a plane into a padded tile: pixels
// between the rows keep their values.
func TestInterleaveRows(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 2))
	for _, c := range []struct{ nc, rows, n, srcRow, dstRow int }{
		{16, 7, 7, 7, 9}, {5, 3, 14, 16, 18}, {9, 4, 3, 3, 3}, {1, 2, 9, 9, 11}, {16, 28, 28, 28, 30},
	} {
		plane := (c.rows-1)*c.srcRow + c.n + 2
		src := data(r, c.nc*plane, false)
		size := ((c.rows-1)*c.dstRow + c.n) * DWLanes
		tile := make([]float32, size+DWLanes)
		for i := range tile {
			tile[i] = -7
		}
		Interleave(tile, src, c.nc, plane, c.rows, c.n, c.srcRow, c.dstRow)
		for p := 0; p < len(tile)/DWLanes; p++ {
			row, col := p/c.dstRow, p%c.dstRow
			for l := 0; l < c.nc; l++ {
				want := float32(-7)
				if row < c.rows && col < c.n {
					want = src[l*plane+row*c.srcRow+col]
				}
				if got := tile[p*DWLanes+l]; got != want {
					t.Fatalf("%+v: pixel %d lane %d = %v, want %v", c, p, l, got, want)
				}
			}
		}
	}
}

func TestInterleavePanics(t *testing.T) {
	for name, f := range map[string]func(){
		"no channels":   func() { Interleave(make([]float32, DWLanes), make([]float32, 1), 0, 1, 1, 1, 1, 1) },
		"17 channels":   func() { Interleave(make([]float32, DWLanes), make([]float32, 17), 17, 1, 1, 1, 1, 1) },
		"short tile":    func() { Interleave(make([]float32, DWLanes), make([]float32, 2), 1, 2, 1, 2, 2, 2) },
		"rows overlap":  func() { Interleave(make([]float32, 4*DWLanes), make([]float32, 4), 1, 4, 2, 2, 2, 1) },
		"short planes":  func() { Deinterleave(make([]float32, 3), make([]float32, 2*DWLanes), 2, 2, 2) },
		"plane too low": func() { Deinterleave(make([]float32, 8), make([]float32, 2*DWLanes), 2, 1, 2) },
		"part pixel":    func() { Deinterleave(make([]float32, 8), make([]float32, 2*DWLanes-1), 2, 2, 2) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}
