package engine

import (
	"fmt"
	"slices"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// GraphSpecs describes a general graph as an engine's Forward sees it: one
// float32 input and float32 outputs, each batched along its first
// dimension, only the batch varying. A graph exported with a fixed batch of
// 1 (no dynamic axes) runs one sample at a time: its leading 1 is the batch,
// so GraphSpecs sets opts.MaxBatch to at most 1 and clears opts.BatchSizes.
// Errors name the graph and the tensor; engines add their own prefix.
func GraphSpecs(g *ir.Graph, opts *Options) (inputs, outputs []TensorSpec, err error) {
	ins, outs, err := ir.Signature(g)
	if err != nil {
		return nil, nil, fmt.Errorf("graph %q: %w", g.Name, err)
	}
	if len(ins) != 1 || len(outs) < 1 {
		return nil, nil, fmt.Errorf("graph %q has %d inputs and %d outputs; the engine's Forward takes one input and writes the first output", g.Name, len(ins), len(outs))
	}
	fixed1 := true
	for _, nt := range append(slices.Clone(ins), outs...) {
		sh := nt.Type.Shape
		fixed1 = fixed1 && len(sh) > 0 && sh[0] == 1 && !slices.Contains(sh, ir.Dynamic)
	}
	if fixed1 {
		opts.MaxBatch = min(opts.MaxBatch, 1)
		opts.BatchSizes = nil
	}
	specs := func(nts []ir.NamedType) ([]TensorSpec, error) {
		var out []TensorSpec
		for _, nt := range nts {
			sh := nt.Type.Shape
			if len(sh) < 1 || (sh[0] != ir.Dynamic && !fixed1) {
				return nil, fmt.Errorf("graph %q: %s %s is not batched along its first dimension", g.Name, nt.Name, nt.Type)
			}
			if slices.Contains(sh[1:], ir.Dynamic) {
				return nil, fmt.Errorf("graph %q: %s %s: only the batch may vary", g.Name, nt.Name, nt.Type)
			}
			out = append(out, TensorSpec{Name: nt.Name, DType: nt.Type.DType, Shape: slices.Clone([]int(sh[1:]))})
		}
		return out, nil
	}
	if inputs, err = specs(ins); err != nil {
		return nil, nil, err
	}
	if outputs, err = specs(outs); err != nil {
		return nil, nil, err
	}
	if inputs[0].DType != tensor.Float32 || outputs[0].DType != tensor.Float32 {
		return nil, nil, fmt.Errorf("graph %q: input %s and output %s must be float32", g.Name, inputs[0], outputs[0])
	}
	return inputs, outputs, nil
}
