//go:build !amd64 || purego

package winograd

// There are no SIMD transforms here.
var (
	hasAVX512 = false
	useAsm    = false
	useAVX512 = false
)

// Fast reports whether the transforms run as SIMD code here, which is
// what makes Winograd pay.
func Fast() bool { return false }

// inputRows and inputCols are never called without useAsm.
func inputRows(src []float32, off, plane, nc int, masks *[5]uint16, dst []float32, doff, ld, lanes int) {
	panic("winograd: inputRows without SIMD transforms")
}

func inputCols(r []float32, ld, nc int, v []float32, xs int) {
	panic("winograd: inputCols without SIMD transforms")
}

// outputCols and outputRows are never called without useAsm.
func outputCols(m []float32, xs, ld, nk int, y []float32, p *Panel) {
	panic("winograd: outputCols without SIMD transforms")
}

func outputRows(y []float32, ld, nk, lanes int, dst []float32, doff int, res []float32, plane int, masks *[4]uint16, bias []float32, flags int) {
	panic("winograd: outputRows without SIMD transforms")
}
