package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"

	"goinfer/internal/engine"
	"goinfer/internal/hugepage"
	"goinfer/internal/tensor"
)

// DefaultInputBudget bounds the memory of generated request tensors when
// Shape.Distinct is 0 (1 GiB).
const DefaultInputBudget = 1 << 30

// Shape says what request tensors to generate.
type Shape struct {
	BatchSize               int
	Channels, Height, Width int
	// DType: Float32 (normal values, like torch.randn), Float16 (the same
	// values rounded to half) or Uint8 (uniform raw pixels 0..255).
	DType tensor.DType
	Seed  uint64
	// Distinct is how many different tensors to generate; requests cycle
	// through them. 0 means one per request (count), or as many as fit in
	// DefaultInputBudget when that is less: the device copies every
	// request's bytes whatever they hold, so repeating tensors changes no
	// measurement, while 100 fp32 batches of 32 at 250x250 would take 2.4 GB.
	Distinct int
	// Alloc, if set, provides the tensors' memory from the start (page-
	// locked host memory of the engine); requests then go out marked
	// backend.Request.Pinned. Inputs.Close frees it. Config.PinAfterWarmup
	// pins later instead, which keeps device setup out of the timing.
	Alloc func(n int) (engine.HostBuffer, error)
}

// Bytes is the size of one request tensor.
func (s Shape) Bytes() int {
	return s.BatchSize * s.Channels * s.Height * s.Width * s.DType.Size()
}

func (s Shape) validate() error {
	switch {
	case s.BatchSize < 1:
		return fmt.Errorf("batch size %d: must be at least 1", s.BatchSize)
	case s.Channels < 1 || s.Height < 1 || s.Width < 1:
		return fmt.Errorf("image shape %dx%dx%d: every dimension must be positive", s.Channels, s.Height, s.Width)
	case s.Distinct < 0:
		return fmt.Errorf("distinct inputs %d: must not be negative", s.Distinct)
	}
	switch s.DType {
	case tensor.Float32, tensor.Float16, tensor.Uint8:
	default:
		return fmt.Errorf("input dtype %s: want float32, float16 or uint8", s.DType)
	}
	if err := (tensor.Shape{s.BatchSize, s.Channels, s.Height, s.Width}).Validate(); err != nil {
		return fmt.Errorf("request tensor: %w", err)
	}
	return nil
}

// Inputs are request tensors generated before timing starts, as the
// reference generates its fake data before sending.
type Inputs struct {
	Shape   Shape
	Tensors []*tensor.Tensor
	// Pinned is true when the tensors lie in memory from Shape.Alloc.
	Pinned bool
	bufs   []engine.HostBuffer
}

// Close frees memory that came from Shape.Alloc. The tensors must not be
// used afterwards.
func (in *Inputs) Close() error {
	var errs []error
	for _, b := range in.bufs {
		errs = append(errs, b.Free())
	}
	in.bufs = nil
	return errors.Join(errs...)
}

// Pin moves the tensors into memory from alloc (page-locked host memory),
// so that the H2D stage copies them straight to the device, and marks them
// Pinned. The old tensors are left to the garbage collector. On error the
// inputs are unchanged.
func (in *Inputs) Pin(alloc func(n int) (engine.HostBuffer, error)) error {
	if in.Pinned {
		return nil
	}
	tensors := make([]*tensor.Tensor, len(in.Tensors))
	bufs := make([]engine.HostBuffer, 0, len(in.Tensors))
	free := func() error {
		var errs []error
		for _, b := range bufs {
			errs = append(errs, b.Free())
		}
		return errors.Join(errs...)
	}
	for i, t := range in.Tensors {
		hb, err := alloc(len(t.Data))
		if err != nil {
			return errors.Join(fmt.Errorf("pinning request tensor %d (%d bytes): %w", i, len(t.Data), err), free())
		}
		bufs = append(bufs, hb)
		if len(hb.Bytes()) < len(t.Data) {
			return errors.Join(fmt.Errorf("pinned buffer of %d bytes for a %d-byte tensor", len(hb.Bytes()), len(t.Data)), free())
		}
		data := hb.Bytes()[:len(t.Data)]
		copy(data, t.Data)
		tensors[i] = &tensor.Tensor{DType: t.DType, Shape: t.Shape.Clone(), Data: data}
	}
	in.Tensors, in.bufs, in.Pinned = tensors, append(in.bufs, bufs...), true
	return nil
}

