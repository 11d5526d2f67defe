package onnx

import (
	"errors"
	"fmt"

	"goinfer/internal/tensor"
)

// ErrUnsupportedDType reports an ONNX data type goinfer has no dtype for
// (strings, complex numbers, 16-bit and unsigned wide integers, float8 and
// the 2- and 4-bit types).
var ErrUnsupportedDType = errors.New("unsupported ONNX data type")

// tensorProtoTypeName is TensorProto.DataType's name of t, for errors; "" for
// numbers ONNX does not define.
func tensorProtoTypeName(t int32) string {
	switch t {
	case 0:
		return "UNDEFINED"
	case 1:
		return "FLOAT"
	case 2:
		return "UINT8"
	case 3:
		return "INT8"
	case 4:
		return "UINT16"
	case 5:
		return "INT16"
	case 6:
		return "INT32"
	case 7:
		return "INT64"
	case 8:
		return "STRING"
	case 9:
		return "BOOL"
	case 10:
		return "FLOAT16"
	case 11:
		return "DOUBLE"
	case 12:
		return "UINT32"
	case 13:
		return "UINT64"
	case 14:
		return "COMPLEX64"
	case 15:
		return "COMPLEX128"
	case 16:
		return "BFLOAT16"
	case 17:
		return "FLOAT8E4M3FN"
	case 18:
		return "FLOAT8E4M3FNUZ"
	case 19:
		return "FLOAT8E5M2"
	case 20:
		return "FLOAT8E5M2FNUZ"
	case 21:
		return "UINT4"
	case 22:
		return "INT4"
	case 23:
		return "FLOAT4E2M1"
	case 24:
		return "FLOAT8E8M0"
	case 25:
		return "UINT2"
	case 26:
		return "INT2"
	}
	return ""
}

// DType maps an ONNX TensorProto.DataType to goinfer's dtype. Types
// goinfer cannot hold give an error wrapping ErrUnsupportedDType that
// names the type; 0 (UNDEFINED) and numbers ONNX does not define are
// plain errors, the file being broken.
func DType(onnxType int32) (tensor.DType, error) {
	switch onnxType {
	case 1:
		return tensor.Float32, nil
	case 2:
		return tensor.Uint8, nil
	case 3:
		return tensor.Int8, nil
	case 6:
		return tensor.Int32, nil
	case 7:
		return tensor.Int64, nil
	case 9:
		return tensor.Bool, nil
	case 10:
		return tensor.Float16, nil
	case 11:
		return tensor.Float64, nil
	case 16:
		return tensor.BFloat16, nil
	}
	if name := tensorProtoTypeName(onnxType); onnxType == 0 || name == "" {
		return tensor.Invalid, fmt.Errorf("invalid ONNX data type %d", onnxType)
	}
	return tensor.Invalid, fmt.Errorf("%w: %s (%d); goinfer handles float32, float16, bfloat16, float64, uint8, int8, int32, int64 and bool",
		ErrUnsupportedDType, tensorProtoTypeName(onnxType), onnxType)
}

// ONNXType is DType's inverse: the TensorProto.DataType of dt, 0
// (UNDEFINED) for tensor.Invalid or an unknown dtype.
func ONNXType(dt tensor.DType) int32 {
	switch dt {
	case tensor.Float32:
		return 1
	case tensor.Uint8:
		return 2
	case tensor.Int8:
		return 3
	case tensor.Int32:
		return 6
	case tensor.Int64:
		return 7
	case tensor.Bool:
		return 9
	case tensor.Float16:
		return 10
	case tensor.Float64:
		return 11
	case tensor.BFloat16:
		return 16
	}
	return 0
}
