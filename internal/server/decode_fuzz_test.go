package server

import (
	"errors"
	"testing"

	"goinfer/internal/tensor"
)

func FuzzParseData(f *testing.F) {
	f.Add([]byte(`[1, 2.5, -3e2, 4]`), uint8(0), 4)
	f.Add([]byte(`[[1,2],[3,4]]`), uint8(1), 4)
	f.Add([]byte(`[0, 255, 7]`), uint8(2), 3)
	f.Add([]byte(`[[[`), uint8(0), 1)
	f.Add([]byte(`["x", null, true]`), uint8(0), 3)
	f.Add([]byte(`[1e999, -]`), uint8(0), 2)
	dts := []tensor.DType{tensor.Float32, tensor.Float16, tensor.Uint8}
	f.Fuzz(func(t *testing.T, raw []byte, which uint8, n int) {
		if n < 0 || n > 1<<12 {
			return
		}
		dt := dts[int(which)%len(dts)]
		dst := make([]byte, n*dt.Size())
		err := parseData(raw, dt, dst)
		var ae *apiError
		if err != nil && (!errors.As(err, &ae) || ae.kind != kindInvalid) {
			t.Fatalf("error %v is not an invalid-argument error", err)
		}
	})
}

func FuzzDecodeHeader(f *testing.F) {
	f.Add([]byte(`{"id":"a","inputs":[{"name":"input","shape":[1,3,4,4],"datatype":"FP32","parameters":{"binary_data_size":192}}],"outputs":[{"name":"logits","parameters":{"classification":2}}]}`))
	f.Add([]byte(`{"inputs":[{"data":[1,2,3]}]} trailing`))
	f.Add([]byte(`{"inputs":"x"}`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeHeader(b)
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.kind != kindInvalid {
				t.Fatalf("error %v is not an invalid-argument error", err)
			}
			return
		}
		for _, o := range r.Outputs {
			paramBool(o.Parameters, "binary_data", "outputs[0]")
			paramInt(o.Parameters, "classification", "outputs[0]")
		}
	})
}
