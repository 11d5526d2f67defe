package main

import (
	"fmt"
	"slices"

	"goinfer/internal/preprocess"
	"goinfer/internal/server"
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

// imageInput gives m the image input (--images): decoded and
// preprocessed on the host with ImageNet's eval transform at the crop
// size.
func (l *serveLoader) imageInput(m *server.Model) error {
	o := l.o
	if !o.images {
		return nil
	}
	if c, _, _, ok := m.Info.ImageInput(); !ok || c != 3 {
		l.log.Warn("image input off: the model does not take RGB images", "input", m.Info.Input().String())
		return nil
	}
	crop := l.plan.imageCrop
	spec := preprocess.ImageNet(crop, crop)
	if l.spec != nil {
		spec = l.spec.WithSize(crop, crop)
	}
	pre, err := preprocess.NewCPU(spec, preprocess.CPUOptions{Workers: o.decodeWorkers, MaxPixels: o.maxImagePixels})
	if err != nil {
		return err
	}
	m.Images = &server.Images{Preprocessor: pre}
	l.log.Info("image input on", "input", server.ImageInputName, "preprocessing", spec.String(), "decoder", "cpu")
	return nil
}
