package jpeg_test

import (
	"bytes"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"

	"goinfer/internal/jpeg"
)

func fixture(t testing.TB, name string) []byte {
	return fixtureFile(t, "../../testdata/jpeg/"+name)
}

func fixtureFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// edit returns a copy of b with f applied.
func edit(b []byte, f func([]byte) []byte) []byte {
	return f(append([]byte(nil), b...))
}

// sofAt is the offset of the frame header's marker.
func sofAt(t *testing.T, b []byte) int {
	for _, m := range []string{"\xff\xc0", "\xff\xc1", "\xff\xc2"} {
		if i := bytes.Index(b, []byte(m)); i >= 0 {
			return i
		}
	}
	t.Fatal("no SOF marker")
	return 0
}

// TestErrors checks that broken files are refused with an error naming
// what is wrong.
func TestErrors(t *testing.T) {
	base := fixture(t, "base_420.jpg")
	prog := fixture(t, "prog_420.jpg")
	restart := fixture(t, "restart_rows.jpg")
	sos := bytes.Index(base, []byte("\xff\xda"))
	sof := sofAt(t, base)
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "no SOI marker"},
		{"png", []byte("\x89PNG\r\n\x1a\n"), "no SOI marker"},
		{"header cut", base[:sof+5], "truncated in the segment of marker 0xC0"},
		{"scan cut", base[:sos+200], "truncated: scan 1 ends after"},
		{"progressive cut", prog[:len(prog)*2/3], "truncated"},
		{"no EOI", base[:len(base)-2], "no EOI marker"},
		{"only SOI", []byte{0xff, 0xd8}, "no EOI marker"},
		{"EOI without frame", []byte{0xff, 0xd8, 0xff, 0xd9}, "EOI before a frame header"},
		{"EOI without scan", append(append([]byte(nil), base[:sos]...), 0xff, 0xd9), "no scans before EOI"},
		{"bad Huffman code", edit(base, func(b []byte) []byte {
			// 0xFF 0x00 is a stuffed 0xFF: a run of one bits, no valid code.
			p := sos + 14
			for i := 0; i < 40; i += 2 {
				b[p+i], b[p+i+1] = 0xff, 0x00
			}
			return b
		}), "invalid Huffman code"},
		{"12-bit", edit(base, func(b []byte) []byte { b[sof+4] = 12; return b }), "12-bit samples are not supported"},
		{"arithmetic", edit(base, func(b []byte) []byte { b[sof+1] = 0xc9; return b }), "unsupported coding process (SOF9"},
		{"2 components", edit(base, func(b []byte) []byte { b[sof+9] = 2; return b }), "2 components are not supported"},
		{"sampling 5x1", edit(base, func(b []byte) []byte { b[sof+11] = 0x51; return b }), "sampling factors 5x1"},
		{"sampling 3x1 with 2x1", edit(base, func(b []byte) []byte { b[sof+11], b[sof+14] = 0x31, 0x21; return b }), "do not divide"},
		{"width 0", edit(base, func(b []byte) []byte { b[sof+7], b[sof+8] = 0, 0; return b }), "width 0"},
		{"height 0 (DNL)", edit(base, func(b []byte) []byte { b[sof+5], b[sof+6] = 0, 0; return b }), "DNL"},
		{"missing restart marker", edit(restart, func(b []byte) []byte {
			i := bytes.Index(b, []byte{0xff, 0xd0})
			b[i+1] = 0xd9
			return b
		}), "marker 0xD9 where a restart marker was due"},
		{"over-full Huffman table", edit(base, func(b []byte) []byte {
			// Two more codes of length 1 and two fewer of length 3: the
			// total stays, but length 1 holds only two codes.
			i := bytes.Index(b, []byte{0xff, 0xc4})
			b[i+5] += 2
			b[i+7] -= 2
			return b
		}), "invalid Huffman table"},
		{"undefined Huffman table", edit(base, func(b []byte) []byte {
			i := bytes.Index(b, []byte{0xff, 0xc4})
			b[i+4] = 0x02 // the DC table 0 becomes DC table 2
			return b
		}), "Huffman table the scan uses is not defined"},
		{"bad segment length", edit(base, func(b []byte) []byte { b[sof+2], b[sof+3] = 0, 1; return b }), "invalid length 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := jpeg.Decode(tc.data, 1<<20)
			if err == nil {
				t.Fatalf("decoded; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestBombRefusedBeforeAllocation gives a 16000x16000 frame header to a
// decoder limited to 100 Mpixels: it must be refused having allocated
// almost nothing (the image would take 256 MB per component).
func TestBombRefusedBeforeAllocation(t *testing.T) {
	b := edit(fixture(t, "base_420.jpg"), func(b []byte) []byte {
		i := sofAt(t, b)
		b[i+5], b[i+6], b[i+7], b[i+8] = 16000>>8, 16000&255, 16000>>8, 16000&255
		return b
	})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := jpeg.Decode(b, 100<<20)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, jpeg.ErrTooManyPixels) {
		t.Fatalf("error %v, want ErrTooManyPixels", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Errorf("allocated %d bytes before refusing", n)
	}
	if _, err := jpeg.DecodeConfig(b); err != nil {
		t.Errorf("DecodeConfig: %v (the header alone is fine)", err)
	}
}

// TestWorkBounded builds a 3 KB progressive file of a 1024x1024 frame
// whose refinement scans are each one end-of-band run over all 16,384
// blocks: 60 of them would be 62 million coefficient visits from a few
// hundred bytes. The decoder stops once the visits outgrow the file.
func TestWorkBounded(t *testing.T) {
	var b []byte
	put := func(p ...byte) { b = append(b, p...) }
	put(0xff, 0xd8)
	put(0xff, 0xdb, 0, 67, 0)
	put(bytes.Repeat([]byte{1}, 64)...)
	put(0xff, 0xc2, 0, 11, 8, 0x04, 0, 0x04, 0, 1, 1, 0x11, 0)
	// DC table: one 1-bit code, category 0. AC table: one 1-bit code, EOB14.
	put(0xff, 0xc4, 0, 38, 0x00, 1)
	put(make([]byte, 15)...)
	put(0x00, 0x10, 1)
	put(make([]byte, 15)...)
	put(0xe0)
	scan := func(ss, se, ahal byte, data int) {
		put(0xff, 0xda, 0, 8, 1, 1, 0x00, ss, se, ahal)
		put(make([]byte, data)...)
	}
	scan(0, 0, 0x00, 16384/8) // DC: one bit per block
	scan(1, 63, 0x01, 2)      // AC first: one run of 16,384 blocks
	for range 60 {
		scan(1, 63, 0x10, 2) // AC refinement: the same run, visiting the whole band
	}
	put(0xff, 0xd9)
	_, err := jpeg.Decode(b, 1<<26)
	if err == nil || !strings.Contains(err.Error(), "coefficient visits per byte") {
		t.Fatalf("%d-byte file: error %v, want the work bound", len(b), err)
	}
}
