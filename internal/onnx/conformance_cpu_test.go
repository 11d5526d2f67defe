package onnx

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"goinfer/internal/engine/cpu/irexec"
	"goinfer/internal/ir"
	"goinfer/internal/onnxpb"
	"goinfer/internal/tensor"
)

var conformanceCPUReport = flag.String("onnx_conformance_cpu_report", "", "write a markdown report of the cpu executor's conformance run to this file")

// TestONNXConformanceCPU runs the conformance suite's cases through the
// cpu engine's executor (irexec) instead of ir's reference evaluator:
// every case whose model loads and whose ops irexec compiles must match
// the expected outputs (float32 within 1e-4 relative). Cases irexec
// refuses at Compile (ops or dtypes it lacks) are skipped with the reason.
func TestONNXConformanceCPU(t *testing.T) {
	if *conformancePath == "" {
		t.Skip("no -onnx_conformance path given")
	}
	if _, err := os.Stat(*conformancePath); err != nil {
		t.Skipf("ONNX conformance suite not found at %s (%v): point -onnx_conformance at onnx-conformance.tgz or its extracted directory", *conformancePath, err)
	}
	files, err := readSuite(*conformancePath)
	if err != nil {
		t.Fatalf("reading %s: %v", *conformancePath, err)
	}
	cases := collectCases(files)
	var mu sync.Mutex
	var results []outcome
	t.Run("case", func(t *testing.T) {
		for _, c := range cases {
			if *conformanceRun != "" && !strings.Contains(c.name, *conformanceRun) {
				continue
			}
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				o := runCaseCPU(c)
				if o.status == "fail" {
					t.Error(o.reason)
				}
				mu.Lock()
				results = append(results, o)
				mu.Unlock()
			})
		}
	})
	sort.Slice(results, func(i, j int) bool { return results[i].name < results[j].name })
	pass, fail, skip := 0, 0, 0
	for _, r := range results {
		switch r.status {
		case "pass":
			pass++
		case "fail":
			fail++
		default:
			skip++
		}
	}
	t.Logf("ONNX conformance on the cpu executor: %d cases, %d passed, %d failed, %d skipped", len(results), pass, fail, skip)
	if *conformanceCPUReport != "" {
		if err := os.WriteFile(*conformanceCPUReport, []byte(conformanceMarkdown(results)), 0o644); err != nil {
			t.Errorf("writing the report: %v", err)
		}
	}
}

func runCaseCPU(c *confCase) outcome {
	o := outcome{name: c.name, suite: c.suite}
	ops, opset, err := modelFacts(c.model)
	if err != nil {
		o.status, o.reason = "fail", fmt.Sprintf("decoding model.onnx: %v", err)
		return o
	}
	o.ops = ops
	var missing []string
	for _, op := range ops {
		if _, ok := importers[op]; !ok {
			missing = append(missing, op)
		}
	}
	switch {
	case len(missing) > 0:
		o.status, o.reason = "skip", "unsupported op(s): "+strings.Join(missing, ", ")
		return o
	case opset > MaxOpset || opset < MinOpset:
		o.status, o.reason = "skip", fmt.Sprintf("opset %d outside [%d, %d]", opset, MinOpset, MaxOpset)
		return o
	case isLong(c) && !*conformanceLong:
		o.status, o.reason = "skip", "long: runs with -onnx_conformance_long"
		return o
	case len(c.sets) == 0:
		o.status, o.reason = "skip", "the suite ships no test data for this case"
		return o
	}
	for si, set := range c.sets {
		res := runDataSetCPU(c, si, set)
		if res.status == "fail" {
			// A case ir's reference evaluator fails as well is a question
			// for the importer or the reference, not for the executor.
			if ref := runDataSet(c, si, set); ref.status == "fail" {
				res.status, res.reason = "skip", "the reference evaluator fails it too: "+ref.reason
			}
		}
		if res.status != "pass" {
			o.status, o.reason = res.status, res.reason
			return o
		}
	}
	o.status = "pass"
	return o
}

