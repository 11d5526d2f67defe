//go:build amd64 && !purego

package vec

//go:noescape
func dwTileAVX2(out, in, w, bias *float32, offs *int, taps, oh, ow, rs, cs int)

//go:noescape
func dwTileAVX512(out, in, w, bias *float32, offs *int, taps, oh, ow, rs, cs int)

func dwTile(out, in, w, bias []float32, offs []int, oh, ow, rs, cs int) {
	switch {
	case len(offs) == 0 || !useAsm:
		dwTileGo(out, in, w, bias, offs, oh, ow, rs, cs)
	case useAVX512:
		dwTileAVX512(&out[0], &in[0], &w[0], &bias[0], &offs[0], len(offs), oh, ow, rs, cs)
	default:
		dwTileAVX2(&out[0], &in[0], &w[0], &bias[0], &offs[0], len(offs), oh, ow, rs, cs)
	}
}
