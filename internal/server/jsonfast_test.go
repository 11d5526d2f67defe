package server

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// slowHeader is decodeHeader's encoding/json path.
func slowHeader(b []byte) (*jsonInferRequest, error) {
	var r jsonInferRequest
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&r); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errorf(kindInvalid, "data after the object")
	}
	return &r, nil
}

var headerCases = []struct {
	json string
	fast bool // decodeHeaderFast takes it
}{
	{`{"inputs":[{"name":"input","shape":[1,3,250,250],"datatype":"FP32","parameters":{"binary_data_size":750000}}],"outputs":[{"name":"logits","parameters":{"binary_data":true}}]}`, true},
	{` { "id" : "r1", "parameters" : {"binary_data_output": false, "x": "y", "n": -3} ,
	  "inputs" : [ { "name":"input", "shape":[ ], "datatype":"FP16", "parameters": { } } ], "outputs": [] } `, true},
	{`{}`, true},
	{`{"inputs":[],"outputs":[{"name":"logits"},{"parameters":{"classification":5}}]}`, true},
	{`{"inputs":[{"shape":[9223372036854775807,-0]}]}`, true},
	// Left to encoding/json (which accepts or refuses them).
	{`{"inputs":[{"name":"input","shape":[1,3,2,2],"datatype":"FP32","data":[1,2,3]}]}`, false},
	{`{"ID":"r1"}`, false},
	{`{"id":"r\u0031"}`, false},
	{`{"id":"é"}`, false},
	{`{"id":null}`, false},
	{`{"id":"a","id":"b"}`, false},
	{`{"parameters":{"a":1,"a":2}}`, false},
	{`{"parameters":{"a":1.5}}`, false},
	{`{"parameters":{"a":1e3}}`, false},
	{`{"parameters":{"a":{"b":1}}}`, false},
	{`{"parameters":{"a":[1]}}`, false},
	{`{"parameters":{"a":null}}`, false},
	{`{"inputs":[{"shape":[01]}]}`, false},
	{`{"inputs":[{"shape":[9223372036854775808]}]}`, false},
	{`{"inputs":[{"shape":[-]}]}`, false},
	{`{"inputs":[{"shape":["1"]}]}`, false},
	{`{"inputs":{}}`, false},
	{`{"other":1}`, false},
	{`{"id":"a"} {}`, false},
	{`{"id":"a"`, false},
	{`{"id":"a",}`, false},
	{`[]`, false},
	{``, false},
}

func TestDecodeHeaderFast(t *testing.T) {
	for _, tt := range headerCases {
		got, ok := decodeHeaderFast([]byte(tt.json))
		if ok != tt.fast {
			t.Errorf("%s: fast path took it: %v, want %v", tt.json, ok, tt.fast)
			continue
		}
		checkSameHeader(t, []byte(tt.json), got, ok)
	}
}

// checkSameHeader checks that what the fast path accepted, encoding/json
// accepts too, with the same result.
func checkSameHeader(t *testing.T, b []byte, got *jsonInferRequest, ok bool) {
	t.Helper()
	if !ok {
		return
	}
	want, err := slowHeader(b)
	if err != nil {
		t.Fatalf("%q: fast path accepted what encoding/json refuses: %v", b, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: fast path gives\n%#v\nencoding/json\n%#v", b, got, want)
	}
}

func FuzzDecodeHeaderFast(f *testing.F) {
	for _, tt := range headerCases {
		f.Add([]byte(tt.json))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := decodeHeaderFast(b)
		checkSameHeader(t, b, got, ok)
	})
}

func BenchmarkDecodeHeader(b *testing.B) {
	hdr := []byte(headerCases[0].json)
	for _, bb := range []struct {
		name   string
		decode func([]byte) (*jsonInferRequest, error)
	}{{"fast", decodeHeader}, {"encoding-json", slowHeader}} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bb.decode(hdr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
