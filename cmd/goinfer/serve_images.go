package main

import (
	"errors"
	"fmt"
	"slices"

	cu "goinfer/internal/cuda"
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

// imageInput gives m the image input (--images): ImageNet's eval
// transform at the crop size, on the GPU or the host (--image_decoder).
func (l *serveLoader) imageInput(m *server.Model) error {
	o := l.o
	if !o.images {
		return nil
	}
	if c, _, _, ok := m.Info.ImageInput(); !ok || c != 3 {
		l.log.Warn("image input off: the model does not take RGB images", "input", m.Info.Input().String())
		return nil
	}
	spec := preprocess.ImageNet().WithCrop(l.plan.imageCrop)
	if o.imageDecoder != "cpu" {
		pool, err := l.gpuDecoder(m, spec)
		switch {
		case err == nil:
			m.Images = &server.Images{Preprocessor: pool}
			l.closeImages = pool.Close
			l.log.Info("image input on", "input", server.ImageInputName, "resize", spec.Resize, "crop", spec.Crop,
				"decoder", "gpu", "nvjpeg_backends", pool.Backends(), "device", l.plan.devices[0])
			return nil
		case o.imageDecoder == "gpu":
			return fmt.Errorf("--image_decoder gpu: %w", err)
		}
		l.log.Info("images are decoded on the host", "why", err.Error())
	}
	pre, err := preprocess.NewCPU(spec, preprocess.CPUOptions{Workers: o.decodeWorkers, MaxPixels: o.maxImagePixels})
	if err != nil {
		return err
	}
	m.Images = &server.Images{Preprocessor: pre}
	l.log.Info("image input on", "input", server.ImageInputName, "resize", spec.Resize, "crop", spec.Crop, "decoder", "cpu")
	return nil
}

// gpuDecoder starts nvJPEG decoders on the model's first GPU.
func (l *serveLoader) gpuDecoder(m *server.Model, spec preprocess.Spec) (*imagegpu.Pool, error) {
	if m.Info.Engine != "cuda" {
		return nil, errors.New("the engine is not cuda")
	}
	dt := m.Info.Input().DType
	if dt != tensor.Float32 && dt != tensor.Float16 {
		return nil, fmt.Errorf("the GPU decoder writes fp32 or fp16, and the engine takes %s", dt)
	}
	libs, err := cu.Load()
	if err != nil {
		return nil, err
	}
	return imagegpu.NewPool(libs, spec, imagegpu.PoolOptions{Device: l.plan.devices[0], Workers: l.o.decodeWorkers,
		Out: dt, MaxPixels: l.o.maxImagePixels})
}
