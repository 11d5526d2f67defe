package batcher

import (
	"fmt"

	"goinfer/internal/engine"
	"goinfer/internal/tensor"
)

// converter copies whole images from a request's dtype into the batch
// buffer's dtype. Conversions happen during the one copy into the batch, so
// a request in another dtype costs no extra pass over its data.
type converter struct {
	src, dst tensor.DType
	c, hw    int // channels and pixels per channel
	// lut32 and lut16 map a raw uint8 pixel of channel c to its normalized
	// value (ImageNet mean and std), as float32 or as float16 bits.
	lut32 [][256]float32
	lut16 [][256]uint16
}

// newConverter returns how to turn src images into dst images of c channels
// of hw pixels, or an error naming the unsupported pair.
func newConverter(src, dst tensor.DType, c, hw int) (*converter, error) {
	cv := &converter{src: src, dst: dst, c: c, hw: hw}
	switch {
	case src == dst:
		return cv, nil
	case src == tensor.Float16 && dst == tensor.Float32, src == tensor.Float32 && dst == tensor.Float16:
		return cv, nil
	case src == tensor.Uint8 && (dst == tensor.Float32 || dst == tensor.Float16):
		if c != len(engine.ImageNetMean) {
			return nil, fmt.Errorf("UINT8 input is normalized with the ImageNet mean and std, which need %d channels, but the model has %d", len(engine.ImageNetMean), c)
		}
		cv.lut32 = make([][256]float32, c)
		for ch := range c {
			for x := range 256 {
				cv.lut32[ch][x] = (float32(x)/255 - engine.ImageNetMean[ch]) / engine.ImageNetStd[ch]
			}
		}
		if dst == tensor.Float16 {
			cv.lut16 = make([][256]uint16, c)
			for ch := range c {
				for x := range 256 {
					cv.lut16[ch][x] = tensor.Float32ToF16(cv.lut32[ch][x])
				}
			}
		}
		return cv, nil
	}
	return nil, fmt.Errorf("cannot feed %s input to a model that takes %s (send %s, or uint8 pixels)", src, dst, dst)
}

// images converts whole images: src holds k source images and dst has room
// for k destination images.
func (cv *converter) images(dst, src []byte) {
	switch {
	case cv.src == cv.dst:
		copy(dst, src)
	case cv.src == tensor.Float16 && cv.dst == tensor.Float32:
		d := tensor.BytesF32(dst)
		for i := range d {
			d[i] = tensor.F16ToFloat32(uint16(src[2*i]) | uint16(src[2*i+1])<<8)
		}
	case cv.src == tensor.Float32 && cv.dst == tensor.Float16:
		s := tensor.BytesF32(src)
		for i, v := range s {
			h := tensor.Float32ToF16(v)
			dst[2*i], dst[2*i+1] = byte(h), byte(h>>8)
		}
	case cv.src == tensor.Uint8 && cv.dst == tensor.Float32:
		d := tensor.BytesF32(dst)
		for off, plane := 0, 0; off < len(src); off, plane = off+cv.hw, plane+1 {
			lut := &cv.lut32[plane%cv.c]
			out := d[off : off+cv.hw]
			for i, x := range src[off : off+cv.hw] {
				out[i] = lut[x]
			}
		}
	case cv.src == tensor.Uint8 && cv.dst == tensor.Float16:
		for off, plane := 0, 0; off < len(src); off, plane = off+cv.hw, plane+1 {
			lut := &cv.lut16[plane%cv.c]
			out := dst[2*off : 2*(off+cv.hw)]
			for i, x := range src[off : off+cv.hw] {
				h := lut[x]
				out[2*i], out[2*i+1] = byte(h), byte(h>>8)
			}
		}
	}
}
