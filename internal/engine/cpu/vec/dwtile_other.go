//go:build !amd64 || purego

package vec

func dwTile(out, in, w, bias []float32, offs []int, oh, ow, rs, cs int) {
	dwTileGo(out, in, w, bias, offs, oh, ow, rs, cs)
}
