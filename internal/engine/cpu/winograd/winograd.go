// Package winograd runs 3x3 stride-1 convolutions (dilation 1, one group)
// as Winograd F(4x4, 3x3): every 4x4 block of output pixels (a tile) is
// computed from the 6x6 input patch around it with 36 multiplications per
// input and output channel pair instead of 144, a 4x cut of the GEMM work
// that dominates ResNets.
//
// The input patch d of a tile is transformed to V = Bt d B and the weights
// g of each channel pair to U = G g Gt (once, at load); for each of the 36
// transform points the products U*V summed over input channels are one
// GEMM (output channels x input channels times input channels x tiles),
// run by the gemm package's micro-kernels; the output transform
// Y = At M A then gives the 4x4 outputs, to which the bias, residual and
// ReLU are applied on the way out.
//
// Tiles are processed 16 at a time (a panel, one per SIMD lane and one
// NR-wide GEMM panel), so the transforms run on whole vectors: gathered
// from the input planes, scattered to the output planes.
package winograd

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"goinfer/internal/engine/cpu/gemm"
)

const (
	// Out is a tile's output size, In its input patch size (Out + 2).
	Out = 4
	In  = 6
	// Points is the number of transform points (In x In), that is of the
	// GEMMs per tile block.
	Points = In * In
	// lanes is the tiles of one panel: a GEMM B panel's width.
	lanes = gemm.NR
)

// Weights are a convolution's weights transformed to the 36 points, each
// point's K x C matrix packed for the GEMM micro-kernels.
type Weights struct {
	K, C int
	U    [Points]*gemm.PackedA
}

// TransformWeights transforms w (K x C x 3 x 3, as ONNX and PyTorch store a
// convolution's weights) to U = G g Gt per channel pair, in float64 so that
// the transform itself adds no rounding beyond the final float32. The values
// go straight into the 36 packed matrices, output channels split over
// GOMAXPROCS goroutines: a model's load transforms millions of channel pairs.
func TransformWeights(w []float32, k, c int) (*Weights, error) {
	if k < 1 || c < 1 || len(w) != k*c*9 {
		return nil, fmt.Errorf("winograd: %d weights for %d x %d x 3 x 3", len(w), k, c)
	}
	out := &Weights{K: k, C: c}
	us, err := gemm.NewPackedAs(Points, k, c, gemm.BlockDepth(c))
	if err != nil {
		return nil, fmt.Errorf("winograd: %w", err)
	}
	copy(out.U[:], us)
	// Work comes in whole MR-row panels, so that no two goroutines write
	// the same cache lines.
	panels := out.U[0].Panels
	workers := min(runtime.GOMAXPROCS(0), panels, max(1, k*c/(64*64)))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			var tmp panelTemp
			for {
				ip := int(next.Add(1) - 1)
				if ip >= panels {
					return
				}
				out.transformPanel(w, ip, &tmp)
			}
		})
	}
	wg.Wait()
	return out, nil
}

// tempCols is the columns (input channels) a panel is transformed by at a
// time: a point's MR x tempCols values are one contiguous run of its packed
// matrix.
const tempCols = 64

// panelTemp holds MR x tempCols transformed values of every point. The 36
// packed matrices are equal parts of one block, so an element lies at the
// same offset in each: writing them value by value would touch 36 lines of
// one cache set in turn. They are filled by whole runs instead.
type panelTemp [Points][gemm.MR * tempCols]float32

// transformPanel transforms the kernels of the output channels of MR-row
// panel ip.
func (w *Weights) transformPanel(g []float32, ip int, tmp *panelTemp) {
	r0 := ip * gemm.MR
	rows := min(gemm.MR, w.K-r0)
	if rows < gemm.MR {
		*tmp = panelTemp{} // the rows past K stay zero
	}
	kc := w.U[0].KC
	for k0 := 0; k0 < w.C; k0 += kc {
		for c0 := k0; c0 < min(w.C, k0+kc); c0 += tempCols {
			n := min(tempCols, w.C-c0, k0+kc-c0)
			for i := range rows {
				kern := g[((r0+i)*w.C+c0)*9:]
				for j := range n {
					var u [Points]float64
					transformKernel((*[9]float32)(kern[j*9:j*9+9]), &u)
					for p := range Points {
						tmp[p][j*gemm.MR+i] = float32(u[p])
					}
				}
			}
			off := w.U[0].Offset(r0, c0)
			for p, a := range w.U {
				copy(a.Data[off:off+n*gemm.MR], tmp[p][:n*gemm.MR])
			}
		}
	}
}

// transformKernel computes u = G g Gt (row-major 6x6) for one 3x3 kernel g,
// G's rows being (1/4, 0, 0), -(1, 1, 1)/6, -(1, -1, 1)/6,
// (1/24, 1/12, 1/6), (1/24, -1/12, 1/6), (0, 0, 1): with the shared sums,
// 9 operations per column instead of 18 multiply-adds.
func transformKernel(g *[9]float32, u *[Points]float64) {
	var t [In][3]float64 // G g
	for col := range 3 {
		t0, t1, t2, t3, t4, t5 := gRows(float64(g[col]), float64(g[3+col]), float64(g[6+col]))
		t[0][col], t[1][col], t[2][col], t[3][col], t[4][col], t[5][col] = t0, t1, t2, t3, t4, t5
	}
	for r := range In {
		u0, u1, u2, u3, u4, u5 := gRows(t[r][0], t[r][1], t[r][2])
		u[r*In], u[r*In+1], u[r*In+2], u[r*In+3], u[r*In+4], u[r*In+5] = u0, u1, u2, u3, u4, u5
	}
}

// gRows is G times the column (a, b, c).
func gRows(a, b, c float64) (t0, t1, t2, t3, t4, t5 float64) {
	ac := a + c
	p := a*(1.0/24) + c*(1.0/6)
	q := b * (1.0 / 12)
	return a * 0.25, (ac + b) * (-1.0 / 6), (ac - b) * (-1.0 / 6), p + q, p - q, c
}

// Bytes is the memory the packed weights take.
func (w *Weights) Bytes() int64 {
	n := int64(0)
	for _, a := range w.U {
		n += 4 * int64(len(a.Data))
	}
	return n
}

// Mode says when an engine runs eligible convolutions (3x3, stride 1,
// dilation 1, one group) as Winograd.
type Mode uint8

const (
	// Auto: where it pays (Fast transforms and Conv.Pays).
	Auto Mode = iota
	// Off: never; every convolution runs as a direct GEMM.
	Off
	// On: every eligible convolution (tests).
	On
)

// Use reports whether mode runs g at batch n as Winograd, g being
// eligible.
func (m Mode) Use(g *Conv, n int) bool {
	switch m {
	case Off:
		return false
	case On:
		return true
	}
	return Fast() && g.Pays(n)
}
