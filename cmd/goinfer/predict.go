package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"goinfer/internal/engine"
	classlabels "goinfer/internal/labels"
	"goinfer/internal/preprocess"
	"goinfer/internal/tensor"
)

func init() {
	register(command{
		name:    "predict",
		summary: "classify images or .npy tensors with a checkpoint and write the logits",
		run:     runPredict,
	})
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func runPredict(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("predict", "predict [--checkpoint FILE | --model_dir DIR] --input X [--input Y ...] [--output LOGITS.npy] [flags]", stderr)
	var mf modelFlags
	mf.register(fs, false)
	var inputs stringList
	fs.Var(&inputs, "input", "input `FILE`, repeatable: a float32 NCHW .npy tensor, or a PNG/JPEG image (resized, center-cropped and normalized as the model's preprocessing says: torchvision's weights carry theirs, ImageNet's 256/224 otherwise); positional arguments are inputs too")
	output := fs.String("output", "", "write the float32 logits [N, classes] to this .npy `FILE`")
	topk := fs.Int("topk", 5, "classes to print per image (0: none)")
	labels := fs.String("labels", "", "class names `FILE`: one per line, a JSON list, or ImageNet's class-index JSON {\"0\": [\"n01440364\", \"tench\"], ...}")
	batch := fs.Int("batch_size", 16, "images per forward pass")
	// Inputs may come before, between or after flags: parse up to each
	// positional argument, take it as an input, and go on.
	for rest := args; ; {
		if err := parseFlags(fs, rest, true); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		inputs = append(inputs, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(inputs) == 0 {
		fmt.Fprintln(stderr, "goinfer predict: give at least one --input")
		fs.Usage()
		return errUsage
	}
	if *batch < 1 {
		return fmt.Errorf("--batch_size %d: want at least 1", *batch)
	}
	if *topk < 0 {
		return fmt.Errorf("--topk %d: want 0 or more", *topk)
	}
	if *output != "" && !strings.EqualFold(filepath.Ext(*output), ".npy") {
		return fmt.Errorf("--output %q: the logits are written as .npy; name the file *.npy", *output)
	}

	// Inputs and labels are checked before the model is read, so that a
	// typo fails fast; images are decoded once the model says how.
	for _, p := range inputs {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("input: %w", err)
		}
	}
	var classNames []string
	if *labels != "" {
		var err error
		if classNames, err = readLabels(*labels); err != nil {
			return err
		}
	}

	src, err := mf.resolve(ctx, stderr)
	if err != nil {
		return err
	}
	e, prec, err := mf.selectEngine(stderr, src)
	if err != nil {
		return err
	}
	// Tensors fix the image size a model of any size is bound to; images
	// are decoded to the size and with the preprocessing the model says.
	var (
		g     netGraph
		x     *tensor.Tensor
		names []string
	)
	if allNPY(inputs) {
		if x, names, err = readInputs(ctx, inputs, preprocess.Spec{}); err != nil {
			return err
		}
		if g, err = readNetGraph(ctx, src, x.Shape[2]); err != nil {
			return err
		}
	} else {
		if g, err = readNetGraph(ctx, src, 0); err != nil {
			return err
		}
		if x, names, err = readInputs(ctx, inputs, g.preprocessing()); err != nil {
			return err
		}
	}
	n, c, h, w := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	opts := engine.Options{
		Compile:     mf.compile,
		Precision:   prec,
		MaxBatch:    min(*batch, n),
		Height:      h,
		Width:       w,
		InputDType:  tensor.Float32,
		Device:      mf.device,
		Threads:     mf.threads,
		SplitBatch:  mf.splitBatch,
		TuningCache: mf.tuneCache,
		// Opt-in planner changes, for parity runs of them.
		GraphExperiments: mf.experiments,
	}
	m, times, err := loadNetGraph(ctx, e, g, opts)
	if err != nil {
		return err
	}
	defer m.Close()
	info := m.Info()
	fmt.Fprintf(stderr, "loaded %s (%s) on %s in %.3fs", info.Arch, src, info.Device, times.Load.Seconds())
	if info.Compiled {
		fmt.Fprintf(stderr, " + %.3fs compile", times.Compile.Seconds())
	}
	fmt.Fprintln(stderr)
	mc, _, _, ok := info.ImageInput()
	if !ok {
		return fmt.Errorf("the inputs are images, float32 [N, %d, H, W]; the model takes %s", c, info.Input())
	}
	if mc != c {
		return fmt.Errorf("the inputs have %d channels, the model takes %d (its input: %s)", c, mc, info.Input())
	}
	classes := info.OutputElems()
	if classNames != nil && len(classNames) != classes {
		return fmt.Errorf("--labels %s has %d labels, the model has %d classes", *labels, len(classNames), classes)
	}
	if classNames == nil && classes == classlabels.ImageNetClasses {
		classNames = classlabels.ImageNet() // a 1,000-class model is taken for an ImageNet classifier
	}

	start := time.Now()
	logits, err := forwardAll(ctx, m, x.Float32s(), n, c*h*w, min(opts.MaxBatch, info.MaxBatch))
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%d images (%dx%d) in %.3fs\n", n, h, w, time.Since(start).Seconds())

	if *output != "" {
		t, err := tensor.FromFloat32(tensor.Shape{n, classes}, logits)
		if err != nil {
			return err
		}
		if err := tensor.SaveNPY(*output, t); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote logits [%d, %d] to %s\n", n, classes, *output)
	}
	if *topk > 0 {
		printTopK(stdout, names, logits, classes, min(*topk, classes), classNames)
	}
	return nil
}

// forwardAll runs x (n images of per float32 values each) through m in
// chunks of at most maxBatch and returns the logits.
func forwardAll(ctx context.Context, m engine.Model, x []float32, n, per, maxBatch int) (logits []float32, err error) {
	info := m.Info()
	inst, err := m.NewInstance(ctx)
	if err != nil {
		return nil, err
	}
	defer closeInto(&err, inst)
	dev := m.Device()
	inBytes, outBytes := per*4, info.OutputBytes()
	bufs := make([]interface{ Free() error }, 0, 4)
	defer func() {
		for _, b := range bufs {
			if ferr := b.Free(); err == nil && ferr != nil {
				err = ferr
			}
		}
	}()
	devIn, err := dev.Alloc(maxBatch * inBytes)
	if err != nil {
		return nil, err
	}
	bufs = append(bufs, devIn)
	devOut, err := dev.Alloc(maxBatch * outBytes)
	if err != nil {
		return nil, err
	}
	bufs = append(bufs, devOut)
	hostIn, err := dev.AllocHost(maxBatch * inBytes)
	if err != nil {
		return nil, err
	}
	bufs = append(bufs, hostIn)
	hostOut, err := dev.AllocHost(maxBatch * outBytes)
	if err != nil {
		return nil, err
	}
	bufs = append(bufs, hostOut)

	src := tensor.F32Bytes(x)
	logits = make([]float32, n*info.OutputElems())
	dst := tensor.F32Bytes(logits)
	st := inst.Stream()
	for i := 0; i < n; i += maxBatch {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b := min(maxBatch, n-i)
		in := hostIn.Bytes()[:b*inBytes]
		copy(in, src[i*inBytes:])
		out := hostOut.Bytes()[:b*outBytes]
		if err := st.CopyToDevice(devIn, 0, in); err != nil {
			return nil, err
		}
		if err := inst.Forward(devIn, devOut, b); err != nil {
			return nil, fmt.Errorf("forward of images %d..%d: %w", i, i+b-1, err)
		}
		if err := st.CopyToHost(out, devOut, 0); err != nil {
			return nil, err
		}
		if err := st.Synchronize(); err != nil {
			return nil, err
		}
		copy(dst[i*outBytes:], out)
	}
	return logits, nil
}

func closeInto(err *error, c io.Closer) {
	if cerr := c.Close(); *err == nil && cerr != nil {
		*err = cerr
	}
}

// readInputs reads every input into one float32 [N, C, H, W] batch and
// names each image for the report ("cat.jpg", "x.npy[3]").
func readInputs(ctx context.Context, paths []string, spec preprocess.Spec) (*tensor.Tensor, []string, error) {
	var pre *preprocess.CPU
	var (
		chw   tensor.Shape // C, H, W shared by all inputs
		from  string       // the input that fixed chw
		data  []float32
		names []string
	)
	for _, p := range paths {
		var (
			vals []float32
			s    tensor.Shape
		)
		if strings.EqualFold(filepath.Ext(p), ".npy") {
			t, err := tensor.LoadNPY(p)
			if err != nil {
				return nil, nil, fmt.Errorf("input: %w", err)
			}
			if t.DType != tensor.Float32 || len(t.Shape) != 4 {
				return nil, nil, fmt.Errorf("input %s is %s%v: want float32 [N, C, H, W] (NCHW, normalized)", p, t.DType, t.Shape)
			}
			if t.Shape[0] == 0 || t.Shape[1] == 0 || t.Shape[2] == 0 || t.Shape[3] == 0 {
				return nil, nil, fmt.Errorf("input %s has shape %v: no images", p, t.Shape)
			}
			vals, s = t.Float32s(), t.Shape
			for i := 0; i < s[0]; i++ {
				names = append(names, fmt.Sprintf("%s[%d]", p, i))
			}
		} else {
			if pre == nil {
				var err error
				if pre, err = preprocess.NewCPU(spec, preprocess.CPUOptions{Workers: 1}); err != nil {
					return nil, nil, fmt.Errorf("the model's preprocessing: %w", err)
				}
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, nil, fmt.Errorf("input: %w", err)
			}
			s = tensor.Shape{1, 3, spec.Height, spec.Width}
			vals = make([]float32, s.NumElements())
			if errs := pre.Preprocess(ctx, [][]byte{b}, tensor.Float32, tensor.F32Bytes(vals)); errs[0] != nil {
				return nil, nil, fmt.Errorf("input %s: %w", p, errs[0])
			}
			names = append(names, p)
		}
		if chw == nil {
			chw, from = s[1:], p
		} else if !chw.Equal(s[1:]) {
			return nil, nil, fmt.Errorf("input %s holds images of %v (C, H, W), but %s holds %v: one run takes one size", p, s[1:], from, chw)
		}
		data = append(data, vals...)
	}
	t, err := tensor.FromFloat32(tensor.Shape{len(names), chw[0], chw[1], chw[2]}, data)
	return t, names, err
}

// readLabels reads class names in any of labels.Load's formats.
func readLabels(path string) ([]string, error) { return classlabels.Load(path) }

// printTopK prints the k most probable classes of each image with their
// softmax probabilities.
func printTopK(w io.Writer, names []string, logits []float32, classes, k int, labels []string) {
	idx := make([]int, classes)
	prob := make([]float64, classes)
	for i, name := range names {
		row := logits[i*classes : (i+1)*classes]
		// Softmax in float64, shifted by the maximum for stability.
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, float64(v))
		}
		var sum float64
		for j, v := range row {
			prob[j] = math.Exp(float64(v) - mx)
			sum += prob[j]
		}
		for j := range idx {
			idx[j] = j
		}
		sort.SliceStable(idx, func(a, b int) bool { return row[idx[a]] > row[idx[b]] })
		fmt.Fprintf(w, "%s:\n", name)
		for _, j := range idx[:k] {
			label := ""
			if labels != nil {
				label = "  " + labels[j]
			}
			fmt.Fprintf(w, "  %6.2f%%  class %4d  logit %8.4f%s\n", 100*prob[j]/sum, j, row[j], label)
		}
	}
}

// allNPY reports whether every input is a tensor file (no image to decode).
func allNPY(paths []string) bool {
	for _, p := range paths {
		if !strings.EqualFold(filepath.Ext(p), ".npy") {
			return false
		}
	}
	return true
}
