package server

import "goinfer/internal/topk"

// postprocess turns the logits of a request into the output it asked
// for, in place: the probabilities output is their softmax.
func (p plan) postprocess(logits []float32, classes int) {
	if p.out.name == ProbabilitiesName {
		topk.SoftmaxRows(logits, classes)
	}
}

// outputsMetadata lists the model's outputs: the logits first (clients
// that take the first output get them), then their softmax.
func (st *modelState) outputsMetadata() []TensorMetadata {
	o := st.output
	return []TensorMetadata{
		{Name: o.name, Datatype: o.datatype, Shape: o.shape},
		{Name: ProbabilitiesName, Datatype: o.datatype, Shape: o.shape},
	}
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
