package gemm

import "testing"

func TestPanelAt(t *testing.T) {
	for _, tc := range []struct {
		c, cols, npix int
		want          Panel
	}{
		{0, NR, 49, Panel{0, 0, true}},
		{32, NR, 49, Panel{0, 32, true}},
		{48, NR, 49, Panel{0, 48, false}}, // crosses into image 1
		{49, NR, 49, Panel{1, 0, true}},
		{98, 3, 49, Panel{2, 0, false}}, // a partial last panel
		{5, NR, 8, Panel{0, 5, false}},  // images smaller than a panel
	} {
		if got := PanelAt(tc.c, tc.cols, tc.npix); got != tc.want {
			t.Errorf("PanelAt(%d, %d, %d) = %+v, want %+v", tc.c, tc.cols, tc.npix, got, tc.want)
		}
	}
}

func TestWholeRun(t *testing.T) {
	w := func(img int) Panel { return Panel{Img: img, Whole: true} }
	for _, tc := range []struct {
		name  string
		ps    []Panel
		limit int
		want  int
	}{
		{"all of one image", []Panel{w(0), w(0), w(0)}, 3, 3},
		{"limit", []Panel{w(0), w(0), w(0)}, 2, 2},
		{"next image", []Panel{w(0), w(0), w(1)}, 3, 2},
		{"a partial panel ends it", []Panel{w(0), {Img: 0}, w(0)}, 3, 1},
		{"past the slice", []Panel{w(0), w(0)}, 5, 2},
	} {
		if got := WholeRun(tc.ps, tc.limit); got != tc.want {
			t.Errorf("%s: WholeRun = %d, want %d", tc.name, got, tc.want)
		}
	}
}
