package winograd

// Conv is a 3x3 stride-1 convolution's geometry: N images of C input
// channels of IH x IW, K output channels of OH x OW, padded PT rows on top
// and PL columns on the left (the output size implies the rest).
type Conv struct {
	N, C, K        int
	IH, IW, OH, OW int
	PT, PL         int
}

// tiles returns the tile rows and columns of an image and the tiles of
// n images.
func (g *Conv) tiles(n int) (th, tw, total int) {
	th, tw = (g.OH+Out-1)/Out, (g.OW+Out-1)/Out
	return th, tw, n * th * tw
}

// Pays reports whether Winograd should beat the direct GEMM on this
// convolution at batch n: the 36 transform points of a 16-tile panel must
// cost at most half the 9 kernel taps of the 16-pixel panels the direct
// GEMM runs (small images leave a panel's lanes empty), and the channels
// must be many enough that the transforms' cost per channel, shared by the
// other side's channels, stays small.
func (g *Conv) Pays(n int) bool {
	if g.C < 16 || g.K < 16 {
		return false
	}
	_, _, t := g.tiles(n)
	tp := (t + lanes - 1) / lanes
	pp := (n*g.OH*g.OW + lanes - 1) / lanes
	return 8*tp <= pp
}

// Panel holds where the tiles of one panel read and write: for each of the
// 36 input patch positions and 16 output positions, per lane, the offset
// from channel 0 of image 0 (the image's channels included) and a mask of
// the lanes for which it lies inside the image (lanes past the last tile
// are off everywhere).
type Panel struct {
	in      [Points][lanes]int32
	inMask  [Points]uint16
	out     [Out * Out][lanes]int32
	outMask [Out * Out]uint16
	// tmp is the transforms' space between their two passes.
	tmp [Points][lanes]float32
}

// prepare fills p for the tiles t0... of a batch of n images (tiles are
// numbered image by image, row by row).
func (g *Conv) prepare(p *Panel, t0, n int) {
	th, tw, total := g.tiles(n)
	*p = Panel{}
	for l := range lanes {
		t := t0 + l
		if t >= total {
			break
		}
		img, r := t/(th*tw), t%(th*tw)
		oy, ox := (r/tw)*Out, (r%tw)*Out
		iy, ix := oy-g.PT, ox-g.PL
		inBase := img * g.C * g.IH * g.IW
		for y := range In {
			for x := range In {
				pos := y*In + x
				if uint(iy+y) < uint(g.IH) && uint(ix+x) < uint(g.IW) {
					p.in[pos][l] = int32(inBase + (iy+y)*g.IW + ix + x)
					p.inMask[pos] |= 1 << l
				}
			}
		}
		outBase := img * g.K * g.OH * g.OW
		for y := range Out {
			for x := range Out {
				pos := y*Out + x
				if oy+y < g.OH && ox+x < g.OW {
					p.out[pos][l] = int32(outBase + (oy+y)*g.OW + ox + x)
					p.outMask[pos] |= 1 << l
				}
			}
		}
	}
}
