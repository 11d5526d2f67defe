package onnx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"

	"google.golang.org/protobuf/proto"

	"goinfer/internal/onnxpb"
	"goinfer/internal/tensor"
)

// DecodeTensor decodes a serialized TensorProto (ONNX's input_N.pb and
// output_N.pb test files) whose data is held in the message itself.
func DecodeTensor(data []byte) (*tensor.Tensor, string, error) {
	var tp onnxpb.TensorProto
	if err := proto.Unmarshal(data, &tp); err != nil {
		return nil, "", fmt.Errorf("onnx: decoding a TensorProto: %w", err)
	}
	t, err := tensorFromProto(&tp, nil)
	if err != nil {
		return nil, "", err
	}
	return t, tp.GetName(), nil
}

// externalData reads tensors stored in files next to the model. Files are
// opened through an os.Root on the model's directory, so that a location
// such as "../../etc/passwd" or a symbolic link leading out is refused.
type externalData struct {
	root *os.Root
}

func (e *externalData) close() {
	if e != nil && e.root != nil {
		e.root.Close()
	}
}

// tensorFromProto converts a TensorProto to a tensor, reading raw_data, the
// typed field of its data type, or its external file. Every size is checked
// against the bytes actually present before anything is allocated, so that
// a corrupt header cannot make the decoder allocate more than the file
// holds.
func tensorFromProto(tp *onnxpb.TensorProto, ext *externalData) (*tensor.Tensor, error) {
	name := tp.GetName()
	fail := func(format string, args ...any) error {
		return fmt.Errorf("tensor %q: %s", name, fmt.Sprintf(format, args...))
	}
	if tp.GetSegment() != nil {
		return nil, fail("segmented tensors are not supported")
	}
	dt, err := DType(tp.GetDataType())
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	shape := make(tensor.Shape, len(tp.GetDims()))
	for i, d := range tp.GetDims() {
		if d < 0 {
			return nil, fail("dimension %d is %d", i, d)
		}
		shape[i] = int(d)
	}
	if err := shape.Validate(); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	n := shape.NumElements()
	nbytes := n * dt.Size()

	if tp.GetDataLocation() == onnxpb.TensorProto_EXTERNAL {
		b, err := ext.read(tp, nbytes)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		return tensor.FromBytes(dt, shape, b)
	}
	if raw := tp.GetRawData(); len(raw) > 0 || n == 0 {
		if len(raw) != nbytes {
			return nil, fail("raw_data holds %d bytes, %s%v needs %d", len(raw), dt, shape, nbytes)
		}
		// Not copied: proto.Unmarshal gave the message its own copy of the
		// bytes, and the message is dropped once decoded.
		return tensor.FromBytes(dt, shape, raw)
	}

	// Typed fields: one element per entry.
	have := 0
	switch dt {
	case tensor.Float32:
		have = len(tp.GetFloatData())
	case tensor.Float64:
		have = len(tp.GetDoubleData())
	case tensor.Int64:
		have = len(tp.GetInt64Data())
	default:
		have = len(tp.GetInt32Data())
	}
	if have != n {
		return nil, fail("%s%v needs %d elements, the message holds %d (and no raw_data)", dt, shape, n, have)
	}
	t := tensor.New(dt, shape...)
	b, le := t.Data, binary.LittleEndian
	switch dt {
	case tensor.Float32:
		for i, v := range tp.GetFloatData() {
			le.PutUint32(b[4*i:], math.Float32bits(v))
		}
	case tensor.Float64:
		for i, v := range tp.GetDoubleData() {
			le.PutUint64(b[8*i:], math.Float64bits(v))
		}
	case tensor.Int64:
		for i, v := range tp.GetInt64Data() {
			le.PutUint64(b[8*i:], uint64(v))
		}
	case tensor.Int32:
		for i, v := range tp.GetInt32Data() {
			le.PutUint32(b[4*i:], uint32(v))
		}
	case tensor.Float16, tensor.BFloat16:
		// The 16 bits of each element sit in the low half of an int32.
		for i, v := range tp.GetInt32Data() {
			le.PutUint16(b[2*i:], uint16(v))
		}
	case tensor.Uint8, tensor.Int8:
		for i, v := range tp.GetInt32Data() {
			b[i] = byte(v)
		}
	case tensor.Bool:
		for i, v := range tp.GetInt32Data() {
			if v != 0 {
				b[i] = 1
			}
		}
	default:
		return nil, fail("no typed-field decoding for %s", dt)
	}
	return t, nil
}

// read returns the nbytes bytes of an external tensor: the file named by
// its "location" key, from "offset", "length" bytes long (to the end of the
// file when absent).
func (e *externalData) read(tp *onnxpb.TensorProto, nbytes int) ([]byte, error) {
	var location string
	var offset, length int64 = 0, -1
	for _, kv := range tp.GetExternalData() {
		switch kv.GetKey() {
		case "location":
			location = kv.GetValue()
		case "offset", "length":
			v, err := strconv.ParseInt(kv.GetValue(), 10, 64)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("external data %s %q is not a non-negative integer", kv.GetKey(), kv.GetValue())
			}
			if kv.GetKey() == "offset" {
				offset = v
			} else {
				length = v
			}
		}
	}
	if location == "" {
		return nil, errors.New("external data has no location")
	}
	if e == nil || e.root == nil {
		return nil, fmt.Errorf("data is in external file %q, but the model was decoded from bytes without a directory (use Load, or WithExternalDataDir)", location)
	}
	f, err := e.root.Open(location)
	if err != nil {
		return nil, fmt.Errorf("external data file %q (next to the model in %s): %w", location, e.root.Name(), err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("external data file %q: %w", location, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("external data %q is not a regular file", location)
	}
	size := st.Size()
	if offset > size {
		return nil, fmt.Errorf("external data file %q is %d bytes, offset %d is past its end", location, size, offset)
	}
	if length < 0 {
		length = size - offset
	}
	if length != int64(nbytes) {
		return nil, fmt.Errorf("external data in %q is %d bytes long, the tensor needs %d", location, length, nbytes)
	}
	if offset+length > size {
		return nil, fmt.Errorf("external data file %q is %d bytes, the tensor's %d bytes at offset %d run past its end", location, size, length, offset)
	}
	b := make([]byte, length)
	if _, err := f.ReadAt(b, offset); err != nil && !(errors.Is(err, io.EOF) && length == 0) {
		return nil, fmt.Errorf("reading external data file %q: %w", location, err)
	}
	return b, nil
}
