package server

import (
	"encoding/binary"
	"testing"
)

// FuzzSplitBytesElems checks that the BYTES element parser never panics,
// and that what it accepts re-encodes to the same bytes.
func FuzzSplitBytesElems(f *testing.F) {
	f.Add([]byte{}, 0)
	f.Add([]byte{3, 0, 0, 0, 'a', 'b', 'c', 0, 0, 0, 0}, 2)
	f.Add([]byte{255, 255, 255, 255, 1}, 1)
	f.Add([]byte{1, 0, 0}, 1)
	f.Fuzz(func(t *testing.T, raw []byte, want int) {
		if want < 0 || want > 1<<16 {
			return
		}
		elems, err := splitBytesElems(raw, want, "inputs[0]")
		if err != nil {
			return
		}
		if len(elems) != want {
			t.Fatalf("%d elements, want %d", len(elems), want)
		}
		var back []byte
		for _, e := range elems {
			back = binary.LittleEndian.AppendUint32(back, uint32(len(e)))
			back = append(back, e...)
		}
		if string(back) != string(raw) {
			t.Fatalf("re-encoding gives %x, parsed %x", back, raw)
		}
	})
}

// FuzzParseJSONImages checks that the JSON image data parser never
// panics, and that what it accepts has the count asked for.
func FuzzParseJSONImages(f *testing.F) {
	f.Add([]byte(`["aGk=", "eW8"]`), 2)
	f.Add([]byte(`[["aGk="], ["eW8="]]`), 2)
	f.Add([]byte(`[[]]`), 1)
	f.Add([]byte(`[1]`), 1)
	f.Fuzz(func(t *testing.T, raw []byte, want int) {
		if want < 0 || want > 1<<12 {
			return
		}
		imgs, err := parseJSONImages(raw, want, "inputs[0]")
		if err == nil && len(imgs) != want {
			t.Fatalf("%d images, want %d", len(imgs), want)
		}
	})
}
