package tensor

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// npyMagic starts every .npy file.
const npyMagic = "\x93NUMPY"

// maxNPYHeader bounds the header dict; numpy itself refuses headers over
// 10000 bytes by default.
const maxNPYHeader = 1 << 20

// npyDescr maps numpy dtype descriptors to dtypes. '<' is little-endian,
// '|' not applicable (one byte), '=' native (little-endian here).
var npyDescr = map[string]DType{
	"f4": Float32, "f8": Float64, "f2": Float16,
	"u1": Uint8, "i1": Int8, "i4": Int32, "i8": Int64, "b1": Bool,
}

func npyDescrOf(dt DType) (string, bool) {
	switch dt {
	case Float32:
		return "<f4", true
	case Float64:
		return "<f8", true
	case Float16:
		return "<f2", true
	case Uint8:
		return "|u1", true
	case Int8:
		return "|i1", true
	case Int32:
		return "<i4", true
	case Int64:
		return "<i8", true
	case Bool:
		return "|b1", true
	}
	return "", false
}

// ReadNPY reads one array in numpy's .npy format (versions 1.0, 2.0 and
// 3.0): little-endian float16/32/64, int8/32/64, uint8 or bool, C order.
func ReadNPY(r io.Reader) (*Tensor, error) {
	dt, shape, err := readNPYHeader(r)
	if err != nil {
		return nil, err
	}
	n := shape.NumElements() * dt.Size()
	data, err := readN(r, n)
	if err != nil {
		return nil, fmt.Errorf("npy data of %s%v (%d bytes): %w", dt, shape, n, err)
	}
	return &Tensor{DType: dt, Shape: shape, Data: data}, nil
}

// readN reads exactly n bytes without trusting n: a lying header makes it
// fail at the end of the input, not allocate the size the header claims.
func readN(r io.Reader, n int) ([]byte, error) {
	const chunk = 64 << 20
	if n <= chunk {
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, truncated(err)
		}
		return b, nil
	}
	var buf bytes.Buffer
	got, err := io.CopyN(&buf, r, int64(n))
	if err != nil {
		return nil, fmt.Errorf("truncated: got %d bytes: %w", got, truncated(err))
	}
	return buf.Bytes(), nil
}

func truncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("file is truncated: %w", io.ErrUnexpectedEOF)
	}
	return err
}

func readNPYHeader(r io.Reader) (DType, Shape, error) {
	var pre [10]byte
	if _, err := io.ReadFull(r, pre[:8]); err != nil {
		return 0, nil, fmt.Errorf("npy header: %w", truncated(err))
	}
	if string(pre[:6]) != npyMagic {
		return 0, nil, errors.New("not a .npy file: it does not start with \\x93NUMPY")
	}
	major, minor := pre[6], pre[7]
	var hlen int
	switch major {
	case 1:
		if _, err := io.ReadFull(r, pre[8:10]); err != nil {
			return 0, nil, fmt.Errorf("npy header: %w", truncated(err))
		}
		hlen = int(binary.LittleEndian.Uint16(pre[8:10]))
	case 2, 3:
		var l [4]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return 0, nil, fmt.Errorf("npy header: %w", truncated(err))
		}
		hlen = int(binary.LittleEndian.Uint32(l[:]))
	default:
		return 0, nil, fmt.Errorf("npy format version %d.%d is not supported (want 1.0, 2.0 or 3.0)", major, minor)
	}
	if hlen > maxNPYHeader {
		return 0, nil, fmt.Errorf("npy header is %d bytes, over the %d byte limit", hlen, maxNPYHeader)
	}
	hdr := make([]byte, hlen)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return 0, nil, fmt.Errorf("npy header: %w", truncated(err))
	}
	return parseNPYHeader(string(hdr))
}

