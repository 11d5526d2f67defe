//go:build amd64 && !purego

package winograd

import "golang.org/x/sys/cpu"

// useAsm says the AVX-512 transforms run (tests switch it off to cover the
// Go ones).
var useAsm = cpu.X86.HasAVX512F

// inputZ is inputGo in AVX-512 assembly: one lane per tile.
//
//go:noescape
func inputZ(src *float32, plane int, p *Panel, nc int, v *float32, xs int)

// outputZ is outputGo in AVX-512 assembly.
//
//go:noescape
func outputZ(m *float32, xs, ld, nk int, dst, res *float32, plane int, p *Panel, bias *float32, flags int)

func input(src []float32, plane int, p *Panel, nc int, v []float32, xs int) {
	if !useAsm {
		inputGo(src, plane, p, nc, v, xs)
		return
	}
	_ = v[(Points-1)*xs+nc*lanes-1]
	inputZ(&src[0], plane, p, nc, &v[0], xs)
}

func output(m []float32, xs, ld, nk int, dst, res []float32, plane int, p *Panel, bias []float32, flags int) {
	if !useAsm {
		outputGo(m, xs, ld, nk, dst, res, plane, p, bias, flags)
		return
	}
	_ = m[(Points-1)*xs+(nk-1)*ld+lanes-1]
	var rp, bp *float32
	if flags&flagRes != 0 {
		rp = &res[0]
	}
	if flags&flagBias != 0 {
		_ = bias[nk-1]
		bp = &bias[0]
	}
	outputZ(&m[0], xs, ld, nk, &dst[0], rp, plane, p, bp, flags)
}

// Fast reports whether the transforms run as SIMD code here, which is
// what makes Winograd pay.
func Fast() bool { return useAsm }
