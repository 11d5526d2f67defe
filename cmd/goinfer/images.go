package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
	"goinfer/internal/imagegpu"
	"goinfer/internal/tensor"
)

func init() {
	register(command{
		name:    "images",
		summary: "images-in benchmark on the GPU: JPEG bytes in memory to top-k classes, in process (decode, preprocess, model, top-k)",
		run:     runImagesCmd,
	})
}

// imagesConfig is what `goinfer images` measures.
type imagesConfig struct {
	files   [][]byte
	batch   int
	iters   int
	workers int
	topk    int
	// gpuShare and pin are imagegpu.Options' GPUShare and PinInput.
	gpuShare float64
	pin      bool
}

func runImagesCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("images", "images --images DIR [flags]", stderr)
	var mf modelFlags
	mf.register(fs, true)
	dir := fs.String("images", "", "`DIR` of JPEG/PNG files, read into memory before timing (tools/images/make_photos.py --bench writes a set)")
	batch := fs.Int("batch_size", 256, "images per batch")
	iters := fs.Int("iters", 50, "timed batches")
	workers := fs.Int("workers", 2, "decoders and model instances (each on its own stream): batches are decoded while others run the model")
	topk := fs.Int("topk", 5, "classes returned per image")
	gpuShare := fs.Float64("gpu_share", 0, "fraction of the JPEGs the hardware decoder takes that nvJPEG's GPU backend decodes instead, at the same time")
	pin := fs.Bool("pin_input", false, "copy the bitstreams into page-locked memory before nvJPEG reads them")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("--images DIR is required")
	}
	if *batch < 1 || *iters < 1 || *workers < 1 || *topk < 1 {
		return errors.New("--batch_size, --iters, --workers and --topk must be positive")
	}
	cfg := imagesConfig{batch: *batch, iters: *iters, workers: *workers, topk: *topk, gpuShare: *gpuShare, pin: *pin}
	var err error
	if cfg.files, err = readImageDir(*dir); err != nil {
		return err
	}
	e, prec, err := mf.selectEngine(stderr, source{})
	if err != nil {
		return err
	}
	if e.Name() != "cuda" {
		return errors.New("goinfer images measures the GPU image path: it needs the cuda engine (a GPU and its libraries; see goinfer doctor)")
	}
	src, err := mf.resolve(ctx, stderr)
	if err != nil {
		return err
	}
	in := tensor.Float16
	if prec == engine.FP32 || prec == engine.TF32 {
		in = tensor.Float32
	}
	opts := engine.Options{Compile: mf.compile, Precision: prec, MaxBatch: cfg.batch, BatchSizes: []int{cfg.batch},
		Height: imagegpu.ImageNet.CropH, Width: imagegpu.ImageNet.CropW, InputDType: in, Device: mf.device,
		TuningCache: mf.tuneCache, GraphExperiments: mf.experiments, Progress: func(f string, a ...any) { fmt.Fprintf(stderr, f+"\n", a...) }}
	m, lt, err := loadModel(ctx, e, src, opts)
	if err != nil {
		return err
	}
	defer m.Close()
	info := m.Info()
	fmt.Fprintf(stderr, "%s on %s, %s, compile=%v: loaded in %.2f s (+%.2f s compile)\n", info.Arch, info.Device, prec, info.Compiled, lt.Load.Seconds(), lt.Compile.Seconds())
	res, err := runImages(ctx, m, cfg, in, mf.device)
	if err != nil {
		return err
	}
	var kb float64
	for _, f := range cfg.files {
		kb += float64(len(f)) / 1000
	}
	fmt.Fprintf(stdout, "%d files (mean %.1f KB) from %s; batch %d, %d workers, %d batches timed; decoders: %s\n",
		len(cfg.files), kb/float64(len(cfg.files)), *dir, cfg.batch, cfg.workers, cfg.iters, strings.Join(res.backends, ", "))
	fmt.Fprintf(stdout, "decode + preprocess alone: %9.0f img/s\n", res.decodeOnly)
	fmt.Fprintf(stdout, "  stages (decode alone, all decoders): %s\n", res.stages)
	fmt.Fprintf(stdout, "JPEG -> top-%d (%s %s): %9.0f img/s, batch latency p50 %.2f ms, p99 %.2f ms\n",
		cfg.topk, info.Arch, prec, res.whole, res.p50*1e3, res.p99*1e3)
	fmt.Fprintf(stdout, "  stages (whole path, all decoders): %s\n", res.wholeStages)
	fmt.Fprintf(stdout, "first image: top-%d classes %v\n", cfg.topk, res.sample)
	return nil
}

