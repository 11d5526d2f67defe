package server

import (
	"encoding/binary"
	"fmt"
	"math"

	"goinfer/internal/server/batcher"
	"goinfer/internal/tensor"
	"goinfer/internal/topk"
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
	// top holds a classification's ranked classes, n*classification of
	// them, once the lane has answered (ranking).
	top []topk.Class
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
	var err error
	p.out, err = st.planOutput(outs)
	return p, err
}

// planOutput checks the outputs a request asks for: none (the model's
// output), or one of the model's outputs, the probabilities included when
// the model has them.
func (st *modelState) planOutput(outs []outputSpec) (outputSpec, error) {
	switch len(outs) {
	case 0:
		return outputSpec{name: st.output.name}, nil
	case 1:
		if outs[0].name != st.output.name && (outs[0].name != ProbabilitiesName || !st.hasProbabilities()) {
			return outputSpec{}, errorf(kindInvalid, "outputs[0].name %q is not an output of the model (its outputs are %s)", outs[0].name, st.outputNames())
		}
		if k := outs[0].classification; k < 0 {
			return outputSpec{}, errorf(kindInvalid, "outputs[0].parameters.classification is %d; want a positive count", k)
		}
		if outs[0].classification > 0 && len(st.output.shape) != 2 {
			return outputSpec{}, errorf(kindInvalid, "outputs[0].parameters.classification: the model's output %q of shape %v holds no class scores", st.output.name, st.output.shape)
		}
		o := outs[0]
		o.classification = min(o.classification, st.model.Info.OutputElems())
		return o, nil
	}
	return outputSpec{}, errorf(kindInvalid, "%d outputs requested; ask for one of %s", len(outs), st.outputNames())
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

// appendBytesElem appends one BYTES tensor element in the binary layout of
// the protocol: a 4-byte little-endian length, then the bytes.
func appendBytesElem(dst, s []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}
