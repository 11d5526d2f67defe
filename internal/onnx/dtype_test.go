package onnx

import (
	"errors"
	"strings"
	"testing"

	"goinfer/internal/tensor"
)

func TestDType(t *testing.T) {
	for _, dt := range []tensor.DType{
		tensor.Float32, tensor.Float16, tensor.BFloat16, tensor.Float64, tensor.Uint8,
		tensor.Int8, tensor.Int32, tensor.Int64, tensor.Bool,
	} {
		o := ONNXType(dt)
		if o == 0 {
			t.Errorf("ONNXType(%s) = 0", dt)
			continue
		}
		back, err := DType(o)
		if err != nil || back != dt {
			t.Errorf("DType(ONNXType(%s) = %d) = %s, %v", dt, o, back, err)
		}
	}
	if got := ONNXType(tensor.Invalid); got != 0 {
		t.Errorf("ONNXType(Invalid) = %d, want 0", got)
	}
	for _, o := range []int32{0, -1, 99} {
		if _, err := DType(o); err == nil || errors.Is(err, ErrUnsupportedDType) || !strings.Contains(err.Error(), "invalid ONNX data type") {
			t.Errorf("DType(%d) = %v, want an invalid data type error", o, err)
		}
	}
	for o, name := range map[int32]string{
		4: "UINT16", 5: "INT16", 8: "STRING", 12: "UINT32", 13: "UINT64", 14: "COMPLEX64",
		15: "COMPLEX128", 17: "FLOAT8E4M3FN", 19: "FLOAT8E5M2", 22: "INT4",
	} {
		_, err := DType(o)
		if !errors.Is(err, ErrUnsupportedDType) || !strings.Contains(err.Error(), name) {
			t.Errorf("DType(%d) = %v, want an ErrUnsupportedDType naming %s", o, err, name)
		}
	}
}