// runDataSetCPU loads the model for one data set, compiles it with irexec
// and compares its outputs.
func runDataSetCPU(c *confCase, si int, set confData) outcome {
	skip := func(format string, args ...any) outcome {
		return outcome{status: "skip", reason: fmt.Sprintf(format, args...)}
	}
	fail := func(format string, args ...any) outcome {
		return outcome{status: "fail", reason: fmt.Sprintf("data set %d: %s", si, fmt.Sprintf(format, args...))}
	}
	var m onnxpb.ModelProto
	if err := proto.Unmarshal(c.model, &m); err != nil {
		return fail("%v", err)
	}
	inits := map[string]bool{}
	for _, tp := range m.GetGraph().GetInitializer() {
		inits[tp.GetName()] = true
	}
	var names []string
	for _, vi := range m.GetGraph().GetInput() {
		if !inits[vi.GetName()] {
			names = append(names, vi.GetName())
		}
	}
	inputs := map[string]*tensor.Tensor{}
	shapes := map[string][]int{}
	if c.suite == "light" && len(set.inputs) == 0 {
		for _, vi := range m.GetGraph().GetInput() {
			if inits[vi.GetName()] {
				continue
			}
			var dims []int
			for _, d := range vi.GetType().GetTensorType().GetShape().GetDim() {
				dims = append(dims, int(d.GetDimValue()))
			}
			inputs[vi.GetName()] = lightInput(dims)
			shapes[vi.GetName()] = dims
		}
	} else if len(set.inputs) != len(names) {
		return fail("%d input files for %d graph inputs %v", len(set.inputs), len(names), names)
	}
	for i, b := range set.inputs {
		if b == nil {
			continue
		}
		tt, _, err := DecodeTensor(b)
		if err != nil {
			if errors.Is(err, ErrUnsupportedDType) {
				return skip("input %d: %v", i, err)
			}
			return fail("input %d: %v", i, err)
		}
		inputs[names[i]] = tt
		shapes[names[i]] = tt.Shape
	}
	var want []*tensor.Tensor
	for i, b := range set.outputs {
		tt, _, err := DecodeTensor(b)
		if err != nil {
			if errors.Is(err, ErrUnsupportedDType) {
				return skip("output %d: %v", i, err)
			}
			return fail("output %d: %v", i, err)
		}
		want = append(want, tt)
	}
	g, consts, err := loadForCase(c.model, inputs, shapes)
	if err != nil {
		if errors.Is(err, ErrUnsupportedModel) || errors.Is(err, ErrUnsupportedDType) || errors.Is(err, ir.ErrUnsupported) {
			return skip("%v", err)
		}
		return fail("load: %v", err)
	}
	batch := 1
	if len(g.Inputs) > 0 {
		if tt := inputs[g.Inputs[0].Name]; tt != nil && len(tt.Shape) > 0 {
			batch = max(tt.Shape[0], 1)
		}
	}
	b, err := ir.Bind(g, batch)
	if err != nil {
		if errors.Is(err, ir.ErrUnsupported) {
			return skip("%v", err)
		}
		return fail("bind: %v", err)
	}
	p, err := irexec.Compile(context.Background(), b, irexec.Options{Threads: 2})
	if err != nil {
		if errors.Is(err, irexec.ErrUnsupported) {
			return skip("%v", err)
		}
		return fail("compile: %v", err)
	}
	var feed []*tensor.Tensor
	for _, v := range b.Inputs {
		tt := inputs[v.Name]
		if tt == nil || consts[v.Name] {
			return fail("graph input %q has no data", v.Name)
		}
		feed = append(feed, tt)
	}
	x := p.NewExec()
	defer x.Close()
	got, err := x.RunTensors(context.Background(), feed)
	if err != nil {
		return fail("run: %v", err)
	}
	if len(got) != len(want) {
		return fail("%d outputs, the case expects %d", len(got), len(want))
	}
	for i := range want {
		a, err := ir.ArrayFromTensor(got[i])
		if err != nil {
			return fail("output %d: %v", i, err)
		}
		if err := compareCase(c, a, want[i]); err != nil {
			return fail("output %d %q: %v", i, b.Outputs[i].Name, err)
		}
	}
	return outcome{status: "pass"}
}
