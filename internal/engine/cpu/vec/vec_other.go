//go:build !amd64 || purego

package vec

const useAsm = false

// useAVX512 is a variable so that tests can switch paths alike everywhere.
var useAVX512 = false

func scaleShift(dst, src []float32, scale, shift float32) { scaleShiftGo(dst, src, scale, shift) }
func relu(dst, src []float32)                             { reluGo(dst, src) }
func add(dst, a, b []float32)                             { addGo(dst, a, b) }
func maxInto(dst, src []float32)                          { maxGo(dst, src) }
func sum(v []float32) float32                             { return sumGo(v) }
func axpy(dst, src []float32, a float32)                  { axpyGo(dst, src, a) }
func exp(dst, src []float32)                              { expGo(dst, src) }
func taps(dst, src []float32, offs []int, w []float32, bias float32) {
	tapsGo(dst, src, offs, w, bias)
}
func activate(v []float32, kind int)          { activateGo(v, kind) }
func deinterleave2(even, odd, src []float32)  { deinterleave2Go(even, odd, src) }
func mul(dst, a, b []float32)                 { mulGo(dst, a, b) }
func expShift(dst, src []float32, m float32)  { expShiftGo(dst, src, m) }
func dot(a, b []float32) float32              { return dotGo(a, b) }
func clamp(v []float32, a, b, lo, hi float32) { clampGo(v, a, b, lo, hi) }

func maxWindows(dst, src []float32, k, stride, dil int) { maxWindowsGo(dst, src, k, stride, dil) }
func maxRows(dst, src []float32, rows, stride int)      { maxRowsGo(dst, src, rows, stride) }
