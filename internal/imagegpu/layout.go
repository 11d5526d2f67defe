package imagegpu

import (
	"encoding/binary"
	"math"

	"goinfer/internal/imageproc"
	"goinfer/internal/tensor"
)

// The kernels' descriptor sizes (sizeof in images.cu).
const (
	descSize    = 48 // ImageDesc
	yccDescSize = 72 // YccDesc
)

// axisTable appends to b the preprocess kernel's taps for the crop of one
// axis: for each of the crop positions off..off+crop-1 of an axis resized
// to `out` pixels with taps t, the first source pixel, the tap count and
// t.KSize weights (int32 each). Positions outside the resized axis
// (torchvision pads the crop with zeros there) get no taps. It returns b
// and the entry stride in int32s.
func axisTable(b []byte, t imageproc.Taps, out, off, crop int) ([]byte, int) {
	stride := t.KSize + 2
	le := binary.LittleEndian
	for o := off; o < off+crop; o++ {
		first, n := 0, 0
		if o >= 0 && o < out {
			first, n = t.Bounds[2*o], t.Bounds[2*o+1]
		}
		b = le.AppendUint32(b, uint32(int32(first)))
		b = le.AppendUint32(b, uint32(int32(n)))
		for i := 0; i < t.KSize; i++ {
			var k int32
			if i < n {
				k = t.K[o*t.KSize+i]
			}
			b = le.AppendUint32(b, uint32(k))
		}
	}
	return b, stride
}

// cropOffset is where a crop of `crop` pixels starts on an axis of `size`
// resized pixels, as torchvision's CenterCrop: round half to even of
// (size-crop)/2, or, when the crop is larger, minus the zero padding it
// puts before the image, floor((crop-size)/2).
func cropOffset(size, crop int) int {
	if crop > size {
		return -((crop - size) / 2)
	}
	return int(math.RoundToEven(float64(size-crop) / 2))
}

// normLUTs are a channel's 256 normalised values, (x/255 - mean)/std in
// float32 as torchvision's ToTensor and Normalize compute them (and the
// CPU path), for the kernel's float32 and float16 outputs.
func normLUTs(mean, std [3]float32) (f32 []byte, f16 []byte) {
	le := binary.LittleEndian
	for c := range 3 {
		for x := range 256 {
			v := (float32(x)/255 - mean[c]) / std[c]
			f32 = le.AppendUint32(f32, math.Float32bits(v))
			f16 = le.AppendUint16(f16, tensor.Float32ToF16(v))
		}
	}
	return f32, f16
}

// tapKey identifies an axis' taps: resized from in to out pixels.
type tapKey struct{ in, out int }

// tapCache keeps the taps of the sizes seen: a service sees few distinct
// image sizes, and computing taps costs more than using them.
type tapCache struct {
	filter imageproc.Filter
	m      map[tapKey]imageproc.Taps
}

func (c *tapCache) get(in, out int) imageproc.Taps {
	k := tapKey{in, out}
	if t, ok := c.m[k]; ok {
		return t
	}
	if c.m == nil || len(c.m) >= 1024 {
		c.m = map[tapKey]imageproc.Taps{}
	}
	t := imageproc.ResizeTaps(in, out, c.filter)
	c.m[k] = t
	return t
}

// batchMeta lays out a batch's kernel inputs in one buffer that the
// device sees at metaBase: len(plans) ImageDescs, then a YccDesc for each
// image nvJPEG decoded to YCbCr, then the tap tables (one per axis size
// and crop, shared by the images that have it). scratch is the device
// address of the decode scratch the plans' offsets are in. It returns the
// buffer (dst's storage, grown) and the number of YccDescs.
func (p *Preprocessor) batchMeta(dst []byte, plans []plan, scratch, metaBase uint64) ([]byte, int) {
	sp := p.opts.Spec
	le := binary.LittleEndian
	nycc := 0
	for _, pl := range plans {
		if pl.route != routeFailed && pl.ycc != yccNone {
			nycc++
		}
	}
	head := len(plans)*descSize + nycc*yccDescSize
	meta := append(dst[:0], make([]byte, head)...)
	type table struct{ at, stride int }
	tables := map[[4]int]table{}
	axis := func(in, out, crop int) table {
		off := cropOffset(out, crop)
		k := [4]int{in, out, off, crop}
		if t, ok := tables[k]; ok {
			return t
		}
		t := table{at: len(meta)}
		meta, t.stride = axisTable(meta, p.taps.get(in, out), out, off, crop)
		tables[k] = t
		return t
	}
	y := head - nycc*yccDescSize
	for i, pl := range plans {
		if pl.route == routeFailed || pl.w == 0 {
			continue // valid 0: the kernel writes the normalised zero
		}
		rw, rh := imageproc.ResizedSize(pl.w, pl.h, sp.Resize)
		tx, ty := axis(pl.w, rw, sp.CropW), axis(pl.h, rh, sp.CropH)
		b := meta[i*descSize : (i+1)*descSize]
		le.PutUint64(b[0:], scratch+uint64(pl.off))
		le.PutUint64(b[8:], uint64(pl.pitch*pl.h))
		le.PutUint64(b[16:], metaBase+uint64(tx.at))
		le.PutUint64(b[24:], metaBase+uint64(ty.at))
		le.PutUint32(b[32:], uint32(pl.pitch))
		le.PutUint32(b[36:], uint32(tx.stride))
		le.PutUint32(b[40:], uint32(ty.stride))
		le.PutUint32(b[44:], 1)
		if pl.ycc == yccNone {
			continue
		}
		c := meta[y : y+yccDescSize]
		y += yccDescSize
		yBase := scratch + uint64(pl.yoff)
		cbBase := yBase + uint64(pl.pitch*pl.h)
		le.PutUint64(c[0:], yBase)
		le.PutUint64(c[8:], cbBase)
		le.PutUint64(c[16:], cbBase+uint64(pl.cpitch*pl.ch))
		le.PutUint64(c[24:], scratch+uint64(pl.off))
		le.PutUint64(c[32:], uint64(pl.pitch*pl.h))
		for k, v := range []int{pl.pitch, pl.cpitch, pl.pitch, pl.w, pl.h, pl.cw, pl.ch, pl.ycc} {
			le.PutUint32(c[40+4*k:], uint32(v))
		}
	}
	return meta, nycc
}
