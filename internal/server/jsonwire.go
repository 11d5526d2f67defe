package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"goinfer/internal/tensor"
)

// The JSON form of an inference request (KServe v2 REST), with the binary
// tensor data extension's parameters. Data stays raw until the input has
// been checked, so that its numbers are parsed straight into a buffer of
// the right dtype.
type jsonInferRequest struct {
	ID         string                     `json:"id"`
	Parameters map[string]json.RawMessage `json:"parameters"`
	Inputs     []jsonInput                `json:"inputs"`
	Outputs    []jsonOutput               `json:"outputs"`
}

type jsonInput struct {
	Name       string                     `json:"name"`
	Shape      []int64                    `json:"shape"`
	Datatype   string                     `json:"datatype"`
	Parameters map[string]json.RawMessage `json:"parameters"`
	Data       json.RawMessage            `json:"data"`
}

type jsonOutput struct {
	Name       string                     `json:"name"`
	Parameters map[string]json.RawMessage `json:"parameters"`
}

// decodeHeader parses the JSON part of a request: a typical binary
// request without reflection (decodeHeaderFast), the rest with
// encoding/json.
func decodeHeader(b []byte) (*jsonInferRequest, error) {
	if r, ok := decodeHeaderFast(b); ok {
		return r, nil
	}
	var r jsonInferRequest
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&r); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, errorf(kindInvalid, "malformed JSON in the request at byte %d: %v", se.Offset, err)
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, errorf(kindInvalid, "request field %q: JSON %s cannot be %s", te.Field, te.Value, te.Type)
		}
		return nil, errorf(kindInvalid, "malformed JSON request: %v", err)
	}
	if dec.More() {
		return nil, errorf(kindInvalid, "malformed JSON request: data after the request object (binary data needs the Inference-Header-Content-Length header)")
	}
	return &r, nil
}

// paramBool reads a boolean parameter; absent is false.
func paramBool(params map[string]json.RawMessage, key, field string) (bool, error) {
	raw, ok := params[key]
	if !ok {
		return false, nil
	}
	var v bool
	if err := json.Unmarshal(raw, &v); err != nil {
		return false, errorf(kindInvalid, "%s.parameters.%s is %s; want true or false", field, key, raw)
	}
	return v, nil
}

// paramInt reads an integer parameter; absent is (0, false).
func paramInt(params map[string]json.RawMessage, key, field string) (int64, bool, error) {
	raw, ok := params[key]
	if !ok {
		return 0, false, nil
	}
	var v int64
	if err := json.Unmarshal(raw, &v); err != nil {
		if _, err := strconv.ParseInt(string(raw), 10, 64); errors.Is(err, strconv.ErrRange) {
			return 0, true, outOfRange(field, key, string(raw))
		}
		return 0, true, errorf(kindInvalid, "%s.parameters.%s is %s; want an integer", field, key, raw)
	}
	return v, true, nil
}

// outOfRange is the error for an integer parameter whose value (in
// decimal) is an integer but does not fit the int64 the server keeps it
// in: saying "want an integer" would mislead.
func outOfRange(field, key, value string) error {
	if strings.HasPrefix(value, "-") {
		return errorf(kindInvalid, "%s.parameters.%s %s is below the smallest supported value (%d)", field, key, value, int64(math.MinInt64))
	}
	what := "value"
	switch key {
	case paramShmOffset:
		what = "offset"
	case paramShmSize:
		what = "byte size"
	}
	return errorf(kindInvalid, "%s.parameters.%s %s exceeds the largest supported %s (%d)", field, key, value, what, int64(math.MaxInt64))
}

// parseData parses a JSON array of numbers, flat or nested as the shape,
// into dst, which has room for exactly the elements the shape needs, in
// dtype dt. Errors name the element.
func parseData(raw []byte, dt tensor.DType, dst []byte) error {
	want := len(dst) / dt.Size()
	n := 0
	depth := 0
	var f32 []float32
	if dt == tensor.Float32 {
		f32 = tensor.BytesF32(dst)
	}
	i := 0
	for i < len(raw) {
		c := raw[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',':
			i++
		case c == '[':
			depth++
			i++
		case c == ']':
			depth--
			if depth < 0 {
				return errorf(kindInvalid, "inputs[0].data: unbalanced ']' at byte %d", i)
			}
			i++
		case c == '-' || (c >= '0' && c <= '9'):
			j := i + 1
			for j < len(raw) && (raw[j] == '.' || raw[j] == 'e' || raw[j] == 'E' || raw[j] == '+' || raw[j] == '-' || (raw[j] >= '0' && raw[j] <= '9')) {
				j++
			}
			if n >= want {
				return errorf(kindInvalid, "inputs[0].data has more than %d values, the number inputs[0].shape needs", want)
			}
			// The string aliases raw only for the call: no allocation.
			s := unsafe.String(&raw[i], j-i)
			switch dt {
			case tensor.Float32, tensor.Float16:
				v, err := strconv.ParseFloat(s, 32)
				if err != nil && !errors.Is(err, strconv.ErrRange) {
					return errorf(kindInvalid, "inputs[0].data[%d] = %q is not a number", n, s)
				}
				if dt == tensor.Float32 {
					f32[n] = float32(v)
				} else {
					h := tensor.Float32ToF16(float32(v))
					dst[2*n], dst[2*n+1] = byte(h), byte(h>>8)
				}
			case tensor.Uint8:
				v, err := strconv.ParseUint(s, 10, 8)
				if err != nil {
					return errorf(kindInvalid, "inputs[0].data[%d] = %s is not a UINT8 (an integer 0..255)", n, s)
				}
				dst[n] = byte(v)
			default:
				return fmt.Errorf("parseData: unsupported dtype %s", dt)
			}
			n++
			i = j
		default:
			return errorf(kindInvalid, "inputs[0].data: unexpected %q at byte %d (want numbers in arrays)", c, i)
		}
	}
	if depth != 0 {
		return errorf(kindInvalid, "inputs[0].data: unbalanced '[' (JSON array not closed)")
	}
	if n != want {
		return errorf(kindInvalid, "inputs[0].data has %d values; inputs[0].shape needs %d", n, want)
	}
	return nil
}