// readImageDir reads every .jpg, .jpeg and .png file of dir.
func readImageDir(dir string) ([][]byte, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("--images: %w", err)
	}
	var out [][]byte
	for _, e := range ents {
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".jpg", ".jpeg", ".png":
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				return nil, fmt.Errorf("--images: %w", err)
			}
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--images: no .jpg, .jpeg or .png files in %s", dir)
	}
	return out, nil
}

type imagesResult struct {
	decodeOnly, whole float64 // img/s
	p50, p99          float64 // seconds per batch, whole path
	backends          []string
	sample            []int
	stages            imagegpu.Stats // of the decode-only measurement
	wholeStages       imagegpu.Stats // of the whole path's
}

// The images pipeline, as a serving backend would run it: decoders (each a
// Preprocessor on its own stream) fill input slots, model instances (each
// on its stream) wait for a slot's decode on the GPU, run the forward and
// bring back the logits, and the slot goes back to the decoders. Decode of
// one batch overlaps the forward of another.

// imageSlot is one batch's device input, with the event that marks its
// decode done.
type imageSlot struct {
	in    engine.Buffer
	ptr   cu.DevPtr
	ready engine.Event
}

// imageDecoder is one decoding stage worker.
type imageDecoder struct {
	pre    *imagegpu.Preprocessor
	stream engine.Stream
	handle cu.Stream
}

// imageRunner is one model stage worker.
type imageRunner struct {
	inst   engine.Instance
	out    engine.Buffer
	logits engine.HostBuffer
	top    []int // top-k classes of every image of a batch
}

type imagePipeline struct {
	decs    []*imageDecoder
	runs    []*imageRunner
	slots   []*imageSlot
	batch   [][]byte
	classes int
	topk    int
}

func newImagePipeline(ctx context.Context, m engine.Model, cfg imagesConfig, in tensor.DType, device int) (*imagePipeline, error) {
	libs, err := cu.Load()
	if err != nil {
		return nil, err
	}
	info := m.Info()
	dev := m.Device()
	p := &imagePipeline{batch: make([][]byte, cfg.batch), classes: info.OutputElems(), topk: cfg.topk}
	for i := range p.batch {
		p.batch[i] = cfg.files[i%len(cfg.files)]
	}
	fail := func(err error) (*imagePipeline, error) {
		p.close()
		return nil, err
	}
	for i := 0; i < cfg.workers; i++ {
		d := &imageDecoder{}
		p.decs = append(p.decs, d)
		if d.pre, err = imagegpu.New(libs, imagegpu.Options{Device: device, MaxBatch: cfg.batch, Spec: imagegpu.ImageNet, Out: in,
			GPUShare: cfg.gpuShare, PinInput: cfg.pin}); err != nil {
			return fail(err)
		}
		if d.stream, err = dev.NewStream(); err != nil {
			return fail(err)
		}
		h, ok := d.stream.(interface{ Handle() cu.Stream })
		if !ok {
			return fail(errors.New("the engine's stream is not a CUDA stream"))
		}
		d.handle = h.Handle()
		r := &imageRunner{top: make([]int, cfg.batch*cfg.topk)}
		p.runs = append(p.runs, r)
		if r.inst, err = m.NewInstance(ctx); err != nil {
			return fail(err)
		}
		if r.out, err = dev.Alloc(cfg.batch * info.OutputBytes()); err != nil {
			return fail(err)
		}
		if r.logits, err = dev.AllocHost(cfg.batch * info.OutputBytes()); err != nil {
			return fail(err)
		}
	}
	for i := 0; i < 2*cfg.workers+1; i++ {
		sl := &imageSlot{}
		p.slots = append(p.slots, sl)
		if sl.in, err = dev.Alloc(cfg.batch * info.InputBytes()); err != nil {
			return fail(err)
		}
		sl.ptr = sl.in.(interface{ Ptr() cu.DevPtr }).Ptr()
		if sl.ready, err = dev.NewEvent(); err != nil {
			return fail(err)
		}
	}
	return p, nil
}

