package gemm

import "fmt"

// ColsMax is the most columns a ColsPanel holds. One is what pays: at 4
// columns (a 14x14 map's end) the sums of the lanes per row cost more than
// the FMAs saved (ResNet-18's 128->256 stride-2 convolution at batch 1,
// 1 thread: 0.75-0.77 ms through the micro-kernel, 0.81 ms so).
const ColsMax = 1

// colsChunk is the depth steps of one chunk of KernelCols: MR x colsChunk
// values of a packed A panel are 48 floats, three 16-lane vectors.
const colsChunk = 8

// ColsFast reports whether KernelCols has its fast kernel on this CPU;
// without it, it costs as much as KernelTile.
func ColsFast() bool { return colsFast() }

// ColsPanel is the first few columns of a packed B panel, each value
// repeated MR times, so that a packed A panel (MR values per depth step)
// times it is an element-wise product: KernelCols then does one FMA per
// 16 products where the micro-kernel, whose lanes are B's NR columns,
// would do NR. It pays for the ragged end of a late-stage convolution's
// 7x7 output pixels at batch 1 (49 = 3 x 16 + 1), whose last panel
// otherwise costs a whole panel's FMAs.
type ColsPanel struct {
	kc, cols int
	b        []float32 // chunk by chunk: per column 48 values
	src      []float32 // the packed B panel, for the steps past whole chunks
}

// Expand fills p from the first cols columns of b, an NR-wide packed panel
// of depth kc; buf is where the expansion goes (at least ColsBufLen(kc)
// floats), so that workers reuse theirs.
func (p *ColsPanel) Expand(kc int, b []float32, cols int, buf []float32) {
	if cols < 1 || cols > ColsMax || len(b) < kc*NR || len(buf) < ColsBufLen(kc) {
		panic(fmt.Sprintf("gemm: ColsPanel.Expand(kc=%d, len b=%d, cols=%d, len buf=%d): bad operands", kc, len(b), cols, len(buf)))
	}
	p.kc, p.cols, p.src = kc, cols, b
	p.b = buf[:kc/colsChunk*cols*MR*colsChunk]
	for c := 0; c < kc/colsChunk; c++ {
		for j := range cols {
			d := p.b[(c*cols+j)*MR*colsChunk:][:MR*colsChunk]
			for u := range colsChunk {
				v := b[(c*colsChunk+u)*NR+j]
				for r := range MR {
					d[u*MR+r] = v
				}
			}
		}
	}
}

// ColsBufLen is the floats ColsPanel.Expand needs at depth kc.
func ColsBufLen(kc int) int { return kc / colsChunk * ColsMax * MR * colsChunk }

// KernelCols computes the tile C = A*B for the columns of p into tile (MR
// x NR, row stride NR, as KernelTile writes it; only p's columns are
// written), a being an MR-row panel of p's depth.
func KernelCols(a []float32, p *ColsPanel, tile []float32) {
	kc := p.kc
	if len(a) < kc*MR || len(tile) < MR*NR {
		panic(fmt.Sprintf("gemm: KernelCols(kc=%d, len a=%d, len tile=%d): operands too short", kc, len(a), len(tile)))
	}
	var acc [ColsMax * MR * colsChunk]float32
	if n := kc / colsChunk; n > 0 {
		colsDot(n, &a[0], &p.b[0], &acc[0])
	}
	k0 := kc / colsChunk * colsChunk
	for j := range p.cols {
		s := acc[j*MR*colsChunk:][:MR*colsChunk]
		for r := range MR {
			v := s[r]
			for u := 1; u < colsChunk; u++ {
				v += s[u*MR+r]
			}
			for k := k0; k < kc; k++ {
				v += a[k*MR+r] * p.src[k*NR+j]
			}
			tile[r*NR+j] = v
		}
	}
}

// ColsCache is a worker's ColsPanel with the buffer it expands into, which
// it expands again only for another K-block: the narrow panel of a task's
// pixels is the same one for every row panel of that K-block.
type ColsCache struct {
	ColsPanel
	buf []float32
	kb  int // the K-block expanded, -1 for none
}

// NewColsCache returns an empty ColsCache for depths up to KCMax.
func NewColsCache() ColsCache {
	return ColsCache{buf: make([]float32, ColsBufLen(KCMax)), kb: -1}
}

// Reset forgets the expanded panel (a new task's pixels).
func (c *ColsCache) Reset() { c.kb = -1 }

// For returns the ColsPanel of the first cols columns of b, the narrow
// packed panel of K-block kb (depth kc), expanding it unless it already
// holds kb's.
func (c *ColsCache) For(kb, kc int, b []float32, cols int) *ColsPanel {
	if c.kb != kb {
		c.Expand(kc, b, cols, c.buf)
		c.kb = kb
	}
	return &c.ColsPanel
}

// Floats is the size of the cache's buffer.
func (c *ColsCache) Floats() int { return len(c.buf) }
