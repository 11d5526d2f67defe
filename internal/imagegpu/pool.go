package imagegpu

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"goinfer/internal/backend"
	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
	"goinfer/internal/preprocess"
	"goinfer/internal/tensor"
)

// PoolOptions configure a Pool.
type PoolOptions struct {
	// Device is the GPU ordinal the images are decoded on.
	Device int
	// Workers is the number of Preprocessors, each with its own stream and
	// device buffer, that serve calls at once (default 4).
	Workers int
	// MaxBatch is the most images one worker decodes in one Run (default
	// 64); calls with more are done in chunks.
	MaxBatch int
	// Out is the dtype written: Float32 or Float16.
	Out tensor.DType
	// MaxPixels bounds an image's width x height (see Options.MaxPixels).
	MaxPixels int
	// NoHardware skips the hardware JPEG decoder.
	NoHardware bool
}

// Pool is a preprocess.Preprocessor that decodes on the GPU: each call
// takes a worker, decodes its images into the worker's device buffer with
// Run and copies the preprocessed tensor back into the caller's host
// memory. That copy, and the copy to the device the model's backend makes
// again, are what a decode stage inside the backend would save; Pool
// brings nvJPEG to the server's image input without changing the
// pipeline. It is safe for concurrent use.
type Pool struct {
	spec    preprocess.Spec
	opts    PoolOptions
	rt      *cu.Runtime
	size    int // bytes of one preprocessed image
	workers chan *poolWorker
	all     []*poolWorker
}

type poolWorker struct {
	pre    *Preprocessor
	stream cu.Stream
	buf    cu.DevPtr
}

// SpecFor turns a model's preprocessing into the kernel's: bilinear
// resizes of the shorter side only.
func SpecFor(s preprocess.Spec) (Spec, error) {
	if err := s.Validate(3); err != nil {
		return Spec{}, err
	}
	if s.Interpolation != preprocess.Bilinear || s.Resize < 1 {
		return Spec{}, fmt.Errorf("imagegpu: the kernel resizes bilinearly to a shorter side; the spec is %s", s)
	}
	mean, std := s.MeanStd32()
	return Spec{Resize: s.Resize, CropW: s.Crop, CropH: s.Crop, Mean: [3]float32(mean), Std: [3]float32(std)}, nil
}

// NewPool starts the workers of a Pool for spec on opts.Device.
func NewPool(libs *cu.Libs, spec preprocess.Spec, opts PoolOptions) (*Pool, error) {
	ks, err := SpecFor(spec)
	if err != nil {
		return nil, err
	}
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 64
	}
	if libs == nil || libs.Runtime == nil {
		return nil, errors.New("imagegpu: the CUDA runtime is needed")
	}
	p := &Pool{spec: spec, opts: opts, rt: libs.Runtime, size: 3 * spec.Crop * spec.Crop * opts.Out.Size(),
		workers: make(chan *poolWorker, opts.Workers)}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for range opts.Workers {
		w := &poolWorker{}
		p.all = append(p.all, w)
		w.pre, err = New(libs, Options{Device: opts.Device, MaxBatch: opts.MaxBatch, Spec: ks, Out: opts.Out,
			MaxPixels: opts.MaxPixels, NoHardware: opts.NoHardware})
		if err == nil {
			err = p.rt.SetDevice(opts.Device)
		}
		if err == nil {
			w.stream, err = p.rt.StreamCreate()
		}
		if err == nil {
			w.buf, err = p.rt.Malloc(int64(opts.MaxBatch * p.size))
		}
		if err != nil {
			return nil, errors.Join(err, p.Close())
		}
		p.workers <- w
	}
	return p, nil
}

// Spec implements preprocess.Preprocessor.
func (p *Pool) Spec() preprocess.Spec { return p.spec }

// Backends names the nvJPEG backends in use.
func (p *Pool) Backends() []string {
	if len(p.all) == 0 || p.all[0].pre == nil {
		return nil
	}
	return p.all[0].pre.Backends()
}

// Preprocess implements preprocess.Preprocessor. dt must be the pool's
// Out.
func (p *Pool) Preprocess(ctx context.Context, images [][]byte, dt tensor.DType, dst []byte) []error {
	errs := make([]error, len(images))
	fail := func(from int, err error) []error {
		for i := from; i < len(errs); i++ {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return errs
	}
	switch {
	case dt != p.opts.Out:
		return fail(0, fmt.Errorf("imagegpu: the pool writes %s, not %s", p.opts.Out, dt))
	case len(dst) < len(images)*p.size:
		return fail(0, fmt.Errorf("imagegpu: %d bytes of room for %d images of %d bytes", len(dst), len(images), p.size))
	}
	var w *poolWorker
	select {
	case w = <-p.workers:
	case <-ctx.Done():
		return fail(0, ctx.Err())
	}
	defer func() { p.workers <- w }()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := p.rt.SetDevice(p.opts.Device); err != nil {
		return fail(0, err)
	}
	for lo := 0; lo < len(images); lo += p.opts.MaxBatch {
		hi := min(lo+p.opts.MaxBatch, len(images))
		chunkErrs, err := w.pre.Run(images[lo:hi], w.buf, w.stream)
		if err == nil {
			err = p.rt.MemcpyDtoHAsync(dst[lo*p.size:hi*p.size], w.buf, w.stream)
		}
		if err == nil {
			err = p.rt.StreamSynchronize(w.stream)
		}
		if err != nil {
			return fail(lo, fmt.Errorf("imagegpu: decoding images %d to %d: %w", lo, hi-1, err))
		}
		copy(errs[lo:hi], chunkErrs)
	}
	return errs
}

// Close frees the workers. No call may be running.
func (p *Pool) Close() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var errs []error
	if p.rt != nil {
		errs = append(errs, p.rt.SetDevice(p.opts.Device))
	}
	for _, w := range p.all {
		if w.pre != nil {
			errs = append(errs, w.pre.Close())
		}
		if w.buf != 0 {
			errs = append(errs, p.rt.Free(w.buf))
		}
		if w.stream != 0 {
			errs = append(errs, p.rt.StreamDestroy(w.stream))
		}
	}
	p.all = nil
	return errors.Join(errs...)
}

// Decode is Run behind the engine interfaces, which makes a Preprocessor a
// backend.Decoder: the pipeline decodes a request's images into its device
// input on its copy stream, in place of the copy.
func (p *Preprocessor) Decode(images [][]byte, dst engine.Buffer, st engine.Stream) ([]error, error) {
	ptr, ok := dst.(interface{ Ptr() cu.DevPtr })
	if !ok {
		return nil, errors.New("imagegpu: the input buffer is not CUDA device memory")
	}
	h, ok := st.(interface{ Handle() cu.Stream })
	if !ok {
		return nil, errors.New("imagegpu: the stream is not a CUDA stream")
	}
	if n := len(images); n > p.opts.MaxBatch {
		return nil, fmt.Errorf("imagegpu: %d images, the decoder takes %d at most", n, p.opts.MaxBatch)
	}
	return p.Run(images, ptr.Ptr(), h.Handle())
}

var _ backend.Decoder = (*Preprocessor)(nil)
