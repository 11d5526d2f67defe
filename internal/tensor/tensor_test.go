package tensor

import (
	"errors"
	"math"
	"testing"
)

func TestParseDType(t *testing.T) {
	tests := []struct {
		in   string
		want DType
	}{
		{"fp32", Float32}, {"F32", Float32}, {"float16", Float16}, {"half", Float16},
		{"bf16", BFloat16}, {"BFloat16", BFloat16}, {"u8", Uint8}, {"int64", Int64},
	}
	for _, tt := range tests {
		got, err := ParseDType(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	if _, err := ParseDType("complex64"); err == nil {
		t.Error("ParseDType(complex64) succeeded")
	}
}

func TestFromBytesChecksSize(t *testing.T) {
	if _, err := FromBytes(Float32, Shape{2, 3}, make([]byte, 23)); !errors.Is(err, ErrSize) {
		t.Fatalf("want ErrSize, got %v", err)
	}
	if _, err := FromBytes(Float32, Shape{2, -3}, nil); err == nil {
		t.Fatal("negative dimension accepted")
	}
	if _, err := FromBytes(Uint8, Shape{1 << 30, 1 << 30, 1 << 30}, nil); err == nil {
		t.Fatal("overflowing shape accepted")
	}
	x, err := FromBytes(Float16, Shape{2, 3}, make([]byte, 12))
	if err != nil || x.NumElements() != 6 {
		t.Fatalf("FromBytes: %v", err)
	}
}

func TestHalfConversions(t *testing.T) {
	for _, f := range []float32{0, 1, -2.5, 65504, 1e-3, float32(math.Inf(1))} {
		if got := F16ToFloat32(Float32ToF16(f)); math.Abs(float64(got-f)) > math.Abs(float64(f))*1e-3 {
			t.Errorf("f16 round trip of %g = %g", f, got)
		}
		if got := BF16ToFloat32(Float32ToBF16(f)); math.Abs(float64(got-f)) > math.Abs(float64(f))*1e-2 {
			t.Errorf("bf16 round trip of %g = %g", f, got)
		}
	}
	// Round to nearest even: 1 + 2^-8 lies halfway between two bf16 values.
	if got := BF16ToFloat32(Float32ToBF16(1 + 1.0/256)); got != 1 {
		t.Errorf("bf16(1+2^-8) = %g, want 1 (ties to even)", got)
	}
	if nan := BF16ToFloat32(Float32ToBF16(float32(math.NaN()))); !math.IsNaN(float64(nan)) {
		t.Errorf("bf16(NaN) = %g", nan)
	}
}

func TestToFloat32(t *testing.T) {
	f16 := New(Float16, 2)
	h := Float32ToF16(1.5)
	f16.Data[2], f16.Data[3] = byte(h), byte(h>>8)
	got, err := f16.ToFloat32()
	if err != nil || got[0] != 0 || got[1] != 1.5 {
		t.Fatalf("f16 ToFloat32 = %v, %v", got, err)
	}
	u8 := &Tensor{DType: Uint8, Shape: Shape{3}, Data: []byte{0, 7, 255}}
	if got, _ := u8.ToFloat32(); got[2] != 255 || got[1] != 7 {
		t.Fatalf("u8 ToFloat32 = %v", got)
	}
	bad := &Tensor{DType: Float32, Shape: Shape{3}, Data: make([]byte, 8)}
	if _, err := bad.ToFloat32(); !errors.Is(err, ErrSize) {
		t.Fatalf("short data: %v", err)
	}
	v := []float32{1, 2, 3}
	ft, _ := FromFloat32(Shape{3}, v)
	v[1] = 9
	if ft.Float32s()[1] != 9 {
		t.Fatal("FromFloat32 copied instead of aliasing")
	}
}
