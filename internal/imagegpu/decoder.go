package imagegpu

import (
	"errors"
	"fmt"

	"goinfer/internal/backend"
	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
	"goinfer/internal/preprocess"
)

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
