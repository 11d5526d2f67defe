package server

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSplitBytesElems(t *testing.T) {
	tests := []struct {
		name string
		raw  []byte
		want int
		got  []string
		err  string
	}{
		{"two", []byte("\x03\x00\x00\x00abc\x01\x00\x00\x00z"), 2, []string{"abc", "z"}, ""},
		{"empty element", []byte("\x00\x00\x00\x00"), 1, []string{""}, ""},
		{"none", nil, 0, []string{}, ""},
		{"too few", []byte("\x01\x00\x00\x00a"), 2, nil, "holds 1 BYTES elements; its shape declares 2"},
		{"too many", []byte("\x01\x00\x00\x00a\x01\x00\x00\x00b"), 1, nil, "more than the 1"},
		{"short prefix", []byte("\x01\x00"), 1, nil, "element 0: 2 bytes left"},
		{"length past end", []byte("\x09\x00\x00\x00abc"), 1, nil, "says 9 bytes, but only 3 follow"},
		{"huge length", []byte("\xff\xff\xff\xffabc"), 1, nil, "only 3 follow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			elems, err := splitBytesElems(tt.raw, tt.want, "inputs[0]")
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range elems {
				got = append(got, string(e))
			}
			if strings.Join(got, "|") != strings.Join(tt.got, "|") || len(got) != len(tt.got) {
				t.Errorf("got %q, want %q", got, tt.got)
			}
		})
	}
}

func TestParseJSONImages(t *testing.T) {
	tests := []struct {
		name, data string
		want       int
		got        []string
		err        string
	}{
		{"flat", `["aGk=", "eW8"]`, 2, []string{"hi", "yo"}, ""},
		{"nested", `[["aGk="], ["eW8="]]`, 2, []string{"hi", "yo"}, ""},
		{"empty string", `[""]`, 1, []string{""}, ""},
		{"count", `["aGk="]`, 2, nil, "holds 1 images; its shape declares 2"},
		{"not base64", `["!!"]`, 1, nil, "data[0] is not base64"},
		{"numbers", `[1, 2]`, 2, nil, "array of base64 strings"},
		{"rows of two", `[["aGk=", "aGk="]]`, 1, nil, "data[0] has 2 strings"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			imgs, err := parseJSONImages(json.RawMessage(tt.data), tt.want, "inputs[0]")
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range imgs {
				got = append(got, string(e))
			}
			if strings.Join(got, "|") != strings.Join(tt.got, "|") {
				t.Errorf("got %q, want %q", got, tt.got)
			}
		})
	}
}
