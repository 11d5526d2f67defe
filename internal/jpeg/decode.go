// Package jpeg decodes baseline and progressive JPEG images (ITU-T T.81,
// Huffman-coded, 8-bit) with the inverse DCT arithmetic of libjpeg's
// default integer transform, so that its samples match the decoder PIL
// and torchvision use. It returns the component planes at their coded
// resolution as an image.Image (gray, YCbCr, RGB or CMYK); chroma
// upsampling and color conversion are left to the caller, except where
// image.YCbCr cannot hold the sampling layout.
//
// Hostile input is expected: the frame size is checked against a pixel
// limit before anything is allocated, every read is bounds-checked, and a
// scan whose data ends early is an error rather than padding.
package jpeg

import (
	"bytes"
	"errors"
	"fmt"
	"image"
)

// ErrTooManyPixels is wrapped by the error for a frame larger than the
// caller's limit.
var ErrTooManyPixels = errors.New("jpeg: more pixels than allowed")

// errTruncated is wrapped by every error for data that ends too early.
var errTruncated = errors.New("file truncated")

// maxScans bounds the scans of one image; encoders use about ten.
const maxScans = 64

// Progressive end-of-band runs let a few bits cover thousands of blocks,
// and refining a block inside a run visits its whole band, so a small
// file could make the decoder loop over a huge frame many times. The
// coefficient visits not paid for by at least one bit of data are capped
// at workPerByte per byte of the file plus workBase: over 4x what a
// solid-color progressive photo needs, the cheapest real case.
const (
	workPerByte = 4096
	workBase    = 1 << 20
)

// Markers (T.81 Table B.1).
const (
	mSOF0 = 0xC0 // baseline
	mSOF1 = 0xC1 // extended sequential, Huffman
	mSOF2 = 0xC2 // progressive, Huffman
	mDHT  = 0xC4
	mRST0 = 0xD0
	mRST7 = 0xD7
	mSOI  = 0xD8
	mEOI  = 0xD9
	mSOS  = 0xDA
	mDQT  = 0xDB
	mDNL  = 0xDC
	mDRI  = 0xDD
	mAPP0 = 0xE0
	mAPPE = 0xEE
	mTEM  = 0x01
)

// unzig maps the zigzag index of a coefficient to its natural (row-major)
// index. The 16 entries past 63 catch run lengths that overshoot the
// block in corrupt data, as libjpeg's table does.
var unzig = func() (t [80]uint8) {
	// The zigzag walks the anti-diagonals row+col = s, upwards (row
	// decreasing) on even ones and downwards on odd ones.
	i := 0
	for s := 0; s <= 14; s++ {
		lo, hi := max(0, s-7), min(s, 7)
		for j := lo; j <= hi; j++ {
			row := j
			if s%2 == 0 {
				row = lo + hi - j
			}
			t[i] = uint8(8*row + s - row)
			i++
		}
	}
	for ; i < len(t); i++ {
		t[i] = 63
	}
	return
}()

type component struct {
	id      uint8
	h, v    int // sampling factors
	tq      uint8
	qt      [64]int32 // the quantization table latched at the first scan, natural order
	latched bool
	bw, bh  int // blocks per row and column, whole MCUs
	sw, sh  int // blocks holding samples: a non-interleaved scan's extent
	pix     []uint8
	coef    []int16 // progressive only: bw*bh blocks of 64, natural order
	pred    int32
	dcSeen  bool
	dcTab   uint8
	acTab   uint8
}

type decoder struct {
	data      []byte
	pos       int
	maxPixels int

	frame       bool
	progressive bool
	width       int
	height      int
	comps       []component
	hmax, vmax  int
	mcusX       int
	mcusY       int
	allocated   bool

	qt        [4][64]uint16 // natural order
	qtDefined [4]bool
	dc, ac    [4]huffTable
	ri        int
	jfif      bool
	adobe     bool
	transform uint8
	scans     int
	eobrun    int32
	work      int // coefficient visits inside end-of-band runs
	blk       [64]int32
}

// Config is the frame header: the size and the number of components.
type Config struct {
	Width, Height int
	Components    int
	Progressive   bool
}

// DecodeConfig reads the markers up to the frame header.
func DecodeConfig(data []byte) (Config, error) {
	d := &decoder{data: data, maxPixels: -1}
	if err := d.run(true); err != nil {
		return Config{}, err
	}
	return Config{Width: d.width, Height: d.height, Components: len(d.comps), Progressive: d.progressive}, nil
}

// Decode decodes a JPEG image of at most maxPixels pixels (width x
// height); a larger frame is refused with an error wrapping
// ErrTooManyPixels before any image memory is allocated.
func Decode(data []byte, maxPixels int) (image.Image, error) {
	d := &decoder{data: data, maxPixels: maxPixels}
	for i := range d.dc {
		d.dc[i].clear()
		d.ac[i].clear()
	}
	if err := d.run(false); err != nil {
		return nil, err
	}
	return d.image()
}