// parseNPYHeader reads the header, a Python dict literal such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
func parseNPYHeader(h string) (DType, Shape, error) {
	p := &pyParser{s: h}
	v, err := p.value()
	if err != nil {
		return 0, nil, fmt.Errorf("npy header %q: %w", clip(h), err)
	}
	p.space()
	if p.i != len(p.s) {
		return 0, nil, fmt.Errorf("npy header %q: unexpected text after the dict", clip(h))
	}
	d, ok := v.(map[string]any)
	if !ok {
		return 0, nil, fmt.Errorf("npy header %q is not a dict", clip(h))
	}
	descr, ok := d["descr"].(string)
	if !ok {
		return 0, nil, fmt.Errorf("npy header %q: 'descr' is missing or not a simple dtype (structured arrays are not supported)", clip(h))
	}
	fortran, ok := d["fortran_order"].(bool)
	if !ok {
		return 0, nil, fmt.Errorf("npy header %q: 'fortran_order' is missing or not a bool", clip(h))
	}
	dims, ok := d["shape"].([]any)
	if !ok {
		return 0, nil, fmt.Errorf("npy header %q: 'shape' is missing or not a tuple", clip(h))
	}
	if fortran {
		return 0, nil, errors.New("npy array is in Fortran order: save it in C order (np.ascontiguousarray)")
	}
	if len(descr) < 2 {
		return 0, nil, fmt.Errorf("npy dtype %q is not supported", descr)
	}
	order, code := descr[0], descr[1:]
	dt, ok := npyDescr[code]
	if !ok {
		return 0, nil, fmt.Errorf("npy dtype %q is not supported (want <f4, <f8, <f2, |u1, |i1, <i4, <i8 or |b1)", descr)
	}
	switch {
	case order == '>' && dt.Size() > 1:
		return 0, nil, fmt.Errorf("npy dtype %q is big-endian: convert it with arr.astype(arr.dtype.newbyteorder('<'))", descr)
	case order != '<' && order != '|' && order != '=' && order != '>':
		return 0, nil, fmt.Errorf("npy dtype %q is not supported", descr)
	}
	shape := make(Shape, len(dims))
	for i, x := range dims {
		n, ok := x.(int64)
		if !ok || n < 0 || n > maxElements {
			return 0, nil, fmt.Errorf("npy shape %v: dimension %d is not a non-negative integer", dims, i)
		}
		shape[i] = int(n)
	}
	if err := shape.Validate(); err != nil {
		return 0, nil, fmt.Errorf("npy %w", err)
	}
	return dt, shape, nil
}

func clip(s string) string {
	s = strings.TrimRight(s, " \n")
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}

// pyParser reads the Python literals an npy header uses: dicts, tuples,
// lists, strings, integers, True, False and None. It evaluates nothing.
type pyParser struct {
	s     string
	i     int
	depth int
}

func (p *pyParser) space() {
	for p.i < len(p.s) && strings.IndexByte(" \t\r\n", p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *pyParser) value() (any, error) {
	p.space()
	if p.i >= len(p.s) {
		return nil, errors.New("unexpected end")
	}
	switch c := p.s[p.i]; {
	case c == '{':
		return p.dict()
	case c == '(' || c == '[':
		return p.seq()
	case c == '\'' || c == '"':
		return p.str()
	case c == '-' || c >= '0' && c <= '9':
		return p.int()
	}
	for _, w := range []struct {
		word string
		v    any
	}{{"True", true}, {"False", false}, {"None", nil}} {
		if strings.HasPrefix(p.s[p.i:], w.word) {
			p.i += len(w.word)
			return w.v, nil
		}
	}
	return nil, fmt.Errorf("unexpected %q at byte %d", p.s[p.i], p.i)
}

func (p *pyParser) enter() error {
	p.depth++
	if p.depth > 16 {
		return errors.New("nested too deeply")
	}
	return nil
}

func (p *pyParser) dict() (any, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	p.i++ // '{'
	d := map[string]any{}
	for {
		p.space()
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			return d, nil
		}
		k, err := p.value()
		if err != nil {
			return nil, err
		}
		key, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("dict key at byte %d is not a string", p.i)
		}
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return nil, fmt.Errorf("want ':' after key %q", key)
		}
		p.i++
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		if _, dup := d[key]; dup {
			return nil, fmt.Errorf("key %q appears twice", key)
		}
		d[key] = v
		if err := p.sep('}'); err != nil {
			return nil, err
		}
	}
}

