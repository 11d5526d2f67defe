package backend

import (
	"context"
	"errors"

	"goinfer/internal/engine"
	"goinfer/internal/preprocess"
	"goinfer/internal/tensor"
)

// HostDecoder is a Decoder for engines whose device buffers are host
// memory (the cpu engine): its Preprocessor writes the images straight
// into the pipeline's input buffer. The cpu engine's streams run work at
// once, so the decode is done when Decode returns.
type HostDecoder struct {
	Pre   preprocess.Preprocessor
	DType tensor.DType // the model's input dtype
}

// Decode implements Decoder.
func (d HostDecoder) Decode(images [][]byte, dst engine.Buffer, _ engine.Stream) ([]error, error) {
	hb, ok := dst.(interface{ Bytes() []byte })
	if !ok {
		return nil, errors.New("the device buffer is not host memory: this engine needs a device decoder")
	}
	return d.Pre.Preprocess(context.Background(), images, d.DType, hb.Bytes()), nil
}

// Close implements Decoder.
func (HostDecoder) Close() error { return nil }
