// Package tensor holds the n-dimensional arrays that move between goinfer's
// parts: checkpoints, engines, the pipeline and the wire. A Tensor is a dtype,
// a shape and little-endian raw bytes, so that it can be copied to a device or
// a socket without conversion.
package tensor

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unsafe"

	"github.com/x448/float16"
)

// DType is an element type.
type DType uint8

// The element types goinfer understands.
const (
	Invalid DType = iota
	Float32
	Float16
	BFloat16
	Float64
	Uint8
	Int8
	Int32
	Int64
	Bool
)

var dtypeInfo = [...]struct {
	name string
	size int
}{
	Invalid:  {"invalid", 0},
	Float32:  {"float32", 4},
	Float16:  {"float16", 2},
	BFloat16: {"bfloat16", 2},
	Float64:  {"float64", 8},
	Uint8:    {"uint8", 1},
	Int8:     {"int8", 1},
	Int32:    {"int32", 4},
	Int64:    {"int64", 8},
	Bool:     {"bool", 1},
}

// String returns the dtype's lower-case name ("float32", "bfloat16", ...).
func (d DType) String() string {
	if int(d) < len(dtypeInfo) {
		return dtypeInfo[d].name
	}
	return fmt.Sprintf("dtype(%d)", d)
}

// Size is the number of bytes one element takes.
func (d DType) Size() int {
	if int(d) < len(dtypeInfo) {
		return dtypeInfo[d].size
	}
	return 0
}

// ParseDType accepts the names used on command lines and in file formats:
// "fp32", "float32", "f32", "F32", "fp16", "half", "bf16", "uint8", "u8", ...
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(s) {
	case "fp32", "float32", "f32", "float":
		return Float32, nil
	case "fp16", "float16", "f16", "half":
		return Float16, nil
	case "bf16", "bfloat16":
		return BFloat16, nil
	case "fp64", "float64", "f64", "double":
		return Float64, nil
	case "uint8", "u8":
		return Uint8, nil
	case "int8", "i8":
		return Int8, nil
	case "int32", "i32":
		return Int32, nil
	case "int64", "i64", "long":
		return Int64, nil
	case "bool":
		return Bool, nil
	}
	return Invalid, fmt.Errorf("unknown dtype %q", s)
}

// Shape is a list of dimension sizes, outermost first.
type Shape []int

// NumElements is the product of the dimensions (1 for a scalar).
func (s Shape) NumElements() int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// Equal reports whether two shapes have the same rank and dimensions.
func (s Shape) Equal(o Shape) bool {
	if len(s) != len(o) {
		return false
	}
	for i := range s {
		if s[i] != o[i] {
			return false
		}
	}
	return true
}

// Clone returns a copy that does not share memory with s.
func (s Shape) Clone() Shape { return append(Shape(nil), s...) }

