package kservepb

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"unsafe"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func sampleRequest(rawLen int) *ModelInferRequest {
	raw := make([]byte, rawLen)
	for i := range raw {
		raw[i] = byte(i * 7)
	}
	return &ModelInferRequest{
		ModelName: "resnet18", ModelVersion: "1", Id: "abc",
		Parameters: map[string]*InferParameter{"p": {ParameterChoice: &InferParameter_BoolParam{BoolParam: true}}},
		Inputs: []*ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 3, 8, 8},
			Parameters: map[string]*InferParameter{"x": {ParameterChoice: &InferParameter_Int64Param{Int64Param: 3}}}}},
		Outputs:          []*ModelInferRequest_InferRequestedOutputTensor{{Name: "logits"}},
		RawInputContents: [][]byte{raw},
	}
}

// chunks splits b into a BufferSlice at random points, as HTTP/2 frames do.
func chunks(b []byte, rng *rand.Rand) mem.BufferSlice {
	var out mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), 1+rng.IntN(20000))
		out = append(out, mem.SliceBuffer(append([]byte(nil), b[:n]...)))
		b = b[n:]
	}
	return out
}

func TestCodecRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var c Codec
	for _, rawLen := range []int{0, 1, 768, 750_000} {
		want := sampleRequest(rawLen)
		bs, err := c.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		wire := bs.Materialize()
		// What the client codec sends is what protobuf sends.
		std, _ := proto.Marshal(want)
		var viaOurs ModelInferRequest
		if err := proto.Unmarshal(wire, &viaOurs); err != nil || !proto.Equal(&viaOurs, want) {
			t.Fatalf("raw %d: codec's wire does not decode to the request (%v)", rawLen, err)
		}
		for _, in := range [][]byte{wire, std} {
			got := &ModelInferRequest{}
			if err := c.Unmarshal(chunks(in, rng), got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("raw %d: decoded %v, want %v", rawLen, got, want)
			}
			if rawLen > 0 {
				if p := uintptr(unsafe.Pointer(&got.RawInputContents[0][0])); p%RawAlign != 0 {
					t.Errorf("raw %d: payload at %#x is not %d-byte aligned", rawLen, p, RawAlign)
				}
			}
			c.Release(got)
			if got.RawInputContents != nil {
				t.Error("Release left the raw contents in the request")
			}
		}
	}
}

func TestCodecResponseAndOtherMessages(t *testing.T) {
	var c Codec
	resp := &ModelInferResponse{ModelName: "m", Id: "i", Outputs: []*ModelInferResponse_InferOutputTensor{{Name: "logits", Datatype: "FP32", Shape: []int64{1, 2}}},
		RawOutputContents: [][]byte{{1, 2, 3, 4, 5, 6, 7, 8}, {}}}
	bs, err := c.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var got ModelInferResponse
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(bs.Materialize())}, &got); err != nil || !proto.Equal(&got, resp) {
		t.Fatalf("response round trip: %v %v", &got, err)
	}
	md := &ModelMetadataRequest{Name: "m", Version: "2"}
	bs, err = c.Marshal(md)
	if err != nil {
		t.Fatal(err)
	}
	var gotMD ModelMetadataRequest
	if err := c.Unmarshal(bs, &gotMD); err != nil || !proto.Equal(&gotMD, md) {
		t.Fatalf("metadata round trip: %v %v", &gotMD, err)
	}
}

func TestUnmarshalInferRequestOddOrder(t *testing.T) {
	want := sampleRequest(100)
	// raw_input_contents first, the rest after: legal, if unusual.
	var b []byte
	b = protowire.AppendTag(b, 7, protowire.BytesType)
	b = protowire.AppendBytes(b, want.RawInputContents[0])
	head, _ := proto.Marshal(&ModelInferRequest{ModelName: want.ModelName, ModelVersion: want.ModelVersion, Id: want.Id,
		Parameters: want.Parameters, Inputs: want.Inputs, Outputs: want.Outputs})
	b = append(b, head...)
	var got ModelInferRequest
	if err := UnmarshalInferRequest(b, &got); err != nil || !proto.Equal(&got, want) {
		t.Fatalf("got %v %v", &got, err)
	}
}

func TestUnmarshalInferRequestErrors(t *testing.T) {
	good, _ := proto.Marshal(sampleRequest(10))
	for name, b := range map[string][]byte{
		"truncated": good[:len(good)-3],
		"bad tag":   {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"field 0":   {0x02, 0x00},
	} {
		var got ModelInferRequest
		if err := UnmarshalInferRequest(b, &got); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// FuzzUnmarshalInferRequest checks the aliasing decoder against protobuf:
// the same messages, the same failures.
func FuzzUnmarshalInferRequest(f *testing.F) {
	good, _ := proto.Marshal(sampleRequest(16))
	f.Add(good)
	f.Add(good[:20])
	f.Add([]byte{0x3a, 0x02, 0x01, 0x02})
	f.Fuzz(func(t *testing.T, b []byte) {
		var want, got ModelInferRequest
		errWant := proto.Unmarshal(b, &want)
		errGot := UnmarshalInferRequest(bytes.Clone(b), &got)
		if (errWant == nil) != (errGot == nil) {
			t.Fatalf("protobuf: %v, ours: %v", errWant, errGot)
		}
		if errWant == nil && !proto.Equal(&want, &got) {
			t.Fatalf("protobuf decoded %v, ours %v", &want, &got)
		}
	})
}

// TestPlaceRequest checks that a request copied where PlaceRequest says
// is Placed, decodes with UnmarshalPlaced to what protobuf decodes, with
// raw_input_contents aliasing the buffer, and that a malformed one keeps
// its error for DecodeError.
func TestPlaceRequest(t *testing.T) {
	var c Codec
	for _, rawLen := range []int{1, 768, 750_000} {
		want := sampleRequest(rawLen)
		wire, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		for misalign := range 3 {
			mem := make([]byte, len(wire)+RawAlign+misalign)[misalign:]
			base := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
			shift := PlaceRequest(wire[:min(len(wire), 4096)], base)
			b := mem[shift : shift+len(wire)]
			copy(b, wire)
			if !Placed(b) {
				t.Fatalf("raw %d, misalign %d: not Placed at shift %d", rawLen, misalign, shift)
			}
			if Placed(mem[shift+1 : shift+1+len(wire)]) {
				t.Fatalf("raw %d: Placed one byte off", rawLen)
			}
			var got ModelInferRequest
			if err := c.UnmarshalPlaced(b, &got); err != nil || !proto.Equal(&got, want) {
				t.Fatalf("raw %d: UnmarshalPlaced: %v, equal %v", rawLen, err, proto.Equal(&got, want))
			}
			if &got.RawInputContents[0][0] != &b[len(b)-rawLen] {
				t.Fatalf("raw %d: raw_input_contents copied, not aliased", rawLen)
			}
		}
	}
	if Placed([]byte{0x0a, 0x01, 'm'}) || PlaceRequest([]byte{0x0a, 0x01, 'm'}, 3) != 0 {
		t.Error("a request without raw_input_contents is Placed or shifted")
	}
	d := Codec{DeferErrors: true}
	var bad ModelInferRequest
	if err := d.UnmarshalPlaced([]byte{0xff}, &bad); err != nil {
		t.Fatalf("DeferErrors: UnmarshalPlaced returned %v", err)
	}
	if d.DecodeError(&bad) == nil {
		t.Error("DeferErrors: the decode error was not kept")
	}
}
