package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"goinfer/internal/backend"
	"goinfer/internal/client"
	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
	"goinfer/internal/imagegpu"
	"goinfer/internal/loadgen"
	"goinfer/internal/preprocess"
	"goinfer/internal/tensor"
	"goinfer/internal/topk"
	"goinfer/internal/trace"
)

// registerImages adds the flags of image benchmarks.
func (o *benchOptions) registerImages(fs *flag.FlagSet) {
	fs.StringVar(&o.images, "images", "", "send the JPEG/PNG files in `DIR` (cycled, --batch_size per request) and measure encoded bytes in to classes out: in process, decoded in the pipeline's copy stage (nvJPEG on the cuda engine, Go on cpu) into --image_size crops; with a --url, through the server's image input, top-k classes back")
	fs.IntVar(&o.topK, "top_k", 5, "with --images: classes asked for per image (the classification extension)")
}

// checkImages validates the image flags.
func (o *benchOptions) checkImages() error {
	switch {
	case o.images == "":
		return nil
	case o.sharedMem != "none":
		return errors.New("--images and --shared_memory are exclusive: encoded images travel in the requests")
	case o.topK < 1:
		return fmt.Errorf("--top_k %d: must be at least 1", o.topK)
	}
	return nil
}

// imageTarget is a server's image input: each request sends the encoded
// images of its batch and gets their top-k classes. The responses carry
// the k scores of each image where logits would be, so that the load
// generator's checks (count, finite values) apply.
type imageTarget struct {
	c   *client.Client
	md  client.Metadata
	url string
	k   int
	// batches maps each request tensor (the batch's BYTES elements, as
	// the load generator hands them out) to its images.
	batches map[*tensor.Tensor][][]byte
	sem     chan struct{}
}

func (t *imageTarget) Submit(r backend.Request) error {
	imgs, ok := t.batches[r.Input]
	if !ok {
		return fmt.Errorf("request %d: not one of the image batches", r.ID)
	}
	ctx := r.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	select {
	case t.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	go func() {
		res, err := t.c.InferImages(ctx, imgs, t.k)
		<-t.sem
		resp := backend.Response{ID: r.ID, SentAt: r.SentAt, DoneAt: time.Now(), Err: err}
		if err == nil {
			n := len(imgs)
			scores := r.Output
			if len(scores) < n*t.k {
				scores = make([]float32, n*t.k)
			}
			scores = scores[:n*t.k]
			for i, cls := range res.Classes {
				if len(cls) != t.k {
					resp.Err = fmt.Errorf("image %d: %d classes, asked for %d", i, len(cls), t.k)
					break
				}
				for j, c := range cls {
					scores[i*t.k+j] = c.Score
				}
			}
			if resp.Err == nil {
				resp.Logits, resp.N, resp.Classes = scores, n, t.k
				resp.QueueWait, resp.Compute = res.QueueWait, res.Compute
			}
		}
		r.Reply <- resp
	}()
	return nil
}

func (t *imageTarget) describe() (engine.Info, time.Duration, time.Duration, int, int64) {
	scheme, _, _ := strings.Cut(t.url, "://")
	info := engine.Info{Engine: "remote-" + scheme + "+images", Device: t.url, Arch: t.md.Model,
		Inputs:  []engine.TensorSpec{{Name: t.md.ImageInput, DType: tensor.Uint8, Shape: []int{-1}}},
		Outputs: []engine.TensorSpec{{Name: "top-k", DType: tensor.Float32, Shape: []int{t.k}}}}
	return info, 0, 0, 1, 0
}

func (t *imageTarget) addTrace(*trace.Trace, []backend.Response) {}

func (t *imageTarget) close(context.Context) error {
	// Wait for the requests in flight (the semaphore drains), then close.
	for range cap(t.sem) {
		t.sem <- struct{}{}
	}
	return t.c.Close()
}

// runRemoteImageBench is `bench --url URL --images DIR`.
func runRemoteImageBench(ctx context.Context, o *benchOptions, stdout, stderr io.Writer) error {
	files, err := readImageDir(o.images)
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	inflight := max(256, o.concurrency)
	conns := o.connections
	if conns <= 0 {
		conns = min(16, max(1, max(o.concurrency, 64)/4))
	}
	c, err := client.DialOptions(dctx, o.url, client.Options{MaxInflight: inflight, Conns: conns, HTTPClient: o.httpClient})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "waiting for %s to be ready\n", o.url)
	md, err := c.WaitReady(dctx, 100*time.Millisecond)
	if err != nil {
		c.Close()
		return err
	}
	if md.ImageInput == "" {
		c.Close()
		return fmt.Errorf("%s at %s has no image input (a BYTES input); serve it with goinfer serve --images", md.Model, o.url)
	}
	if len(md.InputShape) == 4 && md.InputShape[2] > 0 {
		o.imageSize = int(md.InputShape[2]) // reported in the row: the size images are cropped to, when one is served
	}
	inputs, batches := imageBatches(files, o.batchSize, o.numIters, o.imageSize)
	t := &imageTarget{c: c, md: md, url: o.url, k: o.topK, batches: batches, sem: make(chan struct{}, inflight)}
	distinct := len(inputs.Tensors)
	size := 0
	for _, f := range files {
		size += len(f)
	}
	fmt.Fprintf(stderr, "model %s (%d classes) at %s, image input %q: %d files from %s (%s), %d distinct batches of %d, top-%d\n",
		md.Model, md.Classes, o.url, md.ImageInput, len(files), o.images, mibString(size), distinct, o.batchSize, o.topK)
	prog := newProgress(stderr)
	lcfg := o.loadConfig()
	probe, window, closeProbe := gpuSource("cuda", []int{o.mf.device}, io.Discard)
	defer closeProbe()
	lcfg.Probe, lcfg.UtilWindow = probe, window
	defer printClientStats(stdout, c, false)
	return benchTarget(ctx, t, inputs, lcfg, o, source{Path: o.url + " (" + o.images + ")"}, stdout, stderr, prog)
}

