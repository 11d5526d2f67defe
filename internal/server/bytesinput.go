package server

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
)

// splitBytesElems splits a BYTES tensor in the protocol's binary layout
// (each element a 4-byte little-endian length, then that many bytes) into
// exactly want elements, which alias raw. field names the tensor in
// errors.
func splitBytesElems(raw []byte, want int, field string) ([][]byte, error) {
	out := make([][]byte, 0, want)
	off := 0
	for off < len(raw) {
		i := len(out)
		if i == want {
			return nil, errorf(kindInvalid, "%s holds more than the %d BYTES elements its shape declares (%d bytes left after element %d)", field, want, len(raw)-off, i-1)
		}
		if len(raw)-off < 4 {
			return nil, errorf(kindInvalid, "%s element %d: %d bytes left where a 4-byte length prefix was expected", field, i, len(raw)-off)
		}
		n := binary.LittleEndian.Uint32(raw[off:])
		off += 4
		if uint64(n) > uint64(len(raw)-off) {
			return nil, errorf(kindInvalid, "%s element %d: its length prefix says %d bytes, but only %d follow", field, i, n, len(raw)-off)
		}
		out = append(out, raw[off:off+int(n):off+int(n)])
		off += int(n)
	}
	if len(out) != want {
		return nil, errorf(kindInvalid, "%s holds %d BYTES elements; its shape declares %d", field, len(out), want)
	}
	return out, nil
}

// parseJSONImages reads the JSON "data" of a BYTES image input: an array
// of base64 strings (standard alphabet, padding optional), flat or nested
// one level as the shape [N, 1] is. Encoded images are binary, which a
// JSON string cannot carry as such, hence base64.
func parseJSONImages(raw json.RawMessage, want int, field string) ([][]byte, error) {
	var flat []string
	if err := json.Unmarshal(raw, &flat); err != nil {
		flat = flat[:0] // Unmarshal may have filled some before failing
		var nested [][]string
		if json.Unmarshal(raw, &nested) != nil {
			return nil, errorf(kindInvalid, "%s.data must be an array of base64 strings, one per image", field)
		}
		for i, row := range nested {
			if len(row) != 1 {
				return nil, errorf(kindInvalid, "%s.data[%d] has %d strings; want one image per row", field, i, len(row))
			}
			flat = append(flat, row[0])
		}
	}
	if len(flat) != want {
		return nil, errorf(kindInvalid, "%s.data holds %d images; its shape declares %d", field, len(flat), want)
	}
	out := make([][]byte, len(flat))
	for i, s := range flat {
		b, err := base64.RawStdEncoding.DecodeString(string(bytes.TrimRight([]byte(s), "=")))
		if err != nil {
			return nil, errorf(kindInvalid, "%s.data[%d] is not base64: %v", field, i, err)
		}
		out[i] = b
	}
	return out, nil
}
