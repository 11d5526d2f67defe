package checkpoint

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"unsafe"

	"goinfer/internal/tensor"
)

// maxHeaderBytes is the safetensors library's own limit on the JSON header.
const maxHeaderBytes = 100_000_000

// safetensorsDTypes maps the format's dtype names to tensor dtypes.
var safetensorsDTypes = map[string]tensor.DType{
	"F32":  tensor.Float32,
	"F16":  tensor.Float16,
	"BF16": tensor.BFloat16,
	"F64":  tensor.Float64,
	"I64":  tensor.Int64,
	"I32":  tensor.Int32,
	"I8":   tensor.Int8,
	"U8":   tensor.Uint8,
	"BOOL": tensor.Bool,
}

func safetensorsName(dt tensor.DType) (string, bool) {
	for k, v := range safetensorsDTypes {
		if v == dt {
			return k, true
		}
	}
	return "", false
}

// stEntry is one tensor's header record.
type stEntry struct {
	name   string
	dtype  tensor.DType
	shape  tensor.Shape
	begin  int64
	end    int64
	record int // position in the header, to keep the file's order
}

// readSafetensors parses a safetensors file held in data. Tensors alias
// data where it is aligned for their dtype, and are copied otherwise.
func readSafetensors(data []byte) (*StateDict, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("truncated safetensors file: %d bytes, the header length alone takes 8", len(data))
	}
	hlen := binary.LittleEndian.Uint64(data)
	if hlen > maxHeaderBytes {
		return nil, fmt.Errorf("safetensors header length %d is over the %d byte limit: not a safetensors file or corrupt", hlen, maxHeaderBytes)
	}
	if hlen > uint64(len(data)-8) {
		return nil, fmt.Errorf("truncated safetensors file: the header says it is %d bytes, only %d follow", hlen, len(data)-8)
	}
	header := data[8 : 8+hlen]
	if len(header) == 0 || header[0] != '{' {
		return nil, errors.New("safetensors header does not start with '{': not a safetensors file or corrupt")
	}
	entries, err := parseSafetensorsHeader(header)
	if err != nil {
		return nil, err
	}
	body := data[8+hlen:]
	if err := checkLayout(entries, int64(len(body))); err != nil {
		return nil, err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].record < entries[j].record })
	sd := NewStateDict()
	for _, e := range entries {
		b := body[e.begin:e.end:e.end]
		if len(b) > 0 && uintptr(unsafe.Pointer(&b[0]))%uintptr(e.dtype.Size()) != 0 {
			b = bytes.Clone(b)
		}
		t, err := tensor.FromBytes(e.dtype, e.shape, b)
		if err != nil {
			return nil, fmt.Errorf("safetensors key %q: %w", e.name, err)
		}
		sd.Set(e.name, t)
	}
	return sd, nil
}

// parseSafetensorsHeader decodes the JSON header in order, rejecting
// duplicate keys and malformed records, each error naming the key.
func parseSafetensorsHeader(header []byte) ([]stEntry, error) {
	dec := json.NewDecoder(bytes.NewReader(header))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // '{', checked by the caller
		return nil, fmt.Errorf("safetensors header: %w", err)
	}
	seen := map[string]bool{}
	var entries []stEntry
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("safetensors header is not valid JSON: %w", err)
		}
		name, _ := tok.(string)
		if seen[name] {
			return nil, fmt.Errorf("safetensors header has key %q twice", name)
		}
		seen[name] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("safetensors header is not valid JSON at key %q: %w", name, err)
		}
		if name == "__metadata__" {
			var md map[string]string
			if err := json.Unmarshal(raw, &md); err != nil {
				return nil, fmt.Errorf("safetensors __metadata__ must map strings to strings: %w", err)
			}
			continue
		}
		e, err := parseEntry(name, raw)
		if err != nil {
			return nil, err
		}
		e.record = len(entries)
		entries = append(entries, e)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("safetensors header is not valid JSON: %w", err)
	}
	// Only padding (the writer pads with spaces) may follow the object.
	if rest := bytes.TrimSpace(header[dec.InputOffset():]); len(rest) > 0 {
		return nil, fmt.Errorf("safetensors header has %d bytes of trailing data after its JSON object", len(rest))
	}
	return entries, nil
}

