package backend

import (
	"encoding/binary"
	"errors"
	"math"

	"goinfer/internal/engine"
	"goinfer/internal/tensor"
	"goinfer/internal/topk"
)

// HostPostprocessor is a Postprocessor for engines whose device buffers
// are host memory (the cpu engine): package topk ranks the logits in
// place. The cpu engine's streams run work at once, so the ranking is done
// when TopK returns.
type HostPostprocessor struct{}

// TopK implements Postprocessor.
func (HostPostprocessor) TopK(logits engine.Buffer, rows, classes, k int, softmax bool, dst engine.Buffer, _ engine.Stream) error {
	lb, ok1 := logits.(interface{ Bytes() []byte })
	db, ok2 := dst.(interface{ Bytes() []byte })
	if !ok1 || !ok2 {
		return errors.New("the device buffers are not host memory: this engine needs a device postprocessor")
	}
	top := make([]topk.Class, rows*k)
	topk.BestRows(top, tensor.BytesF32(lb.Bytes()[:4*rows*classes]), classes, k, softmax)
	b := db.Bytes()
	le := binary.LittleEndian
	for i, c := range top {
		le.PutUint32(b[TopPairBytes*i:], uint32(int32(c.Index)))
		le.PutUint32(b[TopPairBytes*i+4:], math.Float32bits(c.Value))
	}
	return nil
}

// Close implements Postprocessor.
func (HostPostprocessor) Close() error { return nil }
