package backend

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"goinfer/internal/engine"
	"goinfer/internal/tensor"
)

// hostIOModel is the async test model whose instances also run in place on
// host memory (engine.HostIO), or refuse to with ErrNotHostMapped.
type hostIOModel struct {
	*asyncModel
	unmapped bool
	inPlace  atomic.Int64 // ForwardHost calls that ran
}

func (m *hostIOModel) NewInstance(ctx context.Context) (engine.Instance, error) {
	inst, err := m.asyncModel.NewInstance(ctx)
	if err != nil {
		return nil, err
	}
	return &hostIOInstance{asyncInstance: inst.(*asyncInstance), m: m}, nil
}

type hostIOInstance struct {
	*asyncInstance
	m *hostIOModel
}

func (in *hostIOInstance) ForwardHost(src, dst []byte, n int) error {
	info := in.asyncInstance.m.info
	if n < 1 || n > info.MaxBatch || len(src) < n*info.InputBytes() || len(dst) < n*info.OutputBytes() {
		return fmt.Errorf("ForwardHost: batch %d, %d input and %d output bytes", n, len(src), len(dst))
	}
	if in.m.unmapped {
		return fmt.Errorf("test device: %w", engine.ErrNotHostMapped)
	}
	in.m.inPlace.Add(1)
	in.st.enqueue(func() {
		logits := expectedLogits(tensor.BytesF32(src[:n*info.InputBytes()]), n, info.OutputElems())
		copy(dst, tensor.F32Bytes(logits))
	})
	return nil
}

// TestInlineInPlace checks that a lone pinned request on an instance that
// can read and write host memory in place runs without its copies, that
// its logits are right (the device's jitter would show a logits read
// before the forward wrote them), and that requests it cannot take that
// way (not pinned, memory the device cannot address, or more than
// inPlaceMaxBytes) take the copies.
func TestInlineInPlace(t *testing.T) {
	const n = 10
	for _, c := range []struct {
		name     string
		pinned   bool
		unmapped bool
		want     bool // ran in place
	}{
		{"pinned", true, false, true},
		{"not_pinned", false, false, false},
		{"unmapped", true, true, false},
		{"large", true, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkNoLeak(t)
			h, w := tH, tW
			if c.name == "large" {
				h, w = 256, 256 // 768 KiB an image: batches of 2 and more are over the bound
			}
			m := &hostIOModel{asyncModel: newAsyncModel(tClasses, tC, h, w, tMaxBatch, 200*time.Microsecond), unmapped: c.unmapped}
			b := startReady(t, Config{CopyStreams: true}, loaderOf(m))
			rng := rand.New(rand.NewPCG(41, 42))
			reply := make(chan Response, 1)
			for i := range n {
				in := randInputSized(rng, 1+i%tMaxBatch, h, w)
				if err := b.Submit(Request{ID: uint64(i), Input: in, Reply: reply, Inline: true, Pinned: c.pinned}); err != nil {
					t.Fatal(err)
				}
				r := <-reply
				if r.Err != nil || !slices.Equal(r.Logits, expectedLogits(in.Float32s(), in.Shape[0], tClasses)) {
					t.Fatalf("request %d: err %v or wrong logits", i, r.Err)
				}
				if st := r.Stages; st.WorkerEnd.Before(st.WorkerStart) || r.DoneAt.Before(st.WorkerEnd) {
					t.Fatalf("request %d: stage times out of order: %+v, done %v", i, st, r.DoneAt)
				}
			}
			want := int64(0)
			switch {
			case c.name == "large":
				want = n / tMaxBatch // batch 1 only
				if n%tMaxBatch > 0 {
					want++
				}
			case c.want:
				want = n
			}
			if got := m.inPlace.Load(); got != want {
				t.Errorf("%d requests ran in place, want %d", got, want)
			}
			if got := inlineCount(b); got != n {
				t.Errorf("%d requests ran inline, want %d", got, n)
			}
			if err := b.Close(context.Background()); err != nil && !errors.Is(err, ErrClosed) {
				t.Fatal(err)
			}
		})
	}
}

// randInputSized is randInput for h x w images.
func randInputSized(rng *rand.Rand, n, h, w int) *tensor.Tensor {
	v := make([]float32, n*tC*h*w)
	for i := range v {
		v[i] = rng.Float32()*2 - 1
	}
	t, err := tensor.FromFloat32(tensor.Shape{n, tC, h, w}, v)
	if err != nil {
		panic(err)
	}
	return t
}
