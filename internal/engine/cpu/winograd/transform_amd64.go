//go:build amd64 && !purego

package winograd

import "golang.org/x/sys/cpu"

//go:generate go run gen_transform_avx2.go gen_asm.go

// useAsm says the SIMD transforms run, and useAVX512 which: the AVX-512
// ones or the AVX2/FMA ones (tests switch them off to cover the Go and the
// AVX2 transforms).
var (
	hasAVX512 = cpu.X86.HasAVX512F
	useAsm    = hasAVX512 || cpu.X86.HasAVX2 && cpu.X86.HasFMA
	useAVX512 = hasAVX512
)

// Fast reports whether the transforms run as SIMD code here, which is
// what makes Winograd pay.
func Fast() bool { return useAsm }

// inRowsZ applies Bt along one input row of up to 16 consecutive tiles of
// a tile row for nc channels: it reads 80 columns from src+off under the
// 5 masks (zero elsewhere) and writes each channel's 6 row-transformed
// vectors at dst+doff, ld apart, under the lanes mask; channels are plane
// apart in src and 36*ld in dst. tab is permTab.
//
//go:noescape
func inRowsZ(src *float32, off, plane, nc int, masks *[5]uint16, dst *float32, doff, ld, lanes int, tab *[6][16]int32)

// inColsZ applies Bt along the columns of a panel's row-transformed
// patches (r: 36 rows of ld floats per channel, the panel's 16 tiles
// contiguous) and writes the GEMM's B panels (v: point pt at pt*xs, the
// channels 16 floats apart), for nc channels.
//
//go:noescape
func inColsZ(r *float32, ld, nc int, v *float32, xs int)

// permTab holds inRowsZ's permutes: for x < 4 the lanes 4t+x (t < 8) of a
// pair of vectors; then a shift by one lane bringing in lane 0 or 1 of a
// second vector.
var permTab = func() (t [6][16]int32) {
	for x := range 4 {
		for l := range 8 {
			t[x][l] = int32(4*l + x)
		}
	}
	for l := range 15 {
		t[4][l], t[5][l] = int32(l+1), int32(l+1)
	}
	t[4][15], t[5][15] = 16, 17
	return t
}()

// inRowsY, inColsY, outColsY and outRowsY are the four passes in
// AVX2/FMA (transform_avx2_amd64.s, generated), arguments as for the
// AVX-512 ones.
//
//go:noescape
func inRowsY(src *float32, off, plane, nc int, masks *[5]uint16, dst *float32, doff, ld, lanes int)

//go:noescape
func inColsY(r *float32, ld, nc int, v *float32, xs int)

//go:noescape
func outColsY(m *float32, xs, ld, nk int, y *float32, tmp *[Points][lanes]float32)

//go:noescape
func outRowsY(y *float32, ld, nk, lanes int, dst *float32, doff int, res *float32, plane int, masks *[4]uint16, bias *float32, flags int)

func inputRows(src []float32, off, plane, nc int, masks *[5]uint16, dst []float32, doff, ld, lanes int) {
	if !useAVX512 {
		inRowsY(&src[0], off, plane, nc, masks, &dst[0], doff, ld, lanes)
		return
	}
	inRowsZ(&src[0], off, plane, nc, masks, &dst[0], doff, ld, lanes, &permTab)
}

func inputCols(r []float32, ld, nc int, v []float32, xs int) {
	_ = r[(nc-1)*Points*ld+(Points-1)*ld+lanes-1]
	_ = v[(Points-1)*xs+nc*lanes-1]
	if !useAVX512 {
		inColsY(&r[0], ld, nc, &v[0], xs)
		return
	}
	inColsZ(&r[0], ld, nc, &v[0], xs)
}

// outColsZ applies At to a panel's GEMM outputs (m: point pt at pt*xs,
// channels ld apart) for nk channels and writes each tile's 16 outputs as
// rows r*4+q of y (ld floats each, channels 16*ld apart).
//
//go:noescape
func outColsZ(m *float32, xs, ld, nk int, y *float32, tmp *[Points][lanes]float32)

// outRowsZ interleaves rows r*4+q (q < 4) of y for the tiles under the
// lanes mask into 64 contiguous outputs at dst+doff, adding the bias and
// res+doff and applying ReLU as flags say, stored under the 4 column
// masks; for nk channels (16*ld floats apart in y, plane in dst and res).
//
//go:noescape
func outRowsZ(y *float32, ld, nk, lanes int, dst *float32, doff int, res *float32, plane int, masks *[4]uint16, bias *float32, flags int, tab *[4][16]int32)

// outTab holds outRowsZ's permutes: columns 0 and 1 (2 and 3) of tiles
// 0-7 and 8-15 interleaved, then the pairs into 4 consecutive columns of
// 4 tiles.
var outTab = func() (t [4][16]int32) {
	for tt := range 8 {
		t[0][2*tt], t[0][2*tt+1] = int32(tt), int32(16+tt)
		t[1][2*tt], t[1][2*tt+1] = int32(8+tt), int32(24+tt)
	}
	for e := range 16 {
		for v := range 2 {
			tt, q := 4*v+e/4, e%4
			if q < 2 {
				t[2+v][e] = int32(2*tt + q)
			} else {
				t[2+v][e] = int32(16 + 2*tt + q - 2)
			}
		}
	}
	return t
}()

func outputCols(m []float32, xs, ld, nk int, y []float32, p *Panel) {
	_ = m[(Points-1)*xs+(nk-1)*ld+lanes-1]
	_ = y[((nk-1)*16+15)*ld+lanes-1]
	if !useAVX512 {
		outColsY(&m[0], xs, ld, nk, &y[0], &p.tmp)
		return
	}
	outColsZ(&m[0], xs, ld, nk, &y[0], &p.tmp)
}

func outputRows(y []float32, ld, nk, lanes int, dst []float32, doff int, res []float32, plane int, masks *[4]uint16, bias []float32, flags int) {
	var rp, bp *float32
	if flags&flagRes != 0 {
		rp = &res[0]
	}
	if flags&flagBias != 0 {
		_ = bias[nk-1]
		bp = &bias[0]
	}
	if !useAVX512 {
		outRowsY(&y[0], ld, nk, lanes, &dst[0], doff, rp, plane, masks, bp, flags)
		return
	}
	outRowsZ(&y[0], ld, nk, lanes, &dst[0], doff, rp, plane, masks, bp, flags, &outTab)
}
