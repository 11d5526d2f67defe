package server

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"goinfer/internal/server/batcher"
	"goinfer/internal/tensor"
)

// inputSpec is an inference request's input tensor header, whatever the
// protocol.
type inputSpec struct {
	name     string
	datatype string
	shape    []int64
}

// outputSpec is one requested output.
type outputSpec struct {
	name string
	// classification > 0 asks for the top classes instead of logits.
	classification int
	// binary asks for the output in the binary section (HTTP only).
	binary bool
}

// plan is a validated request: where it goes and what it must carry.
type plan struct {
	lane  *batcher.Batcher
	dtype tensor.DType
	n     int // images
	bytes int // expected input data size
	out   outputSpec
}

// outBytes is the least room the output needs: the logits, or one byte
// per class string for a classification, whose exact size is known only
// once it is computed.
func (p plan) outBytes(classes int) int {
	if k := p.out.classification; k > 0 {
		return p.n * k * 5
	}
	return p.n * classes * 4
}

// maxDim bounds each shape dimension a request may declare, far above any
// real image, so that sizes computed from hostile shapes cannot overflow.
const maxDim = 1 << 24

// plan checks a request's input and outputs against the model and returns
// where it goes. Errors name the offending field.
func (st *modelState) plan(in inputSpec, outs []outputSpec) (plan, error) {
	var p plan
	if in.name != st.input.name {
		return p, errorf(kindInvalid, "inputs[0].name %q is not an input of the model (its input is %q)", in.name, st.input.name)
	}
	dt, ok := inputDType(in.datatype)
	if !ok {
		return p, errorf(kindInvalid, "inputs[0].datatype %q is not accepted (want %s)", in.datatype, acceptedInputs)
	}
	if len(in.shape) != 4 {
		return p, errorf(kindInvalid, "inputs[0].shape %v has rank %d; want 4: [batch, %d, height, width]", in.shape, len(in.shape), st.input.shape[1])
	}
	for i, d := range in.shape {
		if d < 0 || d > maxDim {
			return p, errorf(kindInvalid, "inputs[0].shape[%d] is %d; want 0 < size <= %d", i, d, maxDim)
		}
	}
	if in.shape[0] < 1 {
		return p, errorf(kindInvalid, "inputs[0].shape[0] (batch) is %d; want at least 1", in.shape[0])
	}
	if c := st.input.shape[1]; in.shape[1] != c {
		return p, errorf(kindInvalid, "inputs[0].shape %v has %d channels; the model takes %d", in.shape, in.shape[1], c)
	}
	lane := st.lanes[[2]int{int(in.shape[2]), int(in.shape[3])}]
	if lane == nil {
		return p, errorf(kindInvalid, "inputs[0].shape %v: images of %dx%d are not served (served: %s)", in.shape, in.shape[2], in.shape[3], st.sizes())
	}
	n := int(in.shape[0])
	elems := int(in.shape[1] * in.shape[2] * in.shape[3])
	if n > math.MaxInt32/max(elems*dt.Size(), 1) {
		return p, errorf(kindInvalid, "inputs[0].shape %v is too large", in.shape)
	}
	p = plan{lane: lane, dtype: dt, n: n, bytes: n * elems * dt.Size()}
	switch len(outs) {
	case 0:
		p.out = outputSpec{name: st.output.name}
	case 1:
		if outs[0].name != st.output.name {
			return p, errorf(kindInvalid, "outputs[0].name %q is not an output of the model (its output is %q)", outs[0].name, st.output.name)
		}
		if k := outs[0].classification; k < 0 {
			return p, errorf(kindInvalid, "outputs[0].parameters.classification is %d; want a positive count", k)
		}
		if outs[0].classification > 0 && len(st.output.shape) != 2 {
			return p, errorf(kindInvalid, "outputs[0].parameters.classification: the model's output %q of shape %v holds no class scores", st.output.name, st.output.shape)
		}
		p.out = outs[0]
		p.out.classification = min(p.out.classification, st.model.Info.OutputElems())
	default:
		return p, errorf(kindInvalid, "%d outputs requested; the model has one, %q", len(outs), st.output.name)
	}
	return p, nil
}

// sizes lists the served image sizes for error messages.
func (st *modelState) sizes() string {
	s := ""
	for _, l := range st.model.Lanes {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%dx%d", l.Height, l.Width)
	}
	return s
}

// topK writes the k best classes of each of n images as KServe
// classification strings "score:index[:label]" through emit.
func topK(logits []float32, n, classes, k int, labels []string, emit func(s []byte)) {
	idx := make([]int, k)
	var buf []byte
	for i := range n {
		row := logits[i*classes : (i+1)*classes]
		// Insertion into a sorted top list: k is small in practice, and
		// this is O(classes*k) at worst with no allocation per image.
		m := 0
		for c, v := range row {
			if m == k && !(v > row[idx[m-1]]) {
				continue
			}
			j := min(m, k-1)
			for j > 0 && v > row[idx[j-1]] {
				idx[j] = idx[j-1]
				j--
			}
			idx[j] = c
			if m < k {
				m++
			}
		}
		for _, c := range idx[:m] {
			buf = strconv.AppendFloat(buf[:0], float64(row[c]), 'f', 6, 32)
			buf = append(buf, ':')
			buf = strconv.AppendInt(buf, int64(c), 10)
			if c < len(labels) && labels[c] != "" {
				buf = append(buf, ':')
				buf = append(buf, labels[c]...)
			}
			emit(buf)
		}
	}
}

// appendBytesElem appends one BYTES tensor element in the binary layout of
// the protocol: a 4-byte little-endian length, then the bytes.
func appendBytesElem(dst, s []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}
