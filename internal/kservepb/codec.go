package kservepb

import (
	"fmt"
	"sync"
	"unsafe"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the default "proto" codec
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Field numbers of the tensor payloads in the public protocol.
const (
	rawInputField  protowire.Number = 7 // ModelInferRequest.raw_input_contents
	rawOutputField protowire.Number = 6 // ModelInferResponse.raw_output_contents
)

// RawAlign is the alignment of the first raw_input_contents entry in
// buffers decoded by Codec, so that float32 (and SIMD) views of it are
// safe.
const RawAlign = 64

// Codec is a gRPC codec, wire-compatible with the default "proto" one, that
// keeps the tensor payloads of inference messages out of protobuf's copies:
//
//   - Marshal of a ModelInferRequest sends raw_input_contents straight from
//     the caller's slices (the message around them is marshalled alone), and
//     likewise raw_output_contents of a ModelInferResponse.
//   - Unmarshal of a ModelInferRequest gathers the received frames into one
//     pooled buffer, placed so that the first raw_input_contents entry is
//     RawAlign-aligned, and lets raw_input_contents alias it instead of
//     copying it once more. The buffer stays valid until Release(req).
//
// Other messages go through the default codec. Use it with
// grpc.ForceServerCodecV2 and grpc.ForceCodecV2; the zero value is ready.
type Codec struct {
	// Pool supplies the receive buffers (default: gRPC's default pool,
	// which zeroes what it hands out; a pool that does not saves a pass
	// over every request).
	Pool mem.BufferPool
	// DeferErrors makes Unmarshal keep a malformed message's error for
	// DecodeError instead of returning it: gRPC reports a codec's error
	// as INTERNAL, where a client's bad bytes are INVALID_ARGUMENT. Set it
	// on a server only, together with UnaryServerInterceptor and
	// StreamServerInterceptor, which hand the kept errors back.
	DeferErrors bool
	held        sync.Map // *ModelInferRequest -> *[]byte backing its raw contents
	failed      sync.Map // message -> its decode error (DeferErrors)
}

func (c *Codec) pool() mem.BufferPool {
	if c.Pool != nil {
		return c.Pool
	}
	return mem.DefaultBufferPool()
}

var _ encoding.CodecV2 = (*Codec)(nil)

func defaultCodec() encoding.CodecV2 { return encoding.GetCodecV2("proto") }

// Name is "proto": the content-subtype does not change.
func (c *Codec) Name() string { return "proto" }

// Marshal implements encoding.CodecV2.
func (c *Codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *ModelInferRequest:
		if len(m.RawInputContents) > 0 {
			head := &ModelInferRequest{ModelName: m.ModelName, ModelVersion: m.ModelVersion, Id: m.Id,
				Parameters: m.Parameters, Inputs: m.Inputs, Outputs: m.Outputs}
			return marshalWithRaw(head, rawInputField, m.RawInputContents)
		}
	case *ModelInferResponse:
		if len(m.RawOutputContents) > 0 {
			head := &ModelInferResponse{ModelName: m.ModelName, ModelVersion: m.ModelVersion, Id: m.Id,
				Parameters: m.Parameters, Outputs: m.Outputs}
			return marshalWithRaw(head, rawOutputField, m.RawOutputContents)
		}
	}
	return defaultCodec().Marshal(v)
}

// marshalWithRaw marshals head, then appends each raw entry as field num,
// the entries' bytes referenced rather than copied.
func marshalWithRaw(head proto.Message, num protowire.Number, raws [][]byte) (mem.BufferSlice, error) {
	b, err := proto.Marshal(head)
	if err != nil {
		return nil, err
	}
	out := make(mem.BufferSlice, 0, 2*len(raws)+1)
	for _, r := range raws {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(len(r)))
		out = append(out, mem.SliceBuffer(b))
		b = nil
		if len(r) > 0 {
			out = append(out, mem.SliceBuffer(r))
		}
	}
	return out, nil
}

// Unmarshal implements encoding.CodecV2.
func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.unmarshal(data, v)
	if err != nil && c.DeferErrors {
		c.failed.Store(v, err)
		return nil
	}
	return err
}

