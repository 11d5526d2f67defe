//go:build amd64 && !purego

package gemm

// packMaskedAVX2 packs kc rows of NR consecutive values with masked loads:
// row kk reads base[lane0 + offs[kk] + l] for lane l.
//
//go:noescape
func packMaskedAVX2(dst, base *float32, lane0, kc int, offs, mask, masks *int32)

// packMaskedAVX512 is packMaskedAVX2 with zmm loads under k-masks.
//
//go:noescape
func packMaskedAVX512(dst, base *float32, lane0, kc int, offs, mask, masks *int32)

// packGatherAVX2 packs kc rows with gathers at base + offs[kk] + lanes[l].
//
//go:noescape
func packGatherAVX2(dst, base *float32, kc int, offs, mask, masks, lanes *int32)

func packGather(dst, src []float32, g *Gather) {
	if !useAsm || len(src) == 0 {
		packGatherGo(dst, src, g)
		return
	}
	kc := len(g.Offs)
	// Masked lanes may address outside src (padding above or left of the
	// image); the instructions do not touch them, and the GC never sees
	// these addresses.
	if g.Contiguous && useAVX512DQ {
		packMaskedAVX512(&dst[0], &src[0], int(g.Lanes[0]), kc, &g.Offs[0], &g.Mask[0], &g.Masks[0])
		return
	}
	if g.Contiguous {
		packMaskedAVX2(&dst[0], &src[0], int(g.Lanes[0]), kc, &g.Offs[0], &g.Mask[0], &g.Masks[0])
		return
	}
	packGatherAVX2(&dst[0], &src[0], kc, &g.Offs[0], &g.Mask[0], &g.Masks[0], &g.Lanes[0])
}
