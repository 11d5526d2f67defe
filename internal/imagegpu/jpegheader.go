package imagegpu

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// jpegHeader is what routing needs from a JPEG's frame header.
type jpegHeader struct {
	width, height int
	components    int
	progressive   bool
	// sampling holds each component's horizontal and vertical sampling
	// factors (h<<4 | v), as in the frame header; ids their identifiers.
	sampling [4]byte
	ids      [4]byte
	// adobe is the colour transform of an Adobe APP14 segment before the
	// frame (0: the components are RGB or CMYK as coded), -1 without one.
	adobe int
}

var errNoFrame = errors.New("no JPEG frame header (SOF) before the scan")

// parseJPEGHeader walks the marker segments up to the first start of
// frame. It reads only lengths and the frame header, so a hostile file
// costs no more than its header bytes, and nothing is allocated.
func parseJPEGHeader(b []byte) (jpegHeader, error) {
	h := jpegHeader{adobe: -1}
	if len(b) < 4 || b[0] != 0xff || b[1] != 0xd8 {
		return h, errors.New("not a JPEG (no SOI marker)")
	}
	i := 2
	for {
		// Skip fill bytes between markers.
		for i < len(b) && b[i] == 0xff && i+1 < len(b) && b[i+1] == 0xff {
			i++
		}
		if i+4 > len(b) {
			return h, errNoFrame
		}
		if b[i] != 0xff {
			return h, fmt.Errorf("corrupt JPEG: expected a marker at byte %d", i)
		}
		m := b[i+1]
		if m == 0xd8 || m == 0x01 || m >= 0xd0 && m <= 0xd7 {
			i += 2 // markers without a length
			continue
		}
		if m == 0xd9 || m == 0xda {
			return h, errNoFrame // end of image or start of scan first
		}
		n := int(binary.BigEndian.Uint16(b[i+2:]))
		if n < 2 || i+2+n > len(b) {
			return h, fmt.Errorf("corrupt JPEG: segment %#x at byte %d runs past the end", m, i)
		}
		seg := b[i+4 : i+2+n]
		switch {
		case m == 0xee && len(seg) >= 12 && string(seg[:5]) == "Adobe":
			h.adobe = int(seg[11])
		case m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc:
			if len(seg) < 6 {
				return h, errors.New("corrupt JPEG: short frame header")
			}
			if m != 0xc0 && m != 0xc1 && m != 0xc2 {
				return h, fmt.Errorf("JPEG coding %#x (lossless, hierarchical or arithmetic) is not supported", m)
			}
			h.progressive = m == 0xc2
			h.height = int(binary.BigEndian.Uint16(seg[1:]))
			h.width = int(binary.BigEndian.Uint16(seg[3:]))
			h.components = int(seg[5])
			if h.components < 1 || h.components > 4 || len(seg) < 6+3*h.components {
				return h, fmt.Errorf("corrupt JPEG: frame header with %d components", h.components)
			}
			for c := 0; c < h.components; c++ {
				h.ids[c] = seg[6+3*c]
				h.sampling[c] = seg[6+3*c+1]
			}
			return h, nil
		}
		i += 2 + n
	}
}

// hardwareOK reports whether the GPU JPEG engines take an image with this
// header: baseline Huffman, grayscale or YCbCr with one of the common
// chroma subsamplings. Anything else goes to the GPU decoder; should the
// engines still refuse one, the batch is retried image by image.
func (h jpegHeader) hardwareOK() bool {
	if h.progressive {
		return false
	}
	switch h.components {
	case 1:
		return true
	case 3:
		if h.sampling[1] != 0x11 || h.sampling[2] != 0x11 {
			return false
		}
		switch h.sampling[0] {
		case 0x11, 0x21, 0x22, 0x12: // 4:4:4, 4:2:2, 4:2:0, 4:4:0
			return true
		}
	}
	return false
}

// The chroma upsamplings the ycc_to_rgb kernel does (its mode argument).
const (
	ycc444  = iota // chroma at full resolution
	ycc422         // chroma halved horizontally (libjpeg's h2v1)
	ycc420         // halved both ways (h2v2)
	yccNone        // not a YCbCr JPEG the kernel converts
)

// yccMode says how the kernel converts nvJPEG's planar YCbCr output of
// this JPEG to RGB: three components coded as YCbCr (not RGB by Adobe's
// transform flag or by their "R", "G", "B" identifiers, as libjpeg
// guesses), chroma sampled 1x1 and luma 1x1, 2x1 or 2x2. Anything else
// is converted by nvJPEG itself.
func (h jpegHeader) yccMode() int {
	if h.components != 3 || h.adobe == 0 || h.ids[0] == 'R' && h.ids[1] == 'G' && h.ids[2] == 'B' {
		return yccNone
	}
	if h.sampling[1] != 0x11 || h.sampling[2] != 0x11 {
		return yccNone
	}
	switch h.sampling[0] {
	case 0x11:
		return ycc444
	case 0x21:
		return ycc422
	case 0x22:
		return ycc420
	}
	return yccNone
}

// chromaSize is the size of the chroma planes of a JPEG of mode m.
func chromaSize(w, h, m int) (int, int) {
	switch m {
	case ycc422:
		return (w + 1) / 2, h
	case ycc420:
		return (w + 1) / 2, (h + 1) / 2
	}
	return w, h
}
