package vec

import "fmt"

// DWLanes is the channel block of DWTile: the channels one vector (or
// pair of AVX2 vectors) holds, interleaved pixel by pixel.
const DWLanes = 16

// DWTile is a depthwise convolution over a channel-blocked tile: pixel p
// of the input and output holds DWLanes channels at [p*DWLanes,
// (p+1)*DWLanes). For output pixel (oy, ox) it sets, per lane c,
//
//	out[(oy*ow+ox)*DWLanes+c] = bias[c] + sum over t of
//	    w[t*DWLanes+c] * in[(oy*rs+ox*cs+offs[t])*DWLanes+c]
//
// summed in tap order: rs and cs are the input pixels between outputs
// one row and one column apart (the stride), offs the taps' pixel offsets
// (padding and dilation are in the tile's layout). It panics if an
// operand is too short or an offset negative.
func DWTile(out, in, w, bias []float32, offs []int, oh, ow, rs, cs int) {
	if oh <= 0 || ow <= 0 {
		return
	}
	maxOff := 0
	for _, o := range offs {
		if o < 0 {
			panic(fmt.Sprintf("vec.DWTile: negative tap offset %d", o))
		}
		maxOff = max(maxOff, o)
	}
	last := (oh-1)*rs + (ow-1)*cs + maxOff
	switch {
	case rs < 0 || cs < 0:
		panic(fmt.Sprintf("vec.DWTile: negative stride %d, %d", rs, cs))
	case len(out) < oh*ow*DWLanes:
		panic(fmt.Sprintf("vec.DWTile: %d outputs for %dx%d pixels", len(out), oh, ow))
	case len(w) < len(offs)*DWLanes || len(bias) < DWLanes:
		panic(fmt.Sprintf("vec.DWTile: %d weights and %d biases for %d taps", len(w), len(bias), len(offs)))
	case len(offs) > 0 && (last+1)*DWLanes > len(in):
		panic(fmt.Sprintf("vec.DWTile: input pixel %d past a %d-float tile", last, len(in)))
	}
	dwTile(out, in, w, bias, offs, oh, ow, rs, cs)
}

func dwTileGo(out, in, w, bias []float32, offs []int, oh, ow, rs, cs int) {
	for oy := 0; oy < oh; oy++ {
		for ox := 0; ox < ow; ox++ {
			o := out[(oy*ow+ox)*DWLanes:][:DWLanes]
			copy(o, bias[:DWLanes])
			base := oy*rs + ox*cs
			for t, off := range offs {
				src := in[(base+off)*DWLanes:][:DWLanes]
				wt := w[t*DWLanes:][:DWLanes]
				for c := range o {
					o[c] += wt[c] * src[c]
				}
			}
		}
	}
}
