package cuda

import (
	"fmt"
	"math"
	"slices"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// Depthwise convolutions of channels-last values have two lowerings: the
// engine's own kernel (graph.cu's dwconv_tile, dwconv_vec or dwconv, the
// epilogue fused) and cuDNN's grouped convolution (with an epilogue kernel
// where the fused call cannot apply it). Neither wins everywhere, so a
// compiled model times both for each distinct layer shape
// (graphdwtune.go) and plans with the result.

// dwShape is a depthwise convolution's problem: what the choice between
// the lowerings is keyed on (the tuning cache adds the precision).
type dwShape struct {
	N, C, H, W, OH, OW int
	KH, KW, SH, SW     int
	PH, PW, DH, DW     int
	// Pre is the prologue's op code (0: none; graphprologue.go) and
	// PreP0, PreP1 its parameters: our kernel with the prologue is timed
	// against the producer's activation kernel, cuDNN and its epilogue.
	// Absent from tuning caches written before prologues (zero: none).
	Pre          int     `json:",omitempty"`
	PreP0, PreP1 float32 `json:",omitempty"`
}

func (g *convGeom) dwShape() dwShape {
	return dwShape{N: g.n, C: g.c, H: g.h, W: g.w, OH: g.oh, OW: g.ow, KH: g.kh, KW: g.kw, SH: g.strH, SW: g.strW,
		PH: g.padH, PW: g.padW, DH: g.dilH, DW: g.dilW, Pre: g.pre.op, PreP0: g.pre.p0, PreP1: g.pre.p1}
}

func (s dwShape) String() string {
	str := fmt.Sprintf("%dx%dx%dx%d k%dx%d s%d p%d", s.N, s.C, s.H, s.W, s.KH, s.KW, s.SH, s.PH)
	if s.Pre != ewCopy {
		str += fmt.Sprintf(" prologue %d", s.Pre)
	}
	return str
}

// geom is the convolution geometry of s (a depthwise convolution: one
// filter per channel, channels-last).
func (s dwShape) geom() *convGeom {
	return &convGeom{n: s.N, c: s.C, h: s.H, w: s.W, k: s.C, oh: s.OH, ow: s.OW, kh: s.KH, kw: s.KW, strH: s.SH, strW: s.SW,
		padH: s.PH, padW: s.PW, dilH: s.DH, dilW: s.DW, groups: s.C, nhwc: true, pre: preAct{op: s.Pre, p0: s.PreP0, p1: s.PreP1}}
}

// isDepthwise reports whether g is a depthwise convolution the planner
// can give its own kernel.
func (g *convGeom) isDepthwise() bool { return g.groups == g.c && g.k == g.c && g.groups > 1 }

// convGeomOf is a Conv node's geometry for input, filter and output shapes.
func convGeomOf(op *ir.Conv, xs, ws, ys tensor.Shape, weight int) (*convGeom, error) {
	if len(xs) != 4 {
		return nil, refuse("%d-d convolution (the engine runs 2-d ones)", len(xs)-2)
	}
	g := &convGeom{n: xs[0], c: xs[1], h: xs[2], w: xs[3], k: ys[1], oh: ys[2], ow: ys[3], kh: ws[2], kw: ws[3],
		strH: 1, strW: 1, dilH: 1, dilW: 1, groups: max(op.Group, 1), weight: weight}
	if len(op.Strides) == 2 {
		g.strH, g.strW = op.Strides[0], op.Strides[1]
	}
	if len(op.Dilations) == 2 {
		g.dilH, g.dilW = op.Dilations[0], op.Dilations[1]
	}
	if len(op.Pads) == 4 {
		if op.Pads[0] != op.Pads[2] || op.Pads[1] != op.Pads[3] {
			return nil, refuse("asymmetric padding %v", op.Pads)
		}
		g.padH, g.padW = op.Pads[0], op.Pads[1]
	}
	if ws[1]*g.groups != xs[1] {
		return nil, fmt.Errorf("filter %v with %d groups on input %v", ws, g.groups, xs)
	}
	return g, nil
}

// depthwiseShapes lists the distinct depthwise problems of a bound graph
// that a channels-last plan would lower, in graph order, each with the
// prologue its candidate (pre, by node) would give it.
func depthwiseShapes(g *ir.Graph, pre map[*ir.Node]prologue) []dwShape {
	seen := map[dwShape]bool{}
	var out []dwShape
	for _, n := range g.Nodes {
		op, ok := n.Op.(*ir.Conv)
		if !ok || len(n.Inputs) < 2 || len(n.Outputs) < 1 || n.Inputs[1].Const == nil {
			continue
		}
		cg, err := convGeomOf(op, n.Inputs[0].Type.Shape, n.Inputs[1].Type.Shape, n.Outputs[0].Type.Shape, -1)
		if err != nil || !cg.isDepthwise() {
			continue
		}
		if c, ok := pre[n]; ok {
			cg.pre = c.act
		}
		if s := cg.dwShape(); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// dwTiles lists the tile widths (neighbouring outputs per thread) of the
// tiled kernel (graph.cu's dwconv_tile) that can run g, the default
// first; none where that kernel does not apply. It needs 16-bit storage,
// channels in 16-byte vectors, and square 3, 5 or 7 filters of stride 1
// or 2 without dilation (the shapes graph.cu instantiates: tiles of 7 and
// 1 and the row split for all, of 4 for 3x3 and 5x5, and the sliding
// window where the step has no prologue).
func dwTiles(g *convGeom, elem int) []int {
	if elem != 2 || g.c%8 != 0 || g.kh != g.kw || g.strH != g.strW || g.dilH != 1 || g.dilW != 1 {
		return nil
	}
	if g.strH != 1 && g.strH != 2 {
		return nil
	}
	var tiles []int
	switch g.kh {
	case 3, 5:
		tiles = []int{7, 4, 1, dwRows}
	case 7:
		tiles = []int{7, 1, dwRows}
	default:
		return nil
	}
	if g.pre.op == ewCopy {
		// The sliding window has no prologue (graph.cu's dwconv_slide);
		// widths of graph.cu's DWS_K.
		tiles = append(tiles, dwSlideTile(7), dwSlideTile(4), dwSlideTile(2))
	}
	switch {
	case g.strH == 1:
		tiles = append(tiles, dwBlock14, dwBlock7)
	case g.kh <= 5:
		// Stride 2: 7 x 7 tiles only (graph.cu's DWB2).
		tiles = append(tiles, dwBlock7)
	}
	return tiles
}

// dwBlock14 and dwBlock7 are the tile "widths" that name graph.cu's
// dwconv_smem: a block of dwBlockThreads threads per 14 x 14 outputs of 32
// channels (stride 1), or per 7 x 7 outputs of 64 channels (stride 1, and
// stride 2 for 3x3 and 5x5 filters), the input window and filter staged in
// shared memory.
const (
	dwBlock14 = -20
	dwBlock7  = -21
)

// dwBlockThreads is dwconv_smem's block size in both shapes (P*RG*CG).
const dwBlockThreads = 224

// dwBlockShape is the output tile side and channels per block of tile
// value t, and whether t names a shared-memory kernel.
func dwBlockShape(t int) (side, chans int, ok bool) {
	switch t {
	case dwBlock14:
		return 14, 32, true
	case dwBlock7:
		return 7, 64, true
	}
	return 0, 0, false
}

// dwRows is the tile "width" that names graph.cu's dwconv_rows: one output
// vector per group of lanes, a lane per filter row (batch 1's small maps).
const dwRows = -1

// dwSlideBase - w is the tile "width" that names graph.cu's dwconv_slide
// with w outputs per thread (a thread per channel and w outputs of a row,
// the filter in registers, the input read a column at a time).
const dwSlideBase = -10

// dwSlideTile is the tile value of the sliding-window kernel of width w.
func dwSlideTile(w int) int { return dwSlideBase - w }

// dwSlideWidth is the outputs per thread of tile value t, and whether t
// names a sliding-window kernel.
func dwSlideWidth(t int) (int, bool) {
	w := dwSlideBase - t
	return w, w > 0 && w <= 8
}

// isSlide says whether tile names a sliding-window kernel.
func isSlide(tile int) bool {
	_, ok := dwSlideWidth(tile)
	return ok
}

// dwRowLanes is dwconv_rows' group of lanes for a k x k filter: k rounded
// up to a power of two.
func dwRowLanes(k int) int64 {
	if k <= 4 {
		return 4
	}
	return 8
}

// dwTileWidth is the default tile width for g (dwTiles' first), or 0.
func dwTileWidth(g *convGeom, elem int) int {
	if t := dwTiles(g, elem); len(t) > 0 {
		return t[0]
	}
	return 0
}

// dwLowering is the plan's depthwise lowering for g given the measured
// choices: cuDNN, or our kernel with the measured tile width (0: the
// vector kernel), or by default our kernel with the default tile.
func dwLowering(g *convGeom, elem int, chosen map[dwShape]dwTimed) (cudnn bool, tile int) {
	t, ok := chosen[g.dwShape()]
	if !ok {
		return false, dwTileWidth(g, elem)
	}
	if t.CuDNN {
		return true, 0
	}
	if t.Tile != 0 && !slices.Contains(dwTiles(g, elem), t.Tile) {
		// A cache entry naming a tile this build lacks: the default.
		return false, dwTileWidth(g, elem)
	}
	return false, t.Tile
}

// dwTileName is the tiled kernel's name for g, less the dtype suffix.
func dwTileName(g *convGeom, tw int) string {
	if tw == dwRows {
		return fmt.Sprintf("g_dwr_k%ds%d_", g.kh, g.strH)
	}
	if w, ok := dwSlideWidth(tw); ok {
		return fmt.Sprintf("g_dws_k%ds%dt%d_", g.kh, g.strH, w)
	}
	if side, _, ok := dwBlockShape(tw); ok {
		return fmt.Sprintf("g_dwb_k%ds%dt%d_", g.kh, g.strH, side)
	}
	return fmt.Sprintf("g_dwt_k%ds%dt%d_", g.kh, g.strH, tw)
}

// dwStep is the engine's own depthwise step for g: filter w ([C][kh][kw]
// as the IR holds it, reordered [kh][kw][C] for the vector kernels), bias
// and activation fused; the residual is the caller's.
func dwStep(g *convGeom, x, y int, w, bias []float32, elems int64, elem int, act int, p0, p1 float32) *gstep {
	s := &gstep{kind: stDW, out: y, a: x, b: -1, res: -1, conv: g, scale: w, shift: bias, n: elems, op: act, p0: p0, p1: p1}
	for k, v := range []int{g.n, g.c, g.h, g.w, g.oh, g.ow, g.kh, g.kw, g.strH, g.strW, g.padH, g.padW, g.dilH, g.dilW} {
		s.meta[k] = int32(v)
	}
	if g.c%(16/elem) == 0 {
		s.vec = true
		t := make([]float32, len(w))
		for c := 0; c < g.c; c++ {
			for j := 0; j < g.kh*g.kw; j++ {
				t[j*g.c+c] = w[c*g.kh*g.kw+j]
			}
		}
		s.scale = t
		s.tile = dwTileWidth(g, elem)
	}
	return s
}

// dwMetaPre is where a depthwise step's index description holds its
// prologue: op code, then the bits of its two parameters (graph.cu's
// dw_pre).
const dwMetaPre = 14

// setPre writes the prologue p into the depthwise step's description.
func (s *gstep) setPre(p preAct) {
	s.meta[dwMetaPre] = int32(p.op)
	s.meta[dwMetaPre+1] = int32(math.Float32bits(p.p0))
	s.meta[dwMetaPre+2] = int32(math.Float32bits(p.p1))
}

// dwWork is the number of threads a depthwise step launches: outputs,
// vectors of channels, or (tiled) rows of tile vectors; for the
// shared-memory kernel, the number of blocks' items (dwLaunch).
func dwWork(s *gstep, elem int) int64 {
	g := s.conv
	if side, chans, ok := dwBlockShape(s.tile); ok {
		return int64(g.n) * int64((g.oh+side-1)/side) * int64((g.ow+side-1)/side) * int64((g.c+chans-1)/chans)
	}
	if w, ok := dwSlideWidth(s.tile); ok {
		return int64(g.n) * int64(g.oh) * int64((g.ow+w-1)/w) * int64(g.c)
	}
	switch {
	case s.tile == dwRows:
		lanes := int64(g.n) * int64(g.oh) * int64(g.ow) * int64(g.c/(16/elem)) * dwRowLanes(g.kh)
		return (lanes + 31) / 32 * 32
	case s.tile > 0:
		return int64(g.n) * int64(g.oh) * int64((g.ow+s.tile-1)/s.tile) * int64(g.c/(16/elem))
	case s.vec:
		return s.n / int64(16/elem)
	}
	return s.n
}

// dwLaunch is the launch shape of depthwise step s for n work items
// (dwWork): a block per item of the shared-memory kernel (which strides
// over items past the grid), threads otherwise.
func dwLaunch(s *gstep, n int64) (grid, block int) {
	if _, _, ok := dwBlockShape(s.tile); ok {
		return int(max(min(n, 65535), 1)), dwBlockThreads
	}
	return gridFor(n)
}

// isBlock says whether tile names a shared-memory kernel.
func isBlock(tile int) bool {
	_, _, ok := dwBlockShape(tile)
	return ok
}

// dwAlgoName names the own kernel a depthwise step runs, for profiles.
func dwAlgoName(s *gstep) string {
	name := "goinfer scalar"
	w, slide := dwSlideWidth(s.tile)
	switch {
	case s.tile == dwRows:
		name = fmt.Sprintf("goinfer row-split k%ds%d", s.conv.kh, s.conv.strH)
	case slide:
		name = fmt.Sprintf("goinfer sliding k%ds%d x%d", s.conv.kh, s.conv.strH, w)
	case isBlock(s.tile):
		side, _, _ := dwBlockShape(s.tile)
		name = fmt.Sprintf("goinfer shared-memory k%ds%d %dx%d", s.conv.kh, s.conv.strH, side, side)
	case s.tile > 0:
		name = fmt.Sprintf("goinfer tiled k%ds%d x%d", s.conv.kh, s.conv.strH, s.tile)
	case s.vec:
		name = "goinfer vector"
	}
	if s.meta[dwMetaPre] != ewCopy {
		name += " prologue"
	}
	return name
}

// chanScale lowers out = a op b, where a and out are the same
// channels-last 4-d value and b holds one value per image and channel
// ([N, C, 1, 1]: squeeze-and-excitation's channel scale), to graph.cu's
// vectorized scale_cl kernel; it reports whether it did. Commutative ops
// take the operands in either order.
func (nc *nodeCtx) chanScale(code, a, b, out int) bool {
	os := nc.val(out).shape
	if !nc.val(out).nhwc || len(os) != 4 || os[1]%(16/nc.pl.p.elem) != 0 || nc.pl.p.isView(out) ||
		!nc.aligned(out) || !nc.aligned(a) || !nc.aligned(b) {
		// The kernel moves 16-byte vectors: no views at odd offsets.
		return false
	}
	perChannel := func(v int) bool {
		s := nc.val(v).shape
		st := nc.st(v)
		return len(s) == 4 && s[0] == os[0] && s[1] == os[1] && s[2] == 1 && s[3] == 1 && (s[0] == 1 || st[0] == int64(os[1])) && st[1] == 1
	}
	full := func(v int) bool {
		return nc.val(v).shape.Equal(os) && sameLayout(os, nc.st(v), nc.st(out))
	}
	switch {
	case full(a) && perChannel(b):
	case (code == ewMul || code == ewAdd || code == ewMax || code == ewMin) && full(b) && perChannel(a):
		a, b = b, a
	default:
		return false
	}
	nc.add(&gstep{kind: stEW, op: code, out: out, a: a, b: b, res: -1, n: int64(os.NumElements()), chanScale: true,
		channels: os[1], inner: os[1] * os[2] * os[3]})
	return true
}
