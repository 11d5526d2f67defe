package main

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"goinfer/internal/backend"
	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
	"goinfer/internal/imagegpu"
	"goinfer/internal/preprocess"
	"goinfer/internal/server"
	"goinfer/internal/tensor"
)

// pickImageCrop is --image_crop, resolved against the served sizes.
func (o *serveOptions) pickImageCrop(sizes []int) (int, error) {
	if !o.images {
		return 0, nil
	}
	if o.imageCrop == 0 {
		if slices.Contains(sizes, 224) {
			return 224, nil
		}
		return sizes[len(sizes)-1], nil
	}
	if !slices.Contains(sizes, o.imageCrop) {
		return 0, fmt.Errorf("--image_crop %d is not one of the served --image_size values %v", o.imageCrop, sizes)
	}
	return o.imageCrop, nil
}

// gpuImages resolves --image_decoder: whether the backend decodes encoded
// images on the GPU. auto picks the GPU on the cuda engine with an fp32 or
// fp16 input when nvJPEG loads, and says why not otherwise.
func (o *serveOptions) gpuImages(engineName string, dtype tensor.DType, log *slog.Logger) (bool, error) {
	if !o.images || o.imageDecoder == "cpu" {
		return false, nil
	}
	var why error
	switch {
	case engineName != "cuda":
		why = fmt.Errorf("the %s engine has no GPU", engineName)
	case dtype != tensor.Float32 && dtype != tensor.Float16:
		why = fmt.Errorf("the GPU decoder writes fp32 or fp16 input, and --input_dtype is %s", dtype)
	default:
		if _, _, err := cu.OpenJPEG(); err != nil {
			why = fmt.Errorf("nvJPEG: %w", err)
		}
	}
	switch {
	case why == nil:
		return true, nil
	case o.imageDecoder == "gpu":
		return false, fmt.Errorf("--image_decoder gpu: %w", why)
	}
	log.Info("encoded images are decoded on the host", "why", why.Error())
	return false, nil
}

// imageSpec is the preprocessing of encoded images: the model's own (a
// general graph's) or ImageNet's, at the --image_crop size.
func (l *serveLoader) imageSpec() preprocess.Spec {
	crop := l.plan.imageCrop
	if l.spec != nil {
		return l.spec.WithSize(crop, crop)
	}
	return preprocess.ImageNet(crop, crop)
}

// decoders is the backend's decoder factory for the lane of image size
// size: nvJPEG on each pipeline's copy stream for the --image_crop lane
// when the GPU decodes, else none. A preprocessing the kernel cannot do
// sends auto back to the host.
func (l *serveLoader) decoders(size int) func(int, engine.Device, engine.Info) (backend.Decoder, error) {
	if !l.gpuImages || size != l.plan.imageCrop {
		return nil
	}
	spec, err := imagegpu.SpecFor(l.imageSpec())
	if err != nil && l.o.imageDecoder != "gpu" {
		l.log.Info("encoded images are decoded on the host", "why", err.Error())
		l.gpuImages = false
		return nil
	}
	return func(device int, _ engine.Device, info engine.Info) (backend.Decoder, error) {
		if err != nil {
			return nil, fmt.Errorf("--image_decoder gpu: %w", err)
		}
		libs, err := cu.Load()
		if err != nil {
			return nil, err
		}
		return imagegpu.New(libs, imagegpu.Options{Device: l.plan.devices[device], MaxBatch: l.o.maxBatch, Spec: spec,
			Out: info.Input().DType, MaxPixels: l.o.maxImagePixels})
	}
}

// postprocessors rank classifications on the GPU on the cuda engine:
// softmax and top-k after the forward, so that only the k classes of each
// image come back. Elsewhere the batcher ranks the logits.
func (l *serveLoader) postprocessors() func(int, engine.Device, engine.Info) (backend.Postprocessor, error) {
	if l.eng.Name() != "cuda" {
		return nil
	}
	return func(device int, _ engine.Device, _ engine.Info) (backend.Postprocessor, error) {
		libs, err := cu.Load()
		if err != nil {
			return nil, err
		}
		return imagegpu.NewRanker(libs, l.plan.devices[device])
	}
}

// imageInput gives m the image input (--images): ImageNet's eval
// transform at the crop size, decoded by the backend on the GPU or by the
// server on the host (--image_decoder).
func (l *serveLoader) imageInput(m *server.Model) error {
	o := l.o
	if !o.images {
		return nil
	}
	if c, _, _, ok := m.Info.ImageInput(); !ok || c != 3 {
		if l.gpuImages {
			return errors.New("--image_decoder gpu: the model does not take RGB images")
		}
		l.log.Warn("image input off: the model does not take RGB images", "input", m.Info.Input().String())
		return nil
	}
	spec := l.imageSpec()
	if l.gpuImages {
		m.Images = &server.Images{Spec: spec}
		l.log.Info("image input on", "input", imageInputName(m), "preprocessing", spec.String(), "decoder", "gpu")
		return nil
	}
	pre, err := preprocess.NewCPU(spec, preprocess.CPUOptions{Workers: o.decodeWorkers, MaxPixels: o.maxImagePixels})
	if err != nil {
		return err
	}
	m.Images = &server.Images{Preprocessor: pre}
	l.log.Info("image input on", "input", imageInputName(m), "preprocessing", spec.String(), "decoder", "cpu")
	return nil
}

// imageInputName is the name the server gives m's image input.
func imageInputName(m *server.Model) string {
	if m.Info.Input().Name == server.ImageInputName {
		return server.AltImageInputName
	}
	return server.ImageInputName
}