// decode fills sl with the batch on d's stream and marks it.
func (d *imageDecoder) decode(batch [][]byte, sl *imageSlot) error {
	errs, err := d.pre.Run(batch, sl.ptr, d.handle)
	if err != nil {
		return err
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return d.stream.Record(sl.ready)
}

// run waits for sl's decode on the GPU, runs the model and returns the
// top-k classes of every image once the logits are back.
func (r *imageRunner) run(sl *imageSlot, n, classes, k int) ([]int, error) {
	s := r.inst.Stream()
	if err := s.Wait(sl.ready); err != nil {
		return nil, err
	}
	if err := r.inst.Forward(sl.in, r.out, n); err != nil {
		return nil, err
	}
	if err := s.CopyToHost(r.logits.Bytes(), r.out, 0); err != nil {
		return nil, err
	}
	if err := s.Synchronize(); err != nil {
		return nil, err
	}
	return topK(tensor.BytesF32(r.logits.Bytes()), n, classes, k, r.top), nil
}

// measure pushes iters batches through the pipeline: decode only, or the
// whole path. It returns images per second and each batch's latency from
// the start of its decode to its top-k.
func (p *imagePipeline) measure(iters int, whole bool) (float64, []float64, []int, error) {
	type filled struct {
		sl    *imageSlot
		start time.Time
	}
	free := make(chan *imageSlot, len(p.slots))
	for _, sl := range p.slots {
		free <- sl
	}
	full := make(chan filled, len(p.slots))
	var next atomic.Int64
	var mu sync.Mutex
	var lat []float64
	var sample []int
	var firstErr error
	setErr := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	var decWG, runWG sync.WaitGroup
	t0 := time.Now()
	for _, d := range p.decs {
		decWG.Add(1)
		go func() {
			defer decWG.Done()
			for next.Add(1) <= int64(iters) {
				sl := <-free
				start := time.Now()
				if err := d.decode(p.batch, sl); err != nil {
					setErr(err)
					return
				}
				if !whole {
					if err := sl.ready.Synchronize(); err != nil {
						setErr(err)
						return
					}
					free <- sl
					continue
				}
				full <- filled{sl, start}
			}
		}()
	}
	for _, r := range p.runs {
		runWG.Add(1)
		go func() {
			defer runWG.Done()
			for f := range full {
				top, err := r.run(f.sl, len(p.batch), p.classes, p.topk)
				free <- f.sl
				if err != nil {
					setErr(err)
					continue
				}
				mu.Lock()
				lat = append(lat, time.Since(f.start).Seconds())
				if sample == nil {
					sample = append([]int(nil), top[:p.topk]...)
				}
				mu.Unlock()
			}
		}()
	}
	decWG.Wait()
	close(full)
	runWG.Wait()
	el := time.Since(t0).Seconds()
	if firstErr != nil {
		return 0, nil, nil, firstErr
	}
	return float64(iters*len(p.batch)) / el, lat, sample, nil
}

// stats sums the decoders' stage times; the pipeline must be idle.
func (p *imagePipeline) stats() imagegpu.Stats {
	var s imagegpu.Stats
	for _, d := range p.decs {
		s = s.Add(d.pre.Stats())
	}
	return s
}

func (p *imagePipeline) close() {
	for _, d := range p.decs {
		if d.stream != nil {
			d.stream.Synchronize()
			d.stream.Close()
		}
		if d.pre != nil {
			d.pre.Close()
		}
	}
	for _, r := range p.runs {
		if r.inst != nil {
			r.inst.Stream().Synchronize()
		}
		if r.out != nil {
			r.out.Free()
		}
		if r.logits != nil {
			r.logits.Free()
		}
		if r.inst != nil {
			r.inst.Close()
		}
	}
	for _, sl := range p.slots {
		if sl.ready != nil {
			sl.ready.Close()
		}
		if sl.in != nil {
			sl.in.Free()
		}
	}
}

func runImages(ctx context.Context, m engine.Model, cfg imagesConfig, in tensor.DType, device int) (imagesResult, error) {
	p, err := newImagePipeline(ctx, m, cfg, in, device)
	if err != nil {
		return imagesResult{}, err
	}
	defer p.close()
	res := imagesResult{backends: p.decs[0].pre.Backends()}
	// Warm up: the first decode sizes the scratch, the first forward may
	// tune or capture.
	if _, _, _, err := p.measure(len(p.slots), true); err != nil {
		return res, err
	}
	before := p.stats()
	if res.decodeOnly, _, _, err = p.measure(cfg.iters, false); err != nil {
		return res, err
	}
	res.stages = p.stats().Sub(before)
	before = p.stats()
	var lat []float64
	if res.whole, lat, res.sample, err = p.measure(cfg.iters, true); err != nil {
		return res, err
	}
	res.wholeStages = p.stats().Sub(before)
	sort.Float64s(lat)
	res.p50, res.p99 = quantile(lat, 0.5), quantile(lat, 0.99)
	return res, nil
}

// topK writes the indices of the k largest logits of each of n images
// into dst (k per image, best first) and returns it.
func topK(logits []float32, n, classes, k int, dst []int) []int {
	k = min(k, classes)
	for i := 0; i < n; i++ {
		row := logits[i*classes : (i+1)*classes]
		best := dst[i*k : (i+1)*k]
		m := 0 // filled entries of best, kept sorted by descending logit
		for c, v := range row {
			if m == k && v <= row[best[k-1]] {
				continue
			}
			j := min(m, k-1)
			for j > 0 && row[best[j-1]] < v {
				best[j] = best[j-1]
				j--
			}
			best[j] = c
			m = min(m+1, k)
		}
	}
	return dst
}
