package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestDWTile(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 7))
	cases := []struct{ oh, ow, k, s, d int }{
		{1, 1, 1, 1, 1}, {1, 1, 3, 1, 1}, {7, 7, 3, 1, 1}, {7, 7, 5, 2, 1},
		{3, 5, 3, 2, 1}, {2, 9, 5, 1, 1}, {4, 4, 3, 3, 1}, {5, 6, 3, 1, 2},
		{1, 13, 3, 2, 2}, {14, 14, 3, 1, 1}, {6, 3, 2, 1, 1},
	}
	for _, c := range cases {
		hp, wp := (c.oh-1)*c.s+(c.k-1)*c.d+1, (c.ow-1)*c.s+(c.k-1)*c.d+1
		in := data(r, hp*wp*DWLanes, false)
		var offs []int
		for ky := 0; ky < c.k; ky++ {
			for kx := 0; kx < c.k; kx++ {
				offs = append(offs, ky*c.d*wp+kx*c.d)
			}
		}
		w := data(r, len(offs)*DWLanes, false)
		bias := data(r, DWLanes, false)
		n := c.oh * c.ow * DWLanes
		got := data(r, n+DWLanes, false)
		guard := got[n]
		DWTile(got, in, w, bias, offs, c.oh, c.ow, c.s*wp, c.s)
		if got[n] != guard {
			t.Fatalf("%+v: wrote past the outputs", c)
		}
		wide := useAVX512
		useAVX512 = false
		narrow := make([]float32, n)
		DWTile(narrow, in, w, bias, offs, c.oh, c.ow, c.s*wp, c.s)
		useAVX512 = wide
		plain := make([]float32, n)
		dwTileGo(plain, in, w, bias, offs, c.oh, c.ow, c.s*wp, c.s)
		for oy := 0; oy < c.oh; oy++ {
			for ox := 0; ox < c.ow; ox++ {
				for l := 0; l < DWLanes; l++ {
					want := float64(bias[l])
					for ti, o := range offs {
						want += float64(w[ti*DWLanes+l]) * float64(in[((oy*c.s*wp+ox*c.s)+o)*DWLanes+l])
					}
					i := (oy*c.ow+ox)*DWLanes + l
					for name, v := range map[string]float32{"widest": got[i], "8 lanes": narrow[i], "go": plain[i]} {
						if math.Abs(float64(v)-want) > 1e-5*(1+math.Abs(want)) {
							t.Fatalf("%+v: %s path out (%d,%d) lane %d = %v, want %v", c, name, oy, ox, l, v, want)
						}
					}
				}
			}
		}
	}
}

func TestDWTilePanics(t *testing.T) {
	in := make([]float32, 4*DWLanes)
	w := make([]float32, 2*DWLanes)
	for name, f := range map[string]func(){
		"short out":  func() { DWTile(make([]float32, DWLanes), in, w, w, []int{0, 1}, 1, 2, 2, 1) },
		"past input": func() { DWTile(make([]float32, 2*DWLanes), in, w, w, []int{0, 3}, 1, 2, 2, 1) },
		"negative":   func() { DWTile(make([]float32, DWLanes), in, w, w, []int{0, -1}, 1, 1, 1, 1) },
		"few weights": func() {
			DWTile(make([]float32, DWLanes), in, w[:DWLanes], w, []int{0, 1}, 1, 1, 1, 1)
		},
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
