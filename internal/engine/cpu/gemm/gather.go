package gemm

import "fmt"

// Gather describes how to pack one NR-wide B panel from an image without
// building an im2col matrix: row kk of the panel, lane l, is
// src[Offs[kk] + Lanes[l]] where Masks[Mask[kk]*NR + l] is -1, and zero
// where it is 0 (padding, or a lane past the matrix's last column). A
// convolution sets Lanes to each output pixel's top-left input offset,
// Offs to each B row's channel plane plus kernel offset, and one mask per
// kernel position.
type Gather struct {
	Offs  []int32 // per row, the element offset added to every lane
	Mask  []int32 // per row, the index of its mask
	Masks []int32 // masks of NR lanes each: -1 (read) or 0 (zero)
	Lanes [NR]int32
	// Contiguous says Lanes[l] == Lanes[0]+l, so rows are masked loads of
	// NR consecutive values instead of gathers.
	Contiguous bool
}

// PackGather packs len(g.Offs) rows into dst (len(g.Offs)*NR values). Every
// unmasked lane's index must lie within src; masked lanes are never read.
func PackGather(dst, src []float32, g *Gather) {
	kc := len(g.Offs)
	if kc == 0 {
		return
	}
	if len(g.Mask) < kc || len(dst) < kc*NR {
		panic(fmt.Sprintf("gemm: PackGather of %d rows: %d mask indices, %d dst values", kc, len(g.Mask), len(dst)))
	}
	packGather(dst[:kc*NR], src, g)
}

// packGatherGo is the portable PackGather.
func packGatherGo(dst, src []float32, g *Gather) {
	for kk, off := range g.Offs {
		d := dst[kk*NR : kk*NR+NR : kk*NR+NR]
		mi := int(g.Mask[kk]) * NR
		m := g.Masks[mi : mi+NR : mi+NR]
		for l := range d {
			if m[l] != 0 {
				d[l] = src[int(off)+int(g.Lanes[l])]
			} else {
				d[l] = 0
			}
		}
	}
}