// run parses markers until EOI, or until the frame header when
// headerOnly is set.
func (d *decoder) run(headerOnly bool) error {
	if len(d.data) < 2 || d.data[0] != 0xFF || d.data[1] != mSOI {
		return errors.New("jpeg: not a JPEG file (no SOI marker)")
	}
	d.pos = 2
	for {
		m, err := d.nextMarker()
		if err != nil {
			return err
		}
		switch {
		case m == mEOI:
			if !d.frame {
				return errors.New("jpeg: EOI before a frame header")
			}
			if d.scans == 0 {
				return errors.New("jpeg: no scans before EOI")
			}
			return nil
		case m >= mRST0 && m <= mRST7, m == mTEM, m == mSOI:
			// No segment follows these; a stray one is skipped as libjpeg does.
			continue
		}
		seg, err := d.segment(m)
		if err != nil {
			return err
		}
		switch {
		case m == mSOF0 || m == mSOF1 || m == mSOF2:
			if err := d.parseSOF(m, seg); err != nil {
				return err
			}
			if headerOnly {
				return nil
			}
		case m >= 0xC3 && m <= 0xCF && m != mDHT && m != 0xC8 && m != 0xCC:
			return fmt.Errorf("jpeg: unsupported coding process (SOF%d: lossless, hierarchical or arithmetic)", m-0xC0)
		case m == 0xCC:
			return errors.New("jpeg: arithmetic coding is not supported")
		case m == mDHT:
			if err := d.parseDHT(seg); err != nil {
				return err
			}
		case m == mDQT:
			if err := d.parseDQT(seg); err != nil {
				return err
			}
		case m == mDRI:
			if len(seg) != 2 {
				return fmt.Errorf("jpeg: DRI segment of %d bytes, want 2", len(seg))
			}
			d.ri = int(seg[0])<<8 | int(seg[1])
		case m == mAPP0:
			d.jfif = d.jfif || bytes.HasPrefix(seg, []byte("JFIF\x00"))
		case m == mAPPE:
			if len(seg) >= 12 && bytes.HasPrefix(seg, []byte("Adobe")) {
				d.adobe, d.transform = true, seg[11]
			}
		case m == mSOS:
			if headerOnly {
				return errors.New("jpeg: SOS before a frame header")
			}
			if err := d.parseSOS(seg); err != nil {
				return err
			}
		case m == mDNL:
			return errors.New("jpeg: DNL marker (height defined after the scan) is not supported")
		}
		// APPn, COM and the rest carry nothing a decoder needs.
	}
}

// nextMarker skips to the next marker (any bytes before it are junk that
// libjpeg also tolerates) and returns its code.
func (d *decoder) nextMarker() (byte, error) {
	for {
		i := bytes.IndexByte(d.data[d.pos:], 0xFF)
		if i < 0 {
			d.pos = len(d.data)
			return 0, fmt.Errorf("jpeg: %w: no EOI marker", errTruncated)
		}
		d.pos += i + 1
		for d.pos < len(d.data) && d.data[d.pos] == 0xFF {
			d.pos++ // fill bytes
		}
		if d.pos >= len(d.data) {
			return 0, fmt.Errorf("jpeg: %w: no EOI marker", errTruncated)
		}
		m := d.data[d.pos]
		d.pos++
		if m != 0 {
			return m, nil
		}
	}
}

// segment returns the payload of the marker segment at d.pos.
func (d *decoder) segment(m byte) ([]byte, error) {
	if len(d.data)-d.pos < 2 {
		return nil, fmt.Errorf("jpeg: %w in the length of marker 0x%02X", errTruncated, m)
	}
	n := int(d.data[d.pos])<<8 | int(d.data[d.pos+1])
	if n < 2 {
		return nil, fmt.Errorf("jpeg: marker 0x%02X has invalid length %d", m, n)
	}
	if len(d.data)-d.pos < n {
		return nil, fmt.Errorf("jpeg: %w in the segment of marker 0x%02X (%d bytes, %d left)", errTruncated, m, n, len(d.data)-d.pos)
	}
	seg := d.data[d.pos+2 : d.pos+n]
	d.pos += n
	return seg, nil
}