// appendBytesElement appends b as a BYTES element: its 4-byte
// little-endian length, then b.
func appendBytesElement(dst, b []byte) []byte {
	n := len(b)
	dst = append(dst, byte(n), byte(n>>8), byte(n>>16), byte(n>>24))
	return append(dst, b...)
}

// imageBatches makes the request "tensors" of an image benchmark: one batch
// of encoded images per request, as many distinct ones as the files make
// (cycling through them), at most one per request. Each batch's tensor is
// its BYTES elements, as the wire carries them; batches maps it back to
// the images.
func imageBatches(files [][]byte, batchSize, numIters, imageSize int) (*loadgen.Inputs, map[*tensor.Tensor][][]byte) {
	distinct := min(numIters+1, max(1, (len(files)+batchSize-1)/batchSize))
	inputs := &loadgen.Inputs{Shape: loadgen.Shape{BatchSize: batchSize, Channels: 3, Height: imageSize, Width: imageSize, DType: tensor.Uint8}}
	batches := map[*tensor.Tensor][][]byte{}
	for j := range distinct {
		batch := make([][]byte, batchSize)
		var elems []byte
		for i := range batch {
			batch[i] = files[(j*batchSize+i)%len(files)]
			elems = appendBytesElement(elems, batch[i])
		}
		bt := &tensor.Tensor{DType: tensor.Uint8, Shape: tensor.Shape{len(elems)}, Data: elems}
		inputs.Tensors = append(inputs.Tensors, bt)
		batches[bt] = batch
	}
	return inputs, batches
}

// localImageTarget is the in-process pipeline fed encoded images: each
// request carries its batch's images, which the pipeline's decoders turn
// into the device input. A response with images that failed to decode is
// passed on as an error of the request.
type localImageTarget struct {
	*localTarget
	batches map[*tensor.Tensor][][]byte
	shape   tensor.Shape // of a decoded batch
	dtype   tensor.DType
	k       int // classes asked for per image (--top_k)

	once  sync.Once
	relay chan backend.Response
	done  chan struct{}
}