func parseEntry(name string, raw json.RawMessage) (stEntry, error) {
	var rec struct {
		DType   *string       `json:"dtype"`
		Shape   []json.Number `json:"shape"`
		Offsets []json.Number `json:"data_offsets"`
	}
	if err := json.Unmarshal(raw, &rec); err != nil {
		return stEntry{}, fmt.Errorf("safetensors key %q: malformed record: %w", name, err)
	}
	if rec.DType == nil || rec.Shape == nil || rec.Offsets == nil {
		return stEntry{}, fmt.Errorf("safetensors key %q: record needs dtype, shape and data_offsets", name)
	}
	dt, ok := safetensorsDTypes[*rec.DType]
	if !ok {
		return stEntry{}, fmt.Errorf("safetensors key %q: dtype %q is not supported (want F32, F16, BF16, F64, I64, I32, I8, U8 or BOOL)", name, *rec.DType)
	}
	e := stEntry{name: name, dtype: dt, shape: make(tensor.Shape, len(rec.Shape))}
	for i, d := range rec.Shape {
		v, err := strconv.ParseInt(string(d), 10, 64)
		if err != nil || v < 0 || v > 1<<40 {
			return stEntry{}, fmt.Errorf("safetensors key %q: shape %v has an invalid dimension %s", name, rec.Shape, d)
		}
		e.shape[i] = int(v)
	}
	if err := e.shape.Validate(); err != nil {
		return stEntry{}, fmt.Errorf("safetensors key %q: %w", name, err)
	}
	if len(rec.Offsets) != 2 {
		return stEntry{}, fmt.Errorf("safetensors key %q: data_offsets has %d values, want 2", name, len(rec.Offsets))
	}
	var off [2]int64
	for i, o := range rec.Offsets {
		v, err := strconv.ParseInt(string(o), 10, 64)
		if err != nil || v < 0 {
			return stEntry{}, fmt.Errorf("safetensors key %q: invalid data offset %s", name, o)
		}
		off[i] = v
	}
	e.begin, e.end = off[0], off[1]
	if e.end < e.begin {
		return stEntry{}, fmt.Errorf("safetensors key %q: data_offsets [%d, %d] end before they begin", name, e.begin, e.end)
	}
	if want := int64(e.shape.NumElements()) * int64(dt.Size()); e.end-e.begin != want {
		return stEntry{}, fmt.Errorf("safetensors key %q: data_offsets [%d, %d] span %d bytes, but %s%v needs %d", name, e.begin, e.end, e.end-e.begin, *rec.DType, e.shape, want)
	}
	return e, nil
}

// checkLayout enforces what the safetensors library does: the tensors
// cover the data section exactly, without overlaps or holes.
func checkLayout(entries []stEntry, size int64) error {
	sorted := append([]stEntry(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].begin != sorted[j].begin {
			return sorted[i].begin < sorted[j].begin
		}
		return sorted[i].end < sorted[j].end
	})
	var pos int64
	prev := ""
	for _, e := range sorted {
		switch {
		case e.begin < pos:
			return fmt.Errorf("safetensors key %q: data_offsets [%d, %d] overlap key %q", e.name, e.begin, e.end, prev)
		case e.begin > pos:
			return fmt.Errorf("safetensors key %q: data_offsets [%d, %d] leave a hole at bytes [%d, %d]", e.name, e.begin, e.end, pos, e.begin)
		}
		if e.end > size {
			return fmt.Errorf("safetensors key %q: data_offsets [%d, %d] reach past the %d data bytes in the file (truncated?)", e.name, e.begin, e.end, size)
		}
		pos, prev = e.end, e.name
	}
	if pos != size {
		return fmt.Errorf("safetensors data section is %d bytes but its tensors cover %d", size, pos)
	}
	return nil
}

// writeSafetensors writes sd the way the safetensors library does: a JSON
// header padded with spaces to a multiple of 8 bytes, then the data, larger
// dtypes first so that every tensor stays aligned for its element size.
func writeSafetensors(w io.Writer, sd *StateDict) error {
	names := sd.SortedNames()
	type rec struct {
		name string
		t    *tensor.Tensor
		dt   string
	}
	recs := make([]rec, len(names))
	for i, n := range names {
		t, _ := sd.Get(n)
		if err := t.Validate(); err != nil {
			return fmt.Errorf("tensor %q: %w", n, err)
		}
		dt, ok := safetensorsName(t.DType)
		if !ok {
			return fmt.Errorf("tensor %q: dtype %s cannot be stored in safetensors", n, t.DType)
		}
		recs[i] = rec{n, t, dt}
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].t.DType.Size() > recs[j].t.DType.Size() })

	var hdr bytes.Buffer
	hdr.WriteString(`{"__metadata__":{"format":"pt"}`)
	var off int64
	for _, r := range recs {
		name, _ := json.Marshal(r.name)
		shape, _ := json.Marshal([]int(r.t.Shape))
		if len(r.t.Shape) == 0 {
			shape = []byte("[]")
		}
		n := int64(len(r.t.Data))
		fmt.Fprintf(&hdr, `,%s:{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}`, name, r.dt, shape, off, off+n)
		off += n
	}
	hdr.WriteByte('}')
	for (8+hdr.Len())%8 != 0 {
		hdr.WriteByte(' ')
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(hdr.Len()))
	bw.Write(lenBuf[:])
	bw.Write(hdr.Bytes())
	for _, r := range recs {
		if _, err := bw.Write(r.t.Data); err != nil {
			return err
		}
	}
	return bw.Flush()
}
