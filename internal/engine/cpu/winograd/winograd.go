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

// gMat is G of F(4x4, 3x3) (6x3), the weight transform's factor.
var gMat = [In][3]float64{
	{1.0 / 4, 0, 0},
	{-1.0 / 6, -1.0 / 6, -1.0 / 6},
	{-1.0 / 6, 1.0 / 6, -1.0 / 6},
	{1.0 / 24, 1.0 / 12, 1.0 / 6},
	{1.0 / 24, -1.0 / 12, 1.0 / 6},
	{0, 0, 1},
}

// Weights are a convolution's weights transformed to the 36 points, each
// point's K x C matrix packed for the GEMM micro-kernels.
type Weights struct {
	K, C int
	U    [Points]*gemm.PackedA
}

// TransformWeights transforms w (K x C x 3 x 3, as ONNX and PyTorch store a
// convolution's weights) to U = G g Gt per channel pair, in float64 so that
// the transform itself adds no rounding beyond the final float32.
func TransformWeights(w []float32, k, c int) (*Weights, error) {
	if k < 1 || c < 1 || len(w) != k*c*9 {
		return nil, fmt.Errorf("winograd: %d weights for %d x %d x 3 x 3", len(w), k, c)
	}
	u := make([][]float32, Points)
	for p := range u {
		u[p] = make([]float32, k*c)
	}
	for i := 0; i < k*c; i++ {
		g := w[i*9 : i*9+9]
		var t [In][3]float64 // G g
		for r := range In {
			for col := range 3 {
				for j := range 3 {
					t[r][col] += gMat[r][j] * float64(g[j*3+col])
				}
			}
		}
		for r := range In {
			for s := range In {
				var v float64
				for j := range 3 {
					v += t[r][j] * gMat[s][j]
				}
				u[r*In+s][i] = float32(v)
			}
		}
	}
	out := &Weights{K: k, C: c}
	for p := range u {
		a, err := gemm.PackA(u[p], k, c, c, gemm.BlockDepth(c))
		if err != nil {
			return nil, fmt.Errorf("winograd: packing point %d: %w", p, err)
		}
		out.U[p] = a
	}
	return out, nil
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
