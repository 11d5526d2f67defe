package imagegpu

import (
	"errors"
	"fmt"

	"goinfer/internal/backend"
	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
	"goinfer/internal/preprocess"
)

// SpecFor turns a model's preprocessing into the kernel's: bilinear or
// bicubic resizes of the shorter side.
func SpecFor(s preprocess.Spec) (Spec, error) {
	if err := s.Validate(); err != nil {
		return Spec{}, err
	}
	f := s.Filter()
	if f != preprocess.Bilinear && f != preprocess.Bicubic {
		return Spec{}, fmt.Errorf("imagegpu: the kernel resizes with PIL's bilinear or bicubic filter; the model's preprocessing is %s", s)
	}
	return Spec{Resize: s.Resize, CropW: s.Width, CropH: s.Height, Mean: s.Mean, Std: s.Std, Bicubic: f == preprocess.Bicubic}, nil
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
