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
}

func runImagesCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("images", "images --images DIR [flags]", stderr)
	var mf modelFlags
	mf.register(fs, true)
	dir := fs.String("images", "", "`DIR` of JPEG/PNG files, read into memory before timing (tools/images/make_photos.py --bench writes a set)")
	batch := fs.Int("batch_size", 256, "images per batch")
	iters := fs.Int("iters", 50, "timed batches")
	workers := fs.Int("workers", 2, "concurrent pipelines (each: a decoder, a model instance and a stream), so that one batch's decode overlaps another's forward")
	topk := fs.Int("topk", 5, "classes returned per image")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("--images DIR is required")
	}
	if *batch < 1 || *iters < 1 || *workers < 1 || *topk < 1 {
		return errors.New("--batch_size, --iters, --workers and --topk must be positive")
	}
	cfg := imagesConfig{batch: *batch, iters: *iters, workers: *workers, topk: *topk}
	var err error
	if cfg.files, err = readImageDir(*dir); err != nil {
		return err
	}
	e, prec, err := mf.selectEngine(stderr)
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
		TuningCache: mf.tuneCache, Progress: func(f string, a ...any) { fmt.Fprintf(stderr, f+"\n", a...) }}
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
	fmt.Fprintf(stdout, "JPEG -> top-%d (%s %s): %9.0f img/s, batch latency p50 %.2f ms, p99 %.2f ms\n",
		cfg.topk, info.Arch, prec, res.whole, res.p50*1e3, res.p99*1e3)
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
}

// imageWorker is one pipeline: a decoder writing into a model instance's
// input on the instance's own stream, so a worker's batches are ordered
// and different workers' overlap.
type imageWorker struct {
	pre    *imagegpu.Preprocessor
	inst   engine.Instance
	stream cu.Stream
	in     engine.Buffer
	inPtr  cu.DevPtr
	out    engine.Buffer
	logits engine.HostBuffer
	top    []int // top-k classes of every image of a batch
}

func runImages(ctx context.Context, m engine.Model, cfg imagesConfig, in tensor.DType, device int) (imagesResult, error) {
	libs, err := cu.Load()
	if err != nil {
		return imagesResult{}, err
	}
	info := m.Info()
	batch := make([][]byte, cfg.batch)
	for i := range batch {
		batch[i] = cfg.files[i%len(cfg.files)]
	}
	ws := make([]*imageWorker, cfg.workers)
	defer func() {
		for _, w := range ws {
			if w != nil {
				w.close()
			}
		}
	}()
	for i := range ws {
		w := &imageWorker{}
		ws[i] = w
		if w.pre, err = imagegpu.New(libs, imagegpu.Options{Device: device, MaxBatch: cfg.batch, Spec: imagegpu.ImageNet, Out: in}); err != nil {
			return imagesResult{}, err
		}
		if w.inst, err = m.NewInstance(ctx); err != nil {
			return imagesResult{}, err
		}
		h, ok := w.inst.Stream().(interface{ Handle() cu.Stream })
		if !ok {
			return imagesResult{}, errors.New("the engine's stream is not a CUDA stream")
		}
		w.stream = h.Handle()
		if w.in, err = m.Device().Alloc(cfg.batch * info.InputBytes()); err != nil {
			return imagesResult{}, err
		}
		w.inPtr = w.in.(interface{ Ptr() cu.DevPtr }).Ptr()
		if w.out, err = m.Device().Alloc(cfg.batch * info.OutputBytes()); err != nil {
			return imagesResult{}, err
		}
		if w.logits, err = m.Device().AllocHost(cfg.batch * info.OutputBytes()); err != nil {
			return imagesResult{}, err
		}
		w.top = make([]int, cfg.batch*cfg.topk)
	}
	res := imagesResult{backends: ws[0].pre.Backends()}
	// Warm up (first decode allocates scratch; first forward may tune).
	for _, w := range ws {
		if _, err := w.step(batch, cfg.batch, true); err != nil {
			return res, err
		}
	}
	if res.decodeOnly, err = timeWorkers(ws, cfg, func(w *imageWorker) error {
		_, err := w.step(batch, cfg.batch, false)
		return err
	}); err != nil {
		return res, err
	}
	var mu sync.Mutex
	var lat []float64
	if res.whole, err = timeWorkers(ws, cfg, func(w *imageWorker) error {
		t0 := time.Now()
		logits, err := w.step(batch, cfg.batch, true)
		if err != nil {
			return err
		}
		top := topK(logits, cfg.batch, info.Classes, cfg.topk, w.top)
		d := time.Since(t0).Seconds()
		mu.Lock()
		lat = append(lat, d)
		if res.sample == nil {
			res.sample = append([]int(nil), top[:cfg.topk]...)
		}
		mu.Unlock()
		return nil
	}); err != nil {
		return res, err
	}
	sort.Float64s(lat)
	res.p50, res.p99 = quantile(lat, 0.5), quantile(lat, 0.99)
	return res, nil
}

// timeWorkers runs cfg.iters steps spread over the workers and returns the
// images per second.
func timeWorkers(ws []*imageWorker, cfg imagesConfig, step func(*imageWorker) error) (float64, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, len(ws))
	t0 := time.Now()
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(cfg.iters) {
				if err := step(w); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(t0).Seconds()
	close(errc)
	if err := <-errc; err != nil {
		return 0, err
	}
	return float64(cfg.iters*cfg.batch) / el, nil
}

// step decodes one batch into the instance's input and, with forward,
// runs the model and brings the logits back; it returns them.
func (w *imageWorker) step(batch [][]byte, n int, forward bool) ([]float32, error) {
	errs, err := w.pre.Run(batch, w.inPtr, w.stream)
	if err != nil {
		return nil, err
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s := w.inst.Stream()
	if forward {
		if err := w.inst.Forward(w.in, w.out, n); err != nil {
			return nil, err
		}
		if err := s.CopyToHost(w.logits.Bytes(), w.out, 0); err != nil {
			return nil, err
		}
	}
	if err := s.Synchronize(); err != nil {
		return nil, err
	}
	return tensor.BytesF32(w.logits.Bytes()), nil
}

func (w *imageWorker) close() {
	if w.inst != nil {
		w.inst.Stream().Synchronize()
	}
	if w.pre != nil {
		w.pre.Close()
	}
	for _, b := range []engine.Buffer{w.in, w.out} {
		if b != nil {
			b.Free()
		}
	}
	if w.logits != nil {
		w.logits.Free()
	}
	if w.inst != nil {
		w.inst.Close()
	}
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
