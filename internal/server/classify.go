package server

import (
	"fmt"

	"goinfer/internal/server/batcher"
	"goinfer/internal/topk"
)

// ProbabilitiesName is the softmax of a classifier's output (a model whose
// output is [N, classes]), an output of its own so that classification
// results ("value:index:label") carry probabilities when asked for on it,
// the model's values (logits) when asked for on its output.
const ProbabilitiesName = "probabilities"

// hasProbabilities reports whether the model's output is class scores, of
// which the probabilities output is the softmax.
func (st *modelState) hasProbabilities() bool {
	return len(st.output.shape) == 2 && st.output.name != ProbabilitiesName
}

// outputNames lists the outputs a request may ask for, for messages.
func (st *modelState) outputNames() string {
	if st.hasProbabilities() {
		return fmt.Sprintf("%q and %q", st.output.name, ProbabilitiesName)
	}
	return fmt.Sprintf("%q", st.output.name)
}

// postprocess turns the model's output for a request into the output it
// asked for, in place: the probabilities are the softmax of each row. A
// classification needs none: the lane ranked it (ranking), and out may
// hold no logits.
func (p plan) postprocess(out []float32, classes int) {
	if p.out.name == ProbabilitiesName && p.top == nil {
		topk.SoftmaxRows(out, classes)
	}
}

// ranking asks the lane, for a classification, to rank each image's
// classes into p.top: on the device where the backend has a
// Postprocessor, so that only the k classes per image come back, else on
// the host from the logits. The probabilities output ranks (and values)
// by the softmax, the model's own by its logits.
func (p *plan) ranking(in *batcher.Input) {
	if k := p.out.classification; k > 0 {
		p.top = make([]topk.Class, p.n*k)
		in.TopK, in.Softmax, in.Top = k, p.out.name == ProbabilitiesName, p.top
	}
}

// classify emits a classification's "value:index[:label]" entries, k per
// image, best first.
func (p plan) classify(labels []string, emit func(entry []byte)) {
	topk.ClassifyRanked(p.top, labels, emit)
}

// outputsMetadata lists the model's outputs: its own first (clients that
// take the first output get it), then the probabilities where it has them.
func (st *modelState) outputsMetadata() []TensorMetadata {
	o := st.output
	md := []TensorMetadata{{Name: o.name, Datatype: o.datatype, Shape: o.shape}}
	if st.hasProbabilities() {
		md = append(md, TensorMetadata{Name: ProbabilitiesName, Datatype: o.datatype, Shape: o.shape})
	}
	return md
}

// inputsMetadata lists the model's inputs: the tensor input first (clients
// that take the first input get it).
func (st *modelState) inputsMetadata() []TensorMetadata {
	in := st.input
	md := []TensorMetadata{{Name: in.name, Datatype: in.datatype, Shape: in.shape}}
	if st.images != nil {
		im := st.images.meta
		md = append(md, TensorMetadata{Name: im.name, Datatype: im.datatype, Shape: im.shape})
	}
	return md
}

// mapSlice applies f to each element of s.
func mapSlice[T, U any](s []T, f func(T) U) []U {
	out := make([]U, len(s))
	for i, v := range s {
		out[i] = f(v)
	}
	return out
}
