package onnx

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"goinfer/internal/ir"
	"goinfer/internal/onnxpb"
	"goinfer/internal/tensor"
)

// ONNX's conformance suite (ONNX's node test cases, PyTorch-converted op
// tests and the "light" model-zoo classifiers, see
// ../shared/onnx-conformance.md), run through Decode and ir's reference
// evaluator.
var (
	conformancePath = flag.String("onnx_conformance", "../../../shared/onnx-conformance.tgz",
		"ONNX conformance suite: the .tgz, or a directory it was extracted to")
	conformanceReport = flag.String("onnx_conformance_report", "", "write a markdown report of the conformance run to this file")
	conformanceLong   = flag.Bool("onnx_conformance_long", false, "also run the conformance cases that take long (the light model-zoo models)")
	conformanceRun    = flag.String("onnx_conformance_run", "", "run only the conformance cases whose name contains this")
)

// confCase is one conformance case: a model and its data sets.
type confCase struct {
	name  string // suite/case, e.g. node/test_abs
	suite string
	model []byte
	sets  []confData
}

type confData struct {
	inputs, outputs [][]byte
}

// readSuite reads every file of the suite, from a .tgz or a directory,
// keyed by its slash path below the suite's top directory.
func readSuite(p string) (map[string][]byte, error) {
	files := map[string][]byte{}
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		err := filepath.WalkDir(p, func(f string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, err := filepath.Rel(p, f)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(f)
			files[filepath.ToSlash(rel)] = b
			return err
		})
		return stripTop(files), err
	}
	fh, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	zr, err := gzip.NewReader(fh)
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		files[path.Clean(h.Name)] = b
	}
	return stripTop(files), nil
}

// stripTop removes the archive's top directory (onnx-conformance/) when
// the suites sit below one.
func stripTop(files map[string][]byte) map[string][]byte {
	top := ""
	for k := range files {
		first, _, ok := strings.Cut(k, "/")
		if !ok {
			return files
		}
		if top == "" {
			top = first
		} else if top != first {
			return files
		}
	}
	if top == "node" || top == "light" || strings.HasPrefix(top, "pytorch") || top == "simple" {
		return files
	}
	out := make(map[string][]byte, len(files))
	for k, v := range files {
		out[strings.TrimPrefix(k, top+"/")] = v
	}
	return out
}