func (s Shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// maxElements bounds a tensor's element count (2^40), far above any real
// model or batch, so that hostile headers cannot make sizes overflow.
const maxElements = 1 << 40

// Validate checks that no dimension is negative and that the element count
// does not overflow.
func (s Shape) Validate() error {
	n := 1
	for i, d := range s {
		if d < 0 {
			return fmt.Errorf("shape %v: dimension %d is negative", s, i)
		}
		if d != 0 && n > maxElements/d {
			return fmt.Errorf("shape %v: more than %d elements", s, maxElements)
		}
		n *= d
	}
	return nil
}

// Tensor is a dense, row-major array of one dtype. Data holds exactly
// Shape.NumElements()*DType.Size() little-endian bytes. Data may alias a
// memory-mapped file or a pooled buffer; whoever owns it says so.
type Tensor struct {
	DType DType
	Shape Shape
	Data  []byte
}

// ErrSize reports data whose length does not match dtype and shape.
var ErrSize = errors.New("tensor data size does not match shape")

// New allocates a zeroed tensor.
func New(dt DType, shape ...int) *Tensor {
	s := Shape(shape).Clone()
	return &Tensor{DType: dt, Shape: s, Data: make([]byte, s.NumElements()*dt.Size())}
}

// FromBytes wraps data (not copied) after checking its length.
func FromBytes(dt DType, shape Shape, data []byte) (*Tensor, error) {
	if err := shape.Validate(); err != nil {
		return nil, err
	}
	if want := shape.NumElements() * dt.Size(); len(data) != want {
		return nil, fmt.Errorf("%w: %s%v needs %d bytes, got %d", ErrSize, dt, shape, want, len(data))
	}
	return &Tensor{DType: dt, Shape: shape.Clone(), Data: data}, nil
}

// FromFloat32 wraps v (not copied) as a float32 tensor.
func FromFloat32(shape Shape, v []float32) (*Tensor, error) {
	if shape.NumElements() != len(v) {
		return nil, fmt.Errorf("%w: shape %v has %d elements, got %d values", ErrSize, shape, shape.NumElements(), len(v))
	}
	return &Tensor{DType: Float32, Shape: shape.Clone(), Data: F32Bytes(v)}, nil
}

// NumElements is the element count.
func (t *Tensor) NumElements() int { return t.Shape.NumElements() }

// Validate checks that Data has the length DType and Shape imply.
func (t *Tensor) Validate() error {
	if err := t.Shape.Validate(); err != nil {
		return err
	}
	if want := t.NumElements() * t.DType.Size(); len(t.Data) != want {
		return fmt.Errorf("%w: %s%v needs %d bytes, got %d", ErrSize, t.DType, t.Shape, want, len(t.Data))
	}
	return nil
}

// Float32s returns the data as []float32 without copying. It panics if the
// dtype is not Float32: that is a programming error, not bad input.
func (t *Tensor) Float32s() []float32 {
	if t.DType != Float32 {
		panic("tensor: Float32s on " + t.DType.String())
	}
	return BytesF32(t.Data)
}

// ToFloat32 returns the values converted to float32. A float32 tensor is
// returned without copying; other dtypes are converted into a new slice.
func (t *Tensor) ToFloat32() ([]float32, error) {
	n := t.NumElements()
	if err := t.Validate(); err != nil {
		return nil, err
	}
	switch t.DType {
	case Float32:
		return BytesF32(t.Data), nil
	case Float16:
		out := make([]float32, n)
		for i := range out {
			out[i] = float16.Frombits(le16(t.Data[2*i:])).Float32()
		}
		return out, nil
	case BFloat16:
		out := make([]float32, n)
		for i := range out {
			out[i] = BF16ToFloat32(le16(t.Data[2*i:]))
		}
		return out, nil
	case Float64:
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(math.Float64frombits(le64(t.Data[8*i:])))
		}
		return out, nil
	case Uint8:
		out := make([]float32, n)
		for i, b := range t.Data {
			out[i] = float32(b)
		}
		return out, nil
	case Int8:
		out := make([]float32, n)
		for i, b := range t.Data {
			out[i] = float32(int8(b))
		}
		return out, nil
	case Int32:
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(int32(le32(t.Data[4*i:])))
		}
		return out, nil
	case Int64:
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(int64(le64(t.Data[8*i:])))
		}
		return out, nil
	}
	return nil, fmt.Errorf("cannot convert %s to float32", t.DType)
}

// F32Bytes reinterprets v as bytes without copying. goinfer only runs on
// little-endian machines (amd64, arm64), where this is the wire layout.
func F32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// BytesF32 reinterprets b as float32s without copying. len(b) must be a
// multiple of 4 and b 4-byte aligned (Go allocations are).
func BytesF32(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// Float32ToF16 converts with round-to-nearest-even.
func Float32ToF16(f float32) uint16 { return float16.Fromfloat32(f).Bits() }

// F16ToFloat32 converts an IEEE half to float32.
func F16ToFloat32(h uint16) float32 { return float16.Frombits(h).Float32() }

// BF16ToFloat32 widens a bfloat16.
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float32ToBF16 narrows with round-to-nearest-even, keeping NaN a NaN.
func Float32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

func le16(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }
func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
func le64(b []byte) uint64 { return uint64(le32(b)) | uint64(le32(b[4:]))<<32 }