// jsonResponse builds the JSON part of an inference response.
type jsonResponse struct {
	buf []byte
}

func (j *jsonResponse) str(s string) {
	j.buf = appendJSONString(j.buf, s)
}

// appendJSONString appends s as a JSON string literal. Invalid UTF-8
// becomes U+FFFD, as encoding/json does.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			dst = append(dst, '\\', byte(r))
		case r < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xf])
		default:
			dst = utf8.AppendRune(dst, r)
		}
	}
	return append(dst, '"')
}

// begin writes the response up to its outputs array.
func (j *jsonResponse) begin(model, version, id string, params responseParams) {
	j.buf = append(j.buf, `{"model_name":`...)
	j.str(model)
	j.buf = append(j.buf, `,"model_version":`...)
	j.str(version)
	if id != "" {
		j.buf = append(j.buf, `,"id":`...)
		j.str(id)
	}
	j.buf = append(j.buf, `,"parameters":{"queue_time_us":`...)
	j.buf = strconv.AppendInt(j.buf, params.queueMicros, 10)
	j.buf = append(j.buf, `,"compute_time_us":`...)
	j.buf = strconv.AppendInt(j.buf, params.computeMicros, 10)
	j.buf = append(j.buf, `,"batch_size":`...)
	j.buf = strconv.AppendInt(j.buf, int64(params.batchSize), 10)
	j.buf = append(j.buf, `},"outputs":[`...)
}

// output opens an output object; binary, floats or strings close it.
func (j *jsonResponse) output(name, datatype string, shape []int64) {
	j.buf = append(j.buf, `{"name":`...)
	j.str(name)
	j.buf = append(j.buf, `,"datatype":`...)
	j.str(datatype)
	j.buf = append(j.buf, `,"shape":[`...)
	for i, d := range shape {
		if i > 0 {
			j.buf = append(j.buf, ',')
		}
		j.buf = strconv.AppendInt(j.buf, d, 10)
	}
	j.buf = append(j.buf, ']')
}

// binary closes an output whose data is in the binary section.
func (j *jsonResponse) binary(size int) {
	j.buf = append(j.buf, `,"parameters":{"binary_data_size":`...)
	j.buf = strconv.AppendInt(j.buf, int64(size), 10)
	j.buf = append(j.buf, `}}`...)
}

// shm closes an output whose data went to a shared memory region.
func (j *jsonResponse) shm(region string, size int) {
	j.buf = append(j.buf, `,"parameters":{"shared_memory_region":`...)
	j.str(region)
	j.buf = append(j.buf, `,"shared_memory_byte_size":`...)
	j.buf = strconv.AppendInt(j.buf, int64(size), 10)
	j.buf = append(j.buf, `}}`...)
}

// strings closes an output with BYTES data given as JSON strings.
func (j *jsonResponse) strings(emit func(add func(s []byte))) {
	j.buf = append(j.buf, `,"data":[`...)
	first := true
	emit(func(s []byte) {
		if !first {
			j.buf = append(j.buf, ',')
		}
		first = false
		j.buf = appendJSONString(j.buf, unsafe.String(unsafe.SliceData(s), len(s)))
	})
	j.buf = append(j.buf, "]}"...)
}

// floats closes an output with FP32 data as JSON numbers.
func (j *jsonResponse) floats(v []float32) {
	j.buf = append(j.buf, `,"data":[`...)
	for i, x := range v {
		if i > 0 {
			j.buf = append(j.buf, ',')
		}
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			j.buf = append(j.buf, "null"...) // JSON has no NaN
			continue
		}
		j.buf = strconv.AppendFloat(j.buf, float64(x), 'g', -1, 32)
	}
	j.buf = append(j.buf, "]}"...)
}

// end closes the outputs array and the response.
func (j *jsonResponse) end() {
	j.buf = append(j.buf, "]}"...)
}

// responseParams are goinfer's response parameters: how the request ran, so
// that remote benchmarks see the server-side batching.
type responseParams struct {
	queueMicros, computeMicros int64
	batchSize                  int
}