// collectCases groups the files into cases: suite/case/model.onnx with
// test_data_set_N/{input,output}_K.pb, and light/light_X.onnx with
// light_X_output_K.pb.
func collectCases(files map[string][]byte) []*confCase {
	byName := map[string]*confCase{}
	for p, b := range files {
		parts := strings.Split(p, "/")
		switch {
		case len(parts) == 3 && parts[2] == "model.onnx":
			c := caseOf(byName, parts[0]+"/"+parts[1], parts[0])
			c.model = b
		case len(parts) == 2 && parts[0] == "light" && strings.HasSuffix(parts[1], ".onnx"):
			c := caseOf(byName, "light/"+strings.TrimSuffix(parts[1], ".onnx"), "light")
			c.model = b
		}
	}
	for p, b := range files {
		parts := strings.Split(p, "/")
		var c *confCase
		var set int
		var file string
		switch {
		case len(parts) == 4 && strings.HasPrefix(parts[2], "test_data_set_"):
			c = byName[parts[0]+"/"+parts[1]]
			if _, err := fmt.Sscanf(parts[2], "test_data_set_%d", &set); err != nil {
				continue
			}
			file = parts[3]
		case len(parts) == 2 && parts[0] == "light" && strings.Contains(parts[1], "_output_"):
			base, rest, _ := strings.Cut(parts[1], "_output_")
			c = byName["light/"+base]
			file = "output_" + rest
		}
		if c == nil {
			continue
		}
		for len(c.sets) <= set {
			c.sets = append(c.sets, confData{})
		}
		kind, num, ok := strings.Cut(strings.TrimSuffix(file, ".pb"), "_")
		idx, err := strconv.Atoi(num)
		if !ok || err != nil || idx < 0 || idx > 1000 {
			continue
		}
		d := &c.sets[set]
		var list *[][]byte
		switch kind {
		case "input":
			list = &d.inputs
		case "output":
			list = &d.outputs
		default:
			continue
		}
		for len(*list) <= idx {
			*list = append(*list, nil)
		}
		(*list)[idx] = b
	}
	out := make([]*confCase, 0, len(byName))
	for _, c := range byName {
		if c.model != nil {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func caseOf(m map[string]*confCase, name, suite string) *confCase {
	c, ok := m[name]
	if !ok {
		c = &confCase{name: name, suite: suite}
		m[name] = c
	}
	return c
}

// knownFailing are cases a claimed op fails for a reason that is a genuine
// gap in goinfer's semantics, with that reason. A listed case that passes
// fails the test, so that the list stays true.
var knownFailing = map[string]string{}

// caseTolerance loosens the comparison of cases whose expected outputs
// ONNX's generators write as rounded literals rather than compute, with the
// reason.
var caseTolerance = map[string]struct {
	rtol, atol float64
	why        string
}{
	"node/test_averagepool_2d_ceil_last_window_starts_on_pad": {1e-3, 1e-4, "expected output is written with 4 decimals"},
}

// longCases run only with -onnx_conformance_long: whole classifiers whose
// float64 reference evaluation takes seconds each under -race.
func isLong(c *confCase) bool { return c.suite == "light" }

// outcome of one case.
type outcome struct {
	name   string
	suite  string
	ops    []string
	status string // pass, fail, skip
	reason string
}

func TestONNXConformance(t *testing.T) {
	if *conformancePath == "" {
		t.Skip("no -onnx_conformance path given")
	}
	if _, err := os.Stat(*conformancePath); err != nil {
		t.Skipf("ONNX conformance suite not found at %s (%v): point -onnx_conformance at onnx-conformance.tgz or its extracted directory", *conformancePath, err)
	}
	start := time.Now()
	files, err := readSuite(*conformancePath)
	if err != nil {
		t.Fatalf("reading %s: %v", *conformancePath, err)
	}
	cases := collectCases(files)
	if len(cases) == 0 {
		t.Fatalf("%s holds no conformance cases", *conformancePath)
	}
	var mu sync.Mutex
	var results []outcome
	t.Run("case", func(t *testing.T) {
		for _, c := range cases {
			if *conformanceRun != "" && !strings.Contains(c.name, *conformanceRun) {
				continue
			}
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				o := runCase(t, c)
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
	t.Logf("ONNX conformance: %d cases, %d passed, %d failed, %d skipped (%v)", len(results), pass, fail, skip, time.Since(start).Round(time.Millisecond))
	if *conformanceReport != "" {
		if err := os.WriteFile(*conformanceReport, []byte(conformanceMarkdown(results)), 0o644); err != nil {
			t.Errorf("writing the report: %v", err)
		}
	}
}

// modelFacts reads what the skip decisions need from the model: its op
// types (domain-qualified outside ONNX's default domain) and its default
// opset.
func modelFacts(b []byte) (ops []string, opset int, err error) {
	var m onnxpb.ModelProto
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, 0, err
	}
	for _, o := range m.GetOpsetImport() {
		if normDomain(o.GetDomain()) == "" {
			opset = int(o.GetVersion())
		}
	}
	seen := map[string]bool{}
	for _, n := range m.GetGraph().GetNode() {
		op := n.GetOpType()
		if d := normDomain(n.GetDomain()); d != "" {
			op = d + "." + op
		}
		if !seen[op] {
			seen[op] = true
			ops = append(ops, op)
		}
	}
	sort.Strings(ops)
	return ops, opset, nil
}

func runCase(t *testing.T, c *confCase) outcome {
	o := outcome{name: c.name, suite: c.suite}
	skip := func(format string, args ...any) outcome {
		o.status, o.reason = "skip", fmt.Sprintf(format, args...)
		return o
	}
	failf := func(format string, args ...any) outcome {
		o.status, o.reason = "fail", fmt.Sprintf(format, args...)
		if why, ok := knownFailing[c.name]; ok {
			o.status, o.reason = "skip", "known failure: "+why
		}
		return o
	}
	ops, opset, err := modelFacts(c.model)
	if err != nil {
		return failf("decoding model.onnx: %v", err)
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
		return skip("unsupported op(s): %s", strings.Join(missing, ", "))
	case opset > MaxOpset:
		return skip("opset %d is newer than MaxOpset %d", opset, MaxOpset)
	case opset < MinOpset:
		return skip("opset %d is older than MinOpset %d", opset, MinOpset)
	case isLong(c) && !*conformanceLong:
		return skip("long: runs with -onnx_conformance_long")
	case len(c.sets) == 0:
		return skip("the suite ships no test data for this case")
	}
	for si, set := range c.sets {
		res := runDataSet(c, si, set)
		if res.status != "pass" {
			if res.status == "fail" {
				return failf("%s", res.reason)
			}
			return skip("%s", res.reason)
		}
	}
	o.status = "pass"
	if why, ok := knownFailing[c.name]; ok {
		return outcome{name: c.name, suite: c.suite, ops: ops, status: "fail", reason: "listed as known-failing (" + why + ") but passes: remove it from knownFailing"}
	}
	return o
}

// runDataSet loads the model for one data set's inputs and compares its
// outputs.
func runDataSet(c *confCase, si int, set confData) outcome {
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
	// The data set's inputs go to the graph inputs that are not
	// initializers, in order.
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
		// The suite ships no inputs for the light models: their weights
		// are ConstantOfShape fills, which makes the expected outputs the
		// same for any input of the declared shape (all nine pass with
		// inputs in [-0.5, 0.5) and in [-2, 2.4) alike).
		for _, vi := range m.GetGraph().GetInput() {
			if inits[vi.GetName()] {
				continue
			}
			var dims []int
			for _, d := range vi.GetType().GetTensorType().GetShape().GetDim() {
				dims = append(dims, int(d.GetDimValue()))
			}
			set.inputs = append(set.inputs, nil)
			inputs[vi.GetName()] = lightInput(dims)
			shapes[vi.GetName()] = dims
		}
	}
	if len(set.inputs) != len(names) && c.suite != "light" {
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
	feed := map[string]*ir.Array{}
	for name, tt := range inputs {
		if consts[name] {
			continue
		}
		a, err := ir.ArrayFromTensor(tt)
		if err != nil {
			return fail("input %q: %v", name, err)
		}
		feed[name] = a
	}
	got, err := ir.EvaluateBound(context.Background(), g, feed)
	if err != nil {
		if errors.Is(err, ir.ErrUnsupported) {
			return skip("%v", err)
		}
		return fail("evaluate: %v", err)
	}
	if len(got) != len(want) {
		return fail("%d outputs, the case expects %d", len(got), len(want))
	}
	for i := range want {
		if err := compareCase(c, got[i], want[i]); err != nil {
			return fail("output %d %q: %v", i, g.Outputs[i].Name, err)
		}
	}
	return outcome{status: "pass"}
}

// lightInput is a deterministic input for the light models.
func lightInput(dims []int) *tensor.Tensor {
	n := tensor.Shape(dims).NumElements()
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i%17)/17 - 0.5
	}
	t, _ := tensor.FromFloat32(dims, v)
	return t
}

// loadForCase decodes the model with the inputs' shapes. Where a shape
// depends on an input's data (a Reshape whose target shape is an input),
// the test makes the integer inputs constants and, failing that, all of
// them: ONNX's cases hold such inputs as data, but the IR infers shapes at
// load time.
func loadForCase(model []byte, inputs map[string]*tensor.Tensor, shapes map[string][]int) (*ir.Graph, map[string]bool, error) {
	g, err := Decode(model, WithInputShapes(shapes))
	if err == nil || !errors.Is(err, ir.ErrNotConstant) {
		return g, nil, err
	}
	for _, all := range []bool{false, true} {
		consts := map[string]bool{}
		values := map[string]*tensor.Tensor{}
		rest := map[string][]int{}
		for name, tt := range inputs {
			if all || tt.DType == tensor.Int64 || tt.DType == tensor.Int32 {
				consts[name] = true
				values[name] = tt
			} else {
				rest[name] = shapes[name]
			}
		}
		g, err = Decode(model, WithInputShapes(rest), WithConstantInputs(values))
		if err == nil || !errors.Is(err, ir.ErrNotConstant) {
			return g, consts, err
		}
	}
	return nil, nil, err
}

// tolerance of a dtype: |got-want| <= atol*scale + rtol*|want|, where
// scale is the largest |want| of the output (at least 1), so that values
// near zero in an output of large ones are not held to a relative bound
// float32 arithmetic cannot meet.
func tolerance(dt tensor.DType) (rtol, atol float64) {
	switch dt {
	case tensor.Float16:
		return 2e-3, 1e-3
	case tensor.BFloat16:
		return 1.6e-2, 1e-2
	case tensor.Float32:
		return 1e-4, 1e-5
	case tensor.Float64:
		return 1e-7, 1e-9
	}
	return 0, 0
}

// compareOutput checks got against want with the tolerance of want's
// dtype.
func compareOutput(got *ir.Array, want *tensor.Tensor) error {
	return compareOutputTol(got, want, 0, 0)
}

// compareCase is compareOutput with the case's entry in caseTolerance, if
// any.
func compareCase(c *confCase, got *ir.Array, want *tensor.Tensor) error {
	tol := caseTolerance[c.name]
	return compareOutputTol(got, want, tol.rtol, tol.atol)
}

// compareOutputTol is compareOutput with rtol and atol where they are
// larger than the dtype's.
func compareOutputTol(got *ir.Array, want *tensor.Tensor, rtol, atol float64) error {
	w, err := ir.ArrayFromTensor(want)
	if err != nil {
		return err
	}
	if got.DType != w.DType {
		return fmt.Errorf("dtype %s, want %s", got.DType, w.DType)
	}
	if !got.Shape.Equal(w.Shape) {
		return fmt.Errorf("shape %v, want %v", got.Shape, w.Shape)
	}
	g := got.Clone()
	g.RoundTo()
	dr, da := tolerance(w.DType)
	rtol, atol = max(rtol, dr), max(atol, da)
	scale := 1.0
	for _, v := range w.Data {
		if a := math.Abs(v); !math.IsInf(a, 0) && !math.IsNaN(a) {
			scale = max(scale, a)
		}
	}
	bad, worst, worstAt := 0, 0.0, -1
	for i, wv := range w.Data {
		gv := g.Data[i]
		switch {
		case math.IsNaN(wv) || math.IsNaN(gv):
			if math.IsNaN(wv) != math.IsNaN(gv) {
				bad++
				if worstAt < 0 {
					worstAt = i
				}
			}
			continue
		case math.IsInf(wv, 0) || math.IsInf(gv, 0):
			if wv != gv {
				bad++
				if worstAt < 0 {
					worstAt = i
				}
			}
			continue
		}
		d := math.Abs(gv - wv)
		if d > atol*scale+rtol*math.Abs(wv) {
			bad++
			if d > worst || worstAt < 0 {
				worst, worstAt = d, i
			}
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d values differ (rtol %g, atol %g x %g); worst at %d: got %v, want %v",
			bad, len(w.Data), rtol, atol, scale, worstAt, g.Data[worstAt], w.Data[worstAt])
	}
	return nil
}

// conformanceMarkdown reports a run: overall counts, counts per op type
// (a case counts for every op type its model uses) and the skipped and
// failed cases with their reasons.
func conformanceMarkdown(results []outcome) string {
	var b bytes.Buffer
	type counts struct{ pass, fail, skip int }
	total := counts{}
	perSuite := map[string]*counts{}
	perOp := map[string]*counts{}
	add := func(c *counts, status string) {
		switch status {
		case "pass":
			c.pass++
		case "fail":
			c.fail++
		default:
			c.skip++
		}
	}
	for _, r := range results {
		add(&total, r.status)
		if perSuite[r.suite] == nil {
			perSuite[r.suite] = &counts{}
		}
		add(perSuite[r.suite], r.status)
		for _, op := range r.ops {
			if perOp[op] == nil {
				perOp[op] = &counts{}
			}
			add(perOp[op], r.status)
		}
	}
	fmt.Fprintf(&b, "# ONNX conformance\n\n")
	fmt.Fprintf(&b, "ONNX's conformance cases (`onnx-conformance.tgz`: node tests, PyTorch-converted op tests, light model-zoo models) run through goinfer's ONNX importer (`internal/onnx`) and the IR's float64 reference evaluator (`ir.EvaluateBound`), outputs compared with ONNX's expected ones (float32: rtol 1e-4, atol 1e-5 scaled by the output's largest magnitude; float16 2e-3/1e-3; bfloat16 1.6e-2/1e-2; integers and booleans exact; cases whose expected outputs are rounded literals get a looser tolerance, listed in `caseTolerance`). Written by `go test ./internal/onnx -run TestONNXConformance -onnx_conformance_report FILE`.\n\n")
	fmt.Fprintf(&b, "**Overall: %d cases, %d passed, %d failed, %d skipped.**\n\n", len(results), total.pass, total.fail, total.skip)
	fmt.Fprintf(&b, "| suite | passed | failed | skipped |\n|---|---:|---:|---:|\n")
	suites := make([]string, 0, len(perSuite))
	for s := range perSuite {
		suites = append(suites, s)
	}
	sort.Strings(suites)
	for _, s := range suites {
		c := perSuite[s]
		fmt.Fprintf(&b, "| %s | %d | %d | %d |\n", s, c.pass, c.fail, c.skip)
	}
	fmt.Fprintf(&b, "\n## Per op type\n\nA case counts once for each op type its model uses. Ops marked * are claimed by goinfer (`onnx.SupportedOps`).\n\n| op | passed | failed | skipped |\n|---|---:|---:|---:|\n")
	ops := make([]string, 0, len(perOp))
	for op := range perOp {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		c := perOp[op]
		mark := ""
		if _, ok := importers[op]; ok {
			mark = "*"
		}
		fmt.Fprintf(&b, "| %s%s | %d | %d | %d |\n", op, mark, c.pass, c.fail, c.skip)
	}
	for _, st := range []string{"fail", "skip"} {
		title := map[string]string{"fail": "Failed cases", "skip": "Skipped cases"}[st]
		var rows []outcome
		for _, r := range results {
			if r.status == st {
				rows = append(rows, r)
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n## %s (%d)\n\n", title, len(rows))
		if st == "skip" {
			// A summary by reason kind first.
			kinds := map[string]int{}
			for _, r := range rows {
				kinds[skipKind(r.reason)]++
			}
			keys := make([]string, 0, len(kinds))
			for k := range kinds {
				keys = append(keys, k)
			}
			sort.Slice(keys, func(i, j int) bool {
				return kinds[keys[i]] > kinds[keys[j]] || kinds[keys[i]] == kinds[keys[j]] && keys[i] < keys[j]
			})
			fmt.Fprintf(&b, "| reason | cases |\n|---|---:|\n")
			for _, k := range keys {
				fmt.Fprintf(&b, "| %s | %d |\n", k, kinds[k])
			}
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "| case | reason |\n|---|---|\n")
		for _, r := range rows {
			reason, _, _ := strings.Cut(r.reason, "; goinfer handles")
			fmt.Fprintf(&b, "| %s | %s |\n", r.name, strings.ReplaceAll(strings.ReplaceAll(reason, "|", "\\|"), "\n", " "))
		}
	}
	return b.String()
}

// skipKind is the class of a skip reason, for the summary.
func skipKind(reason string) string {
	switch {
	case strings.HasPrefix(reason, "unsupported op"):
		return "uses an op goinfer does not claim"
	case strings.Contains(reason, "newer than MaxOpset"):
		return "opset newer than MaxOpset"
	case strings.Contains(reason, "older than MinOpset"):
		return "opset older than MinOpset"
	case strings.HasPrefix(reason, "long:"):
		return "long (runs with -onnx_conformance_long)"
	case strings.HasPrefix(reason, "known failure"):
		return "known failure"
	case strings.Contains(reason, ErrUnsupportedDType.Error()):
		return "data type goinfer lacks"
	case strings.Contains(reason, "sequence") || strings.Contains(reason, "optional") || strings.Contains(reason, "map"):
		return "non-tensor values (sequence, optional, map)"
	case strings.Contains(reason, ir.ErrUnsupported.Error()):
		return "semantics the IR lacks (e.g. random training-mode Dropout)"
	}
	return "other"
}
