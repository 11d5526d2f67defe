package jpeg

import "errors"

// lutBits is how many bits of a Huffman code the lookup table resolves at
// once; longer codes (rare in practice) go through the canonical-code
// limits of T.81 Annex F.2.2.3.
const lutBits = 9

// huffTable is one DHT table, built as T.81 Annex C describes the
// canonical code: codes of each length are consecutive integers.
type huffTable struct {
	lut     [1 << lutBits]uint16 // code length << 8 | symbol; 0 for longer codes
	maxCode [17]int32            // largest code of each length, -1 if none
	valPtr  [17]int32            // index in vals of the first code of each length, minus that code
	vals    [256]uint8
	defined bool
}

// ErrHuffmanTable is wrapped by the error for a DHT table whose code
// counts give out more codes of some length than that length holds: not a
// prefix code. libjpeg refuses such tables too.
var ErrHuffmanTable = errors.New("invalid Huffman table (more codes than their lengths hold)")

// clear makes h an undefined table: every lookup misses, and decoding
// with it fails with errUndefinedTable when a scan first needs it (as
// image/jpeg, and unlike libjpeg, which checks at the scan header).
func (h *huffTable) clear() {
	*h = huffTable{}
	for l := range h.maxCode {
		h.maxCode[l] = -1
	}
}

var errUndefinedTable = errors.New("a Huffman table the scan uses is not defined")

// build fills h from the 16 counts of codes per length and the symbols.
func (h *huffTable) build(counts *[16]uint8, vals []uint8) error {
	*h = huffTable{defined: true}
	copy(h.vals[:], vals)
	code, k := int32(0), int32(0)
	for l := 1; l <= 16; l++ {
		n := int32(counts[l-1])
		if code+n > 1<<l {
			return ErrHuffmanTable
		}
		h.maxCode[l] = -1
		if n > 0 {
			h.valPtr[l] = k - code
			h.maxCode[l] = code + n - 1
			if l <= lutBits {
				// Every lookup index that starts with one of these codes
				// maps to it.
				shift := uint(lutBits - l)
				for c := code; c < code+n; c++ {
					e := uint16(l)<<8 | uint16(vals[k+c-code])
					for j := c << shift; j < (c+1)<<shift; j++ {
						h.lut[j] = e
					}
				}
			}
		}
		code += n
		k += n
		code <<= 1
	}
	return nil
}

// bitReader reads the entropy-coded bytes of a scan: 0xFF 0x00 is a data
// byte 0xFF, and any other 0xFF xx is a marker that ends the segment.
// Past the end it supplies zero bits and counts them, so decoding stays
// simple and a block that needed them is reported as truncated.
type bitReader struct {
	data    []byte
	pos     int    // next unread byte
	acc     uint64 // the low n bits are unread, most significant first
	n       uint
	padBits uint // zero bits supplied past the segment end, the last ones in acc
	atEnd   bool
}

func (r *bitReader) fill() {
	for r.n <= 56 {
		var b byte
		if !r.atEnd {
			if r.pos < len(r.data) {
				b = r.data[r.pos]
				if b != 0xFF {
					r.pos++
				} else if r.pos+1 < len(r.data) && r.data[r.pos+1] == 0 {
					r.pos += 2
				} else {
					r.atEnd, b = true, 0
				}
			} else {
				r.atEnd = true
			}
		}
		if r.atEnd {
			r.padBits += 8
		}
		r.acc = r.acc<<8 | uint64(b)
		r.n += 8
	}
}

// overrun reports whether bits past the segment end were consumed.
func (r *bitReader) overrun() bool { return r.n < r.padBits }

// reset drops the buffered bits, as at a restart marker or a scan end.
// The position stays at the first byte not yet buffered.
func (r *bitReader) reset() {
	r.acc, r.n, r.padBits, r.atEnd = 0, 0, 0, false
}

var errBadCode = errors.New("corrupt entropy-coded data (invalid Huffman code)")

func (r *bitReader) decode(h *huffTable) (uint8, error) {
	if r.n < 16 {
		r.fill()
	}
	e := h.lut[(r.acc>>(r.n-lutBits))&(1<<lutBits-1)]
	if e != 0 {
		r.n -= uint(e >> 8)
		return uint8(e), nil
	}
	code := int32((r.acc >> (r.n - 16)) & 0xFFFF)
	for l := lutBits + 1; l <= 16; l++ {
		c := code >> (16 - l)
		if c <= h.maxCode[l] {
			r.n -= uint(l)
			return h.vals[uint8(h.valPtr[l]+c)], nil
		}
	}
	if !h.defined {
		return 0, errUndefinedTable
	}
	return 0, errBadCode
}

// bits returns the next s (0..16) bits as an unsigned number.
func (r *bitReader) bits(s uint) int32 {
	if s == 0 {
		return 0
	}
	if r.n < s {
		r.fill()
	}
	r.n -= s
	return int32((r.acc >> r.n) & (1<<s - 1))
}

func (r *bitReader) bit() bool {
	if r.n == 0 {
		r.fill()
	}
	r.n--
	return r.acc>>r.n&1 != 0
}

// receiveExtend reads an s-bit magnitude category value (T.81 F.2.2.1):
// values below 2^(s-1) stand for negative numbers.
func (r *bitReader) receiveExtend(s uint) int32 {
	if s == 0 {
		return 0
	}
	v := r.bits(s)
	if v < 1<<(s-1) {
		v += -1<<s + 1
	}
	return v
}