func (d *decoder) parseSOF(m byte, seg []byte) error {
	if d.frame {
		return errors.New("jpeg: more than one frame header")
	}
	if len(seg) < 6 {
		return fmt.Errorf("jpeg: frame header of %d bytes is too short", len(seg))
	}
	if seg[0] != 8 {
		return fmt.Errorf("jpeg: %d-bit samples are not supported (8 only)", seg[0])
	}
	d.height = int(seg[1])<<8 | int(seg[2])
	d.width = int(seg[3])<<8 | int(seg[4])
	nf := int(seg[5])
	if d.height == 0 {
		return errors.New("jpeg: height 0 (defined by a DNL marker) is not supported")
	}
	if d.width == 0 {
		return errors.New("jpeg: width 0")
	}
	if nf != 1 && nf != 3 && nf != 4 {
		return fmt.Errorf("jpeg: %d components are not supported (1, 3 or 4)", nf)
	}
	if len(seg) != 6+3*nf {
		return fmt.Errorf("jpeg: frame header of %d bytes for %d components", len(seg), nf)
	}
	if d.maxPixels >= 0 && int64(d.width)*int64(d.height) > int64(d.maxPixels) {
		return fmt.Errorf("jpeg: frame of %dx%d: %w (%d)", d.width, d.height, ErrTooManyPixels, d.maxPixels)
	}
	d.comps = make([]component, nf)
	for i := range d.comps {
		c := &d.comps[i]
		p := seg[6+3*i:]
		c.id, c.h, c.v, c.tq = p[0], int(p[1]>>4), int(p[1]&15), p[2]
		if c.h < 1 || c.h > 4 || c.v < 1 || c.v > 4 {
			return fmt.Errorf("jpeg: component %d has sampling factors %dx%d (1 to 4 allowed)", c.id, c.h, c.v)
		}
		if c.tq > 3 {
			return fmt.Errorf("jpeg: component %d uses quantization table %d", c.id, c.tq)
		}
		for j := range i {
			if d.comps[j].id == c.id {
				return fmt.Errorf("jpeg: component id %d appears twice", c.id)
			}
		}
		if nf == 1 {
			// A single component is coded in plain block order whatever
			// its sampling factors say.
			c.h, c.v = 1, 1
		}
		d.hmax, d.vmax = max(d.hmax, c.h), max(d.vmax, c.v)
	}
	for i := range d.comps {
		c := &d.comps[i]
		if d.hmax%c.h != 0 || d.vmax%c.v != 0 {
			return fmt.Errorf("jpeg: sampling factors %dx%d of component %d do not divide %dx%d", c.h, c.v, c.id, d.hmax, d.vmax)
		}
	}
	d.mcusX = (d.width + 8*d.hmax - 1) / (8 * d.hmax)
	d.mcusY = (d.height + 8*d.vmax - 1) / (8 * d.vmax)
	for i := range d.comps {
		c := &d.comps[i]
		c.bw, c.bh = d.mcusX*c.h, d.mcusY*c.v
		cw := (d.width*c.h + d.hmax - 1) / d.hmax
		ch := (d.height*c.v + d.vmax - 1) / d.vmax
		c.sw, c.sh = (cw+7)/8, (ch+7)/8
	}
	d.frame = true
	d.progressive = m == mSOF2
	return nil
}

func (d *decoder) parseDHT(seg []byte) error {
	for len(seg) > 0 {
		if len(seg) < 17 {
			return fmt.Errorf("jpeg: DHT segment of %d bytes is too short", len(seg))
		}
		tc, th := seg[0]>>4, seg[0]&15
		if tc > 1 || th > 3 {
			return fmt.Errorf("jpeg: DHT class %d, destination %d (0-1, 0-3 allowed)", tc, th)
		}
		var counts [16]uint8
		copy(counts[:], seg[1:17])
		total := 0
		for _, n := range counts {
			total += int(n)
		}
		if total > 256 {
			return fmt.Errorf("jpeg: Huffman table with %d codes (256 at most)", total)
		}
		if len(seg) < 17+total {
			return fmt.Errorf("jpeg: DHT segment shorter than its %d codes", total)
		}
		t := &d.dc[th]
		if tc == 1 {
			t = &d.ac[th]
		}
		if err := t.build(&counts, seg[17:17+total]); err != nil {
			t.clear()
			return fmt.Errorf("jpeg: DHT class %d, destination %d: %w", tc, th, err)
		}
		seg = seg[17+total:]
	}
	return nil
}

func (d *decoder) parseDQT(seg []byte) error {
	for len(seg) > 0 {
		pq, tq := seg[0]>>4, seg[0]&15
		if pq > 1 || tq > 3 {
			return fmt.Errorf("jpeg: DQT precision %d, destination %d (0-1, 0-3 allowed)", pq, tq)
		}
		n := 65 + 64*int(pq)
		if len(seg) < n {
			return fmt.Errorf("jpeg: DQT segment of %d bytes is too short (%d)", len(seg), n)
		}
		for k := 0; k < 64; k++ {
			var q uint16
			if pq == 0 {
				q = uint16(seg[1+k])
			} else {
				q = uint16(seg[1+2*k])<<8 | uint16(seg[2+2*k])
			}
			d.qt[tq][unzig[k]] = q
		}
		d.qtDefined[tq] = true
		seg = seg[n:]
	}
	return nil
}