func (c *Codec) unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*ModelInferRequest)
	if !ok {
		return defaultCodec().Unmarshal(data, v)
	}
	n := data.Len()
	off := -1
	if len(data) > 0 {
		off = firstRawOffset(data[0].ReadOnlyData())
	}
	pool := c.pool()
	bp := pool.Get(n + RawAlign)
	shift := 0
	if off >= 0 && n > 0 {
		base := uintptr(unsafe.Pointer(unsafe.SliceData(*bp)))
		shift = int((RawAlign - (base+uintptr(off))%RawAlign) % RawAlign)
	}
	buf := (*bp)[shift : shift+n]
	data.CopyTo(buf)
	if err := UnmarshalInferRequest(buf, req); err != nil {
		pool.Put(bp)
		return err
	}
	if len(req.RawInputContents) == 0 {
		pool.Put(bp)
		return nil
	}
	c.held.Store(req, bp)
	return nil
}

// UnmarshalPlaced decodes a ModelInferRequest from b without copying it:
// raw_input_contents alias b, which the caller keeps unchanged until it is
// done with req (Release does nothing for req). It is for a transport that
// received the message where Unmarshal would have gathered it (see
// PlaceRequest). Errors are kept for DecodeError as Unmarshal's are.
func (c *Codec) UnmarshalPlaced(b []byte, req *ModelInferRequest) error {
	err := UnmarshalInferRequest(b, req)
	if err != nil && c.DeferErrors {
		c.failed.Store(req, err)
		return nil
	}
	return err
}

// PlaceRequest returns how far into a buffer from the codec's pool a
// ModelInferRequest of which head is the start should begin so that its
// first raw_input_contents entry is RawAlign-aligned, given the buffer's
// address base; 0 if head does not reach that entry.
func PlaceRequest(head []byte, base uintptr) int {
	off := firstRawOffset(head)
	if off < 0 {
		return 0
	}
	return int((RawAlign - (base+uintptr(off))%RawAlign) % RawAlign)
}

// Placed reports whether msg's first raw_input_contents entry starts
// RawAlign-aligned (false if msg has none), as Unmarshal would place it.
func Placed(msg []byte) bool {
	off := firstRawOffset(msg)
	return off >= 0 && off < len(msg) && uintptr(unsafe.Pointer(&msg[off]))%RawAlign == 0
}

// Release returns the buffer behind req's raw_input_contents to the pool.
// Servers call it when they are done with a request Unmarshal decoded;
// req's raw contents must not be used afterwards. Releasing a request the
// codec did not decode does nothing.
func (c *Codec) Release(req *ModelInferRequest) {
	if bp, ok := c.held.LoadAndDelete(req); ok {
		req.RawInputContents = nil
		c.pool().Put(bp.(*[]byte))
	}
}

// firstRawOffset finds where the first raw_input_contents payload starts in
// the leading bytes b of a ModelInferRequest, or -1 if it does not start
// within them. Marshallers write fields in number order, so the payload
// follows a header of a few hundred bytes.
func firstRawOffset(b []byte) int {
	pos := 0
	for pos < len(b) {
		num, typ, n := protowire.ConsumeTag(b[pos:])
		if n < 0 {
			return -1
		}
		if num == rawInputField && typ == protowire.BytesType {
			_, m := protowire.ConsumeVarint(b[pos+n:])
			if m < 0 {
				return -1
			}
			return pos + n + m
		}
		m := protowire.ConsumeFieldValue(num, typ, b[pos+n:])
		if m < 0 {
			return -1
		}
		pos += n + m
	}
	return -1
}

// UnmarshalInferRequest parses a ModelInferRequest from b, with
// raw_input_contents aliasing b rather than copied: the fields around them
// are parsed by protobuf as usual, so the result is the same as
// proto.Unmarshal's.
func UnmarshalInferRequest(b []byte, req *ModelInferRequest) error {
	var raws [][]byte
	var rest []byte
	for pos := 0; pos < len(b); {
		num, typ, n := protowire.ConsumeTag(b[pos:])
		if n < 0 {
			return fmt.Errorf("ModelInferRequest at byte %d: %w", pos, protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[pos+n:])
		if m < 0 {
			return fmt.Errorf("ModelInferRequest field %d at byte %d: %w", num, pos, protowire.ParseError(m))
		}
		if num == rawInputField && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[pos+n:])
			raws = append(raws, v[:len(v):len(v)])
		} else {
			if rest == nil {
				rest = make([]byte, 0, 1024)
			}
			rest = append(rest, b[pos:pos+n+m]...)
		}
		pos += n + m
	}
	if err := proto.Unmarshal(rest, req); err != nil {
		return err
	}
	req.RawInputContents = append(req.RawInputContents, raws...)
	return nil
}
