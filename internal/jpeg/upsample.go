package jpeg

// Chroma upsampling as libjpeg does it by default ("fancy" upsampling,
// jdsample.c's behaviour): a component subsampled by 2 in one or both
// directions is interpolated with a triangle filter that weights the
// nearer sample 3/4 and the farther 1/4, with alternating rounding biases;
// every other ratio replicates samples.

// UpsampleRow fills dst, one full-resolution row of a component that is
// subsampled fx times horizontally and fy times vertically. near is the
// subsampled row the output row falls in (len(near) = ceil(len(dst)/fx)).
// For fy == 2 with fx <= 2, far is the neighbouring subsampled row on the
// output row's side (near itself at the image's edges) and lower says the
// output row is the second of its pair; otherwise both are ignored.
func UpsampleRow(dst, near, far []uint8, fx, fy int, lower bool) {
	switch {
	case fx == 1 && fy == 1:
		copy(dst, near)
	case fx == 2 && fy == 1:
		h2v1(dst, near)
	case fx == 1 && fy == 2:
		// The vertical half of the 2x2 filter, biased 1 on the upper
		// output row and 2 on the lower.
		bias := 1
		if lower {
			bias = 2
		}
		for x := range dst {
			dst[x] = uint8((int(near[x])*3 + int(far[x]) + bias) >> 2)
		}
	case fx == 2 && fy == 2:
		h2v2(dst, near, far)
	default:
		for x := range dst {
			dst[x] = near[x/fx]
		}
	}
}

// h2v1 interpolates horizontally only.
func h2v1(dst, in []uint8) {
	n := len(in)
	put := func(i, v int) {
		if i < len(dst) {
			dst[i] = uint8(v)
		}
	}
	if n == 1 {
		for i := range dst {
			dst[i] = in[0]
		}
		return
	}
	put(0, int(in[0]))
	put(1, (int(in[0])*3+int(in[1])+2)>>2)
	for i := 1; i < n-1; i++ {
		v := int(in[i]) * 3
		put(2*i, (v+int(in[i-1])+1)>>2)
		put(2*i+1, (v+int(in[i+1])+2)>>2)
	}
	put(2*(n-1), (int(in[n-1])*3+int(in[n-2])+1)>>2)
	put(2*(n-1)+1, int(in[n-1]))
}

// h2v2 interpolates both ways: first the column sums 3*near + far, then
// the triangle filter across them, in sixteenths.
func h2v2(dst, near, far []uint8) {
	n := len(near)
	col := func(i int) int { return int(near[i])*3 + int(far[i]) }
	put := func(i, v int) {
		if i < len(dst) {
			dst[i] = uint8(v)
		}
	}
	if n == 1 {
		v := uint8((col(0)*4 + 8) >> 4)
		for i := range dst {
			dst[i] = v
		}
		return
	}
	this, next := col(0), col(1)
	put(0, (this*4+8)>>4)
	put(1, (this*3+next+7)>>4)
	last := this
	this = next
	for i := 1; i < n-1; i++ {
		next = col(i + 1)
		put(2*i, (this*3+last+8)>>4)
		put(2*i+1, (this*3+next+7)>>4)
		last, this = this, next
	}
	put(2*(n-1), (this*3+last+8)>>4)
	put(2*(n-1)+1, (this*4+7)>>4)
}

// upsamplePlane writes a w x h plane into dst from a component plane src
// (rows of stride bytes) subsampled fx x fy.
func upsamplePlane(dst []uint8, w, h int, src []uint8, stride, fx, fy int) {
	for y := 0; y < h; y++ {
		UpsamplePlaneRow(dst[y*w:(y+1)*w], y, h, src, stride, fx, fy)
	}
}

// UpsamplePlaneRow fills dst with row y of an image h rows high, from a
// component plane src (rows of stride bytes) subsampled fx x fy: the rows
// UpsampleRow needs, picked as libjpeg does (the edges repeat).
func UpsamplePlaneRow(dst []uint8, y, h int, src []uint8, stride, fx, fy int) {
	sw, sh := (len(dst)+fx-1)/fx, (h+fy-1)/fy
	row := func(cy int) []uint8 { return src[cy*stride : cy*stride+sw] }
	cy := y / fy
	near, far, lower := row(cy), []uint8(nil), false
	if fy == 2 && fx <= 2 {
		ny := cy - 1
		if lower = y%2 == 1; lower {
			ny = cy + 1
		}
		far = row(min(max(ny, 0), sh-1))
	}
	UpsampleRow(dst, near, far, fx, fy, lower)
}
