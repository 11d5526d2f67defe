package cpu

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"goinfer/internal/engine"
	"goinfer/internal/engine/cpu/irexec"
	"goinfer/internal/tensor"
)

var _ engine.Profiler = (*graphInstance)(nil)

// ProfileLayers implements engine.Profiler for general graphs: iters
// forwards of n images the way Forward runs them (the whole-batch plan on
// the instance's pool, or the Split of chunks where the batch is split),
// each planned step timed with the wall clock, and each step's mean per
// forward. A split batch's steps run on every worker at once: a step's
// time is the sum over the chunks divided by the workers; the steps of
// the model's tail, run once over the batch after the chunks, follow. The input is
// seeded noise (the models' work does not depend on it).
func (in *graphInstance) ProfileLayers(n, iters int) ([]engine.LayerTime, error) {
	if in.closed {
		return nil, errors.New("cpu: ProfileLayers on a closed instance")
	}
	info := in.m.info
	if n < 1 || n > info.MaxBatch || iters < 1 {
		return nil, fmt.Errorf("cpu: profile of batch %d, %d forwards: batch must be in [1, MaxBatch=%d], forwards at least 1", n, iters, info.MaxBatch)
	}
	src := make([]byte, n*info.InputBytes())
	r := rand.New(rand.NewPCG(uint64(n), 1))
	for i, f := 0, tensor.BytesF32(src); i < len(f); i++ {
		f[i] = float32(r.NormFloat64())
	}
	outs := make([][]byte, len(info.Outputs))
	for i, o := range info.Outputs {
		outs[i] = make([]byte, n*o.Bytes())
	}
	ins := [][]byte{src}
	ctx := context.Background()
	var steps []irexec.StepTime
	if c := in.m.chunk(n); c > 0 {
		s, err := in.split(c)
		if err != nil {
			return nil, err
		}
		tail, mid, err := in.tail(n)
		if err != nil {
			return nil, err
		}
		souts := outs
		if tail != nil {
			souts = mid
		}
		// One untimed forward first: the first touches every page.
		if err := s.Run(ctx, ins, souts, n); err != nil {
			return nil, fmt.Errorf("cpu: %w", err)
		}
		if steps, err = s.Profile(ctx, ins, souts, n, iters); err != nil {
			return nil, fmt.Errorf("cpu: %w", err)
		}
		if tail != nil {
			if err := tail.Run(ctx, mid, outs); err != nil {
				return nil, fmt.Errorf("cpu: %w", err)
			}
			ts, err := tail.Profile(ctx, mid, outs, iters)
			if err != nil {
				return nil, fmt.Errorf("cpu: %w", err)
			}
			steps = append(steps, ts...)
		}
	} else {
		x, err := in.exec(n)
		if err != nil {
			return nil, err
		}
		if err := x.Run(ctx, ins, outs); err != nil {
			return nil, fmt.Errorf("cpu: %w", err)
		}
		if steps, err = x.Profile(ctx, ins, outs, iters); err != nil {
			return nil, fmt.Errorf("cpu: %w", err)
		}
	}
	res := make([]engine.LayerTime, len(steps))
	for i, s := range steps {
		res[i] = engine.LayerTime{Name: s.Names, Kind: s.Ops, Algo: s.Step, Time: s.Time}
	}
	return res, nil
}
