package imagegpu

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestSplit(t *testing.T) {
	bad := errors.New("bad")
	tests := []struct {
		name     string
		hardware bool
		gpuNoYCC bool
		share    float64
		routes   []route
		errs     []int // indices that failed planning
		wantGPU  int   // hardware-routed images moved to the GPU backend
	}{
		{"no engines", false, false, 0.5, rep(routeGPU, 8), nil, 0},
		{"share none", true, false, 0, rep(routeHardware, 8), nil, 0},
		{"quarter", true, false, 0.25, rep(routeHardware, 256), nil, 64},
		{"half", true, false, 0.5, rep(routeHardware, 7), nil, 4},
		{"all", true, false, 1, rep(routeHardware, 5), nil, 5},
		{"small share rounds", true, false, 1.0 / 64, rep(routeHardware, 256), nil, 4},
		{"share clamped to all", true, false, 1, rep(routeHardware, 3), nil, 3},
		{"only hardware routes move", true, false, 0.5, []route{routeCPU, routeHardware, routeGPU, routeHardware, routeCPU, routeHardware, routeHardware}, nil, 2},
		{"failed images stay", true, false, 1, rep(routeHardware, 4), []int{1, 2}, 2},
		{"gpu backend without YCbCr", true, true, 0.5, rep(routeHardware, 4), nil, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &Preprocessor{share: tc.share}
			p.dec[0].ok = tc.hardware
			p.dec[1].ok = true
			p.dec[1].noYCbCr = tc.gpuNoYCC
			plans := make([]plan, len(tc.routes))
			errs := make([]error, len(tc.routes))
			for i, r := range tc.routes {
				plans[i] = plan{route: r, ycc: ycc420}
			}
			for _, i := range tc.errs {
				errs[i] = bad
			}
			p.split(plans, errs)
			moved, run, longest := 0, 0, 0
			for i, pl := range plans {
				was := tc.routes[i]
				if was != routeHardware || errs[i] != nil {
					if pl.route != was {
						t.Errorf("image %d: route %d changed to %d", i, was, pl.route)
					}
					continue
				}
				if pl.route == routeGPU {
					moved++
					run = 0
					if want := ycc420; tc.gpuNoYCC {
						if pl.ycc != yccNone {
							t.Errorf("image %d: ycc %d on a backend without YCbCr output", i, pl.ycc)
						}
					} else if pl.ycc != want {
						t.Errorf("image %d: ycc %d, want %d", i, pl.ycc, want)
					}
				} else {
					run++
					longest = max(longest, run)
				}
			}
			if moved != tc.wantGPU {
				t.Errorf("moved %d images to the GPU backend, want %d", moved, tc.wantGPU)
			}
			// Spread evenly: never a long run of hardware images between
			// two moved ones.
			if tc.share > 0 && tc.hardware && moved > 1 && float64(longest) > math.Ceil(1/tc.share)+1 {
				t.Errorf("a run of %d hardware images with share %g: not spread", longest, tc.share)
			}
		})
	}
}

func rep(r route, n int) []route {
	out := make([]route, n)
	for i := range out {
		out[i] = r
	}
	return out
}

func TestStats(t *testing.T) {
	a := Stats{Batches: 2, Images: 512, HW: 400, GPU: 112, Wait: time.Millisecond, Plan: 2 * time.Millisecond,
		HWCall: 20 * time.Millisecond, GPUCall: 10 * time.Millisecond, Kernels: 400 * time.Microsecond}
	b := Stats{Batches: 1, Images: 256, HW: 200, GPU: 56, Plan: time.Millisecond, HWCall: 10 * time.Millisecond}
	sum := a.Add(b)
	if sum.Batches != 3 || sum.Images != 768 || sum.HW != 600 || sum.GPU != 168 || sum.HWCall != 30*time.Millisecond {
		t.Errorf("Add = %+v", sum)
	}
	if got := sum.Sub(b); got != a {
		t.Errorf("Sub = %+v, want %+v", got, a)
	}
	str := a.String()
	for _, want := range []string{"2 batches", "256.0 img/batch", "hardware 200.0", "gpu 56.0", "nvjpeg-hw 10.00", "kernels 0.200"} {
		if !strings.Contains(str, want) {
			t.Errorf("String() = %q: no %q", str, want)
		}
	}
	if got := (Stats{}).String(); got != "no batches" {
		t.Errorf("empty String() = %q", got)
	}
}