func (p *pyParser) seq() (any, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	end := byte(')')
	if p.s[p.i] == '[' {
		end = ']'
	}
	p.i++
	items := []any{}
	for {
		p.space()
		if p.i < len(p.s) && p.s[p.i] == end {
			p.i++
			return items, nil
		}
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		items = append(items, v)
		if err := p.sep(end); err != nil {
			return nil, err
		}
	}
}

// sep consumes a ',' or stops before the closing bracket.
func (p *pyParser) sep(end byte) error {
	p.space()
	if p.i >= len(p.s) {
		return errors.New("unexpected end")
	}
	switch p.s[p.i] {
	case ',':
		p.i++
		return nil
	case end:
		return nil
	}
	return fmt.Errorf("want ',' or %q at byte %d, got %q", end, p.i, p.s[p.i])
}

func (p *pyParser) str() (any, error) {
	q := p.s[p.i]
	j := strings.IndexByte(p.s[p.i+1:], q)
	if j < 0 {
		return nil, errors.New("unterminated string")
	}
	s := p.s[p.i+1 : p.i+1+j]
	if strings.IndexByte(s, '\\') >= 0 {
		return nil, errors.New("escapes in strings are not supported")
	}
	p.i += j + 2
	return s, nil
}

func (p *pyParser) int() (any, error) {
	j := p.i
	if p.s[j] == '-' {
		j++
	}
	for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
		j++
	}
	// Python 2 era files may write longs as 3L.
	lit := p.s[p.i:j]
	if j < len(p.s) && p.s[j] == 'L' {
		j++
	}
	n, err := strconv.ParseInt(lit, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("bad integer %q", lit)
	}
	p.i = j
	return n, nil
}

// WriteNPY writes t in .npy format as numpy.save does: version 1.0 when the
// header fits its 16-bit length, else 2.0, the header padded so that data
// starts at a multiple of 64 bytes.
func WriteNPY(w io.Writer, t *Tensor) error {
	if err := t.Validate(); err != nil {
		return err
	}
	descr, ok := npyDescrOf(t.DType)
	if !ok {
		return fmt.Errorf("dtype %s has no .npy equivalent", t.DType)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr)
	for i, d := range t.Shape {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(strconv.Itoa(d))
	}
	if len(t.Shape) == 1 {
		sb.WriteByte(',')
	}
	sb.WriteString("), }")
	// numpy reserves room to rewrite the first dimension in place (its
	// GROWTH_AXIS_MAX_DIGITS); matching it makes the files byte-identical.
	if len(t.Shape) > 0 {
		sb.WriteString(strings.Repeat(" ", max(0, 21-len(strconv.Itoa(t.Shape[0])))))
	}
	hdr := sb.String()
	version, pre := byte(1), 10
	if len(hdr)+1+pre > 1<<16-1 {
		version, pre = 2, 12
	}
	total := (pre + len(hdr) + 1 + 63) / 64 * 64
	hdr += strings.Repeat(" ", total-pre-len(hdr)-1) + "\n"

	bw := bufio.NewWriter(w)
	bw.WriteString(npyMagic)
	bw.WriteByte(version)
	bw.WriteByte(0)
	if version == 1 {
		binary.Write(bw, binary.LittleEndian, uint16(len(hdr)))
	} else {
		binary.Write(bw, binary.LittleEndian, uint32(len(hdr)))
	}
	bw.WriteString(hdr)
	bw.Write(t.Data)
	return bw.Flush()
}

// LoadNPY reads a .npy file.
func LoadNPY(path string) (*Tensor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := ReadNPY(bufio.NewReaderSize(f, 1<<16))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// SaveNPY writes t to a .npy file.
func SaveNPY(path string, t *Tensor) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteNPY(f, t); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