func (t *localImageTarget) Submit(r backend.Request) error {
	imgs, ok := t.batches[r.Input]
	if !ok {
		return fmt.Errorf("request %d: not one of the image batches", r.ID)
	}
	t.once.Do(func() {
		t.relay, t.done = make(chan backend.Response, 64), make(chan struct{})
		go t.forward(r.Reply)
	})
	r.Encoded, r.Pinned = imgs, false
	r.TopK, r.Softmax = t.k, true
	r.Input = &tensor.Tensor{DType: t.dtype, Shape: t.shape}
	r.Reply = t.relay
	return t.localTarget.Submit(r)
}

// forward passes the pipeline's responses on to the load generator's
// channel (the same for every request of a run), failing those with
// images that did not decode.
func (t *localImageTarget) forward(out chan<- backend.Response) {
	defer close(t.done)
	for r := range t.relay {
		if r.Err == nil {
			r.Err = errors.Join(r.ImageErrs...)
		}
		if r.Err == nil {
			// The answer is the top k of each image, as a server's
			// classification: their probabilities stand for the logits.
			top := r.Top
			if top == nil {
				top = make([]topk.Class, r.N*t.k)
				topk.BestRows(top, r.Logits, r.Classes, t.k, true)
			}
			scores := make([]float32, len(top))
			for i, c := range top {
				scores[i] = c.Value
			}
			r.Logits, r.Classes, r.Top = scores, t.k, nil
		}
		out <- r
	}
}

// close stops the pipeline, which has then answered every request, and
// the relay.
func (t *localImageTarget) close(ctx context.Context) error {
	err := t.localTarget.close(ctx)
	if t.relay != nil {
		close(t.relay)
		<-t.done
	}
	return err
}

// benchDecoders is the pipeline's decoder factory for `bench --images`:
// nvJPEG on the cuda engine, Go on the host for the cpu engine, with the
// model's preprocessing (ImageNet's when it has none) at the image size.
// benchPostprocessors rank each batch's top classes in the pipeline: on
// the GPU on the cuda engine, so that only they come back, else on the
// host.
func benchPostprocessors(engineName string, devices []int) func(int, engine.Device, engine.Info) (backend.Postprocessor, error) {
	return func(device int, _ engine.Device, _ engine.Info) (backend.Postprocessor, error) {
		if engineName != "cuda" {
			return backend.HostPostprocessor{}, nil
		}
		libs, err := cu.Load()
		if err != nil {
			return nil, err
		}
		return imagegpu.NewRanker(libs, devices[device])
	}
}

func benchDecoders(o *benchOptions, engineName string, devices []int, model *preprocess.Spec) (func(int, engine.Device, engine.Info) (backend.Decoder, error), error) {
	spec := preprocess.ImageNet(o.imageSize, o.imageSize)
	if model != nil {
		spec = model.WithSize(o.imageSize, o.imageSize)
	}
	if engineName != "cuda" {
		pre, err := preprocess.NewCPU(spec, preprocess.CPUOptions{})
		if err != nil {
			return nil, err
		}
		return func(_ int, _ engine.Device, info engine.Info) (backend.Decoder, error) {
			return backend.HostDecoder{Pre: pre, DType: info.Input().DType}, nil
		}, nil
	}
	ks, err := imagegpu.SpecFor(spec)
	if err != nil {
		return nil, err
	}
	return func(device int, _ engine.Device, info engine.Info) (backend.Decoder, error) {
		libs, err := cu.Load()
		if err != nil {
			return nil, err
		}
		return imagegpu.New(libs, imagegpu.Options{Device: devices[device], MaxBatch: o.batchSize, Spec: ks, Out: info.Input().DType})
	}, nil
}