// For returns the tensor of request id (0 is the warmup).
func (in *Inputs) For(id int) *tensor.Tensor { return in.Tensors[id%len(in.Tensors)] }

// Generate makes the request tensors for count requests (warmup included),
// in parallel. Tensor i is drawn from its own generator seeded with (Seed,
// i), so the data does not depend on the number of cores.
func Generate(ctx context.Context, s Shape, count int) (*Inputs, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	if count < 1 {
		return nil, fmt.Errorf("generating inputs for %d requests: want at least 1", count)
	}
	k := s.Distinct
	if k == 0 {
		k = min(count, max(1, DefaultInputBudget/max(1, s.Bytes())))
	}
	in := &Inputs{Shape: s, Tensors: make([]*tensor.Tensor, k), Pinned: s.Alloc != nil}
	if s.Alloc != nil {
		for i := range k {
			hb, err := s.Alloc(s.Bytes())
			if err != nil {
				return nil, errors.Join(fmt.Errorf("allocating pinned memory for request tensor %d (%d bytes): %w", i, s.Bytes(), err), in.Close())
			}
			in.bufs = append(in.bufs, hb)
			if len(hb.Bytes()) < s.Bytes() {
				return nil, errors.Join(fmt.Errorf("pinned buffer of %d bytes for a %d-byte tensor", len(hb.Bytes()), s.Bytes()), in.Close())
			}
			in.Tensors[i] = &tensor.Tensor{DType: s.DType, Shape: tensor.Shape{s.BatchSize, s.Channels, s.Height, s.Width}, Data: hb.Bytes()[:s.Bytes()]}
		}
	}
	if s.Alloc == nil {
		// One block for all the tensors: one allocation the kernel can back
		// with huge pages (one tensor is often smaller than two of them).
		sz := s.Bytes()
		block := hugepage.Bytes(k * sz)
		for i := range k {
			in.Tensors[i] = &tensor.Tensor{DType: s.DType, Shape: tensor.Shape{s.BatchSize, s.Channels, s.Height, s.Width},
				Data: block[i*sz : (i+1)*sz : (i+1)*sz]}
		}
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(k, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for i := range next {
				fill(in.Tensors[i], s, uint64(i))
			}
		})
	}
	var err error
feed:
	for i := range k {
		select {
		case next <- i:
		case <-ctx.Done():
			err = ctx.Err()
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("generating inputs: %w", err), in.Close())
	}
	return in, nil
}

// fill draws tensor index's values.
func fill(t *tensor.Tensor, s Shape, index uint64) {
	rng := rand.New(rand.NewPCG(s.Seed, index^0x5851f42d4c957f2d))
	switch s.DType {
	case tensor.Float32:
		f := t.Float32s()
		for i := range f {
			f[i] = float32(rng.NormFloat64())
		}
	case tensor.Float16:
		d := t.Data
		for i := 0; i < len(d); i += 2 {
			h := tensor.Float32ToF16(float32(rng.NormFloat64()))
			d[i], d[i+1] = byte(h), byte(h>>8)
		}
	case tensor.Uint8:
		d := t.Data
		for i := 0; i < len(d); i += 8 {
			u := rng.Uint64()
			for j := 0; j < 8 && i+j < len(d); j++ {
				d[i+j] = byte(u >> (8 * j))
			}
		}
	}
}
