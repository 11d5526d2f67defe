package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"goinfer/internal/ir"
	"goinfer/internal/onnx"
	"goinfer/internal/tensor"
)

// isONNX reports whether path names an ONNX model (ONNX files carry no
// magic number, so the extension decides).
func isONNX(path string) bool {
	return strings.EqualFold(path[max(0, len(path)-5):], ".onnx")
}

// inspectONNX prints an ONNX model's inputs and outputs, opsets, producer,
// op counts, parameters and MACs (at batch 1).
func inspectONNX(path string, stdout io.Writer) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	g, err := onnx.Load(path)
	var se *onnx.SymbolicShapeError
	symbolic := errors.As(err, &se)
	if symbolic {
		// Dynamic height and width: described at the default image size.
		g, err = loadONNX(path, 0)
	}
	if err != nil {
		return err
	}
	ins, outs, err := ir.Signature(g)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	b1, err := ir.Bind(g, 1)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	macs, err := ir.MACs(b1)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}

	w := func(k, f string, v ...any) { fmt.Fprintf(stdout, "%-12s "+f+"\n", append([]any{k + ":"}, v...)...) }
	w("file", "%s", path)
	w("format", "onnx (IR version %s), %s", g.Meta["ir_version"], sizeString(st.Size()))
	producer := strings.TrimSpace(g.Meta["producer"] + " " + g.Meta["producer_version"])
	if producer == "" {
		producer = "not recorded"
	}
	w("producer", "%s", producer)
	w("opsets", "%s", g.Meta["opsets"])
	if g.Name != "" {
		w("graph", "%s", g.Name)
	}
	if symbolic {
		var names []string
		for i, d := range se.Shape {
			if d == ir.Dynamic {
				names = append(names, fmt.Sprintf("%d (%s)", i, se.Params[i]))
			}
		}
		w("note", "input %q has symbolic dimensions %s; shown at the default image size", se.Input, strings.Join(names, ", "))
	}
	for i, in := range ins {
		k := ""
		if i == 0 {
			k = "inputs"
		}
		w(k, "%s %s", in.Name, in.Type)
	}
	for i, out := range outs {
		k := ""
		if i == 0 {
			k = "outputs"
		}
		w(k, "%s %s", out.Name, out.Type)
	}
	params, dts := onnxParams(g)
	w("parameters", "%s (%s)", commas(params), dts)
	counts := g.OpCounts()
	kinds := make([]string, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool {
		if counts[kinds[i]] != counts[kinds[j]] {
			return counts[kinds[i]] > counts[kinds[j]]
		}
		return kinds[i] < kinds[j]
	})
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %d", k, counts[k])
	}
	w("nodes", "%d: %s", len(g.Nodes), strings.Join(parts, ", "))
	w("compute", "%s MACs at batch 1 (%.3f GMAC; Conv, ConvTranspose, Gemm, MatMul)", commas(macs), float64(macs)/1e9)
	return nil
}

// onnxParams counts the elements of the graph's float initializers and
// describes their dtypes ("12 float32, 2 float16 tensors").
func onnxParams(g *ir.Graph) (int64, string) {
	byDType := map[tensor.DType]int{}
	seen := map[*ir.Value]bool{}
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			if v == nil || seen[v] || v.Const == nil || v.Producer != nil {
				continue
			}
			seen[v] = true
			switch v.Const.DType {
			case tensor.Float32, tensor.Float16, tensor.BFloat16, tensor.Float64:
				byDType[v.Const.DType]++
			}
		}
	}
	var parts []string
	for dt, n := range byDType {
		parts = append(parts, fmt.Sprintf("%d %s", n, dt))
	}
	sort.Strings(parts)
	desc := "no float initializers"
	if len(parts) > 0 {
		desc = "in " + strings.Join(parts, ", ") + " tensors"
	}
	return g.ParamCount(), desc
}
