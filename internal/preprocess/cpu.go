package preprocess

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"goinfer/internal/imageproc"
	"goinfer/internal/tensor"
)

// Preprocessor decodes and preprocesses batches of encoded images.
// Implementations are safe for concurrent use.
type Preprocessor interface {
	// Spec is the transform applied; images come out Crop x Crop.
	Spec() Spec
	// Preprocess writes image i, as 3 x Crop x Crop values of dtype dt,
	// into dst[i*size:(i+1)*size] (size = 3*Crop*Crop*dt.Size()). It
	// returns one error per image, nil for those done; a failed image's
	// slot is left as it was. An error of the whole call (ctx ended, a
	// dtype not supported) comes back in every slot not done.
	Preprocess(ctx context.Context, images [][]byte, dt tensor.DType, dst []byte) []error
}

// Errors an image can fail with, besides its decoder's own.
var (
	// ErrEmpty is an element with no bytes.
	ErrEmpty = errors.New("the image is empty (0 bytes)")
	// ErrTooManyPixels is an image whose header declares more pixels than
	// the limit (a decompression bomb, or a photo too large to serve).
	ErrTooManyPixels = imageproc.ErrTooManyPixels
)

// CPUOptions configure a CPU preprocessor.
type CPUOptions struct {
	// Workers bounds the images decoded at once, over all calls (default
	// GOMAXPROCS).
	Workers int
	// MaxPixels bounds an image's width x height, checked on its header
	// before the decoder allocates (default imageproc.MaxPixels).
	MaxPixels int
}

// CPU preprocesses on the host with package imageproc: Go's JPEG and PNG
// decoders (with libjpeg's chroma upsampling), PIL's antialiased bilinear
// or bicubic resize, float32 normalisation as torchvision computes it.
type CPU struct {
	spec      Spec
	filter    imageproc.Filter
	maxPixels int
	sem       chan struct{}
	// lut32 and lut16 map a pixel of each channel to its normalized value,
	// as torchvision's ToTensor then Normalize compute it in float32.
	lut32 [3][256]float32
	lut16 [3][256]uint16
}

// NewCPU returns a CPU preprocessor for spec, which must describe RGB
// images resized bilinearly or bicubically (the PIL filters imageproc
// implements).
func NewCPU(spec Spec, opts CPUOptions) (*CPU, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	var filter imageproc.Filter
	switch spec.Filter() {
	case Bilinear:
		filter = imageproc.Bilinear
	case Bicubic:
		filter = imageproc.Bicubic
	default:
		return nil, fmt.Errorf("preprocess: the CPU decoder resizes with PIL's bilinear or bicubic filter; the model's preprocessing asks for %s", spec.Filter())
	}
	if opts.Workers <= 0 {
		opts.Workers = runtime.GOMAXPROCS(0)
	}
	if opts.MaxPixels <= 0 {
		opts.MaxPixels = imageproc.MaxPixels
	}
	p := &CPU{spec: spec, filter: filter, maxPixels: opts.MaxPixels, sem: make(chan struct{}, opts.Workers)}
	mean, std := spec.Mean, spec.Std
	for c := range 3 {
		for x := range 256 {
			v := (float32(x)/255 - mean[c]) / std[c]
			p.lut32[c][x], p.lut16[c][x] = v, tensor.Float32ToF16(v)
		}
	}
	return p, nil
}

// Spec implements Preprocessor.
func (p *CPU) Spec() Spec { return p.spec }

// Preprocess implements Preprocessor.
func (p *CPU) Preprocess(ctx context.Context, images [][]byte, dt tensor.DType, dst []byte) []error {
	errs := make([]error, len(images))
	size := 3 * p.spec.Height * p.spec.Width * dt.Size()
	var whole error
	switch {
	case dt != tensor.Float32 && dt != tensor.Float16 && dt != tensor.Uint8:
		whole = fmt.Errorf("preprocess: input dtype %s is not supported (want float32, float16 or uint8)", dt)
	case len(dst) < len(images)*size:
		whole = fmt.Errorf("preprocess: %d bytes of room for %d images of %d bytes", len(dst), len(images), size)
	}
	if whole != nil {
		for i := range errs {
			errs[i] = whole
		}
		return errs
	}
	done := make(chan struct{}, len(images))
	started := 0
	for i, img := range images {
		if !p.acquire(ctx) {
			for j := i; j < len(images); j++ {
				errs[j] = ctx.Err()
			}
			break
		}
		started++
		go func() {
			defer func() { <-p.sem; done <- struct{}{} }()
			errs[i] = p.one(img, dt, dst[i*size:(i+1)*size])
		}()
	}
	for range started {
		<-done
	}
	return errs
}

// acquire takes a worker slot, or reports false when ctx ends first.
func (p *CPU) acquire(ctx context.Context) bool {
	select {
	case p.sem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// one decodes and preprocesses one image into out.
func (p *CPU) one(img []byte, dt tensor.DType, out []byte) error {
	if len(img) == 0 {
		return ErrEmpty
	}
	m, err := imageproc.DecodeBytes(img, p.maxPixels)
	if err != nil {
		return err
	}
	s := p.spec
	if s.Resize > 0 {
		w, h := imageproc.ResizedSize(m.W, m.H, s.Resize)
		m = m.ResizeCrop(w, h, p.filter, s.Width, s.Height)
	} else {
		m = m.CenterCrop(s.Width, s.Height)
	}
	p.write(m, dt, out)
	return nil
}

// write stores an HWC RGB image as CHW planes of dt: raw for uint8 (the
// engine normalizes), else (x/255 - mean)/std as torchvision computes it.
func (p *CPU) write(m *imageproc.RGB, dt tensor.DType, out []byte) {
	plane := m.W * m.H
	switch dt {
	case tensor.Uint8:
		for i := range plane {
			out[i], out[plane+i], out[2*plane+i] = m.Pix[3*i], m.Pix[3*i+1], m.Pix[3*i+2]
		}
	case tensor.Float32:
		f := tensor.BytesF32(out)
		for c := range 3 {
			lut := &p.lut32[c]
			dst := f[c*plane : (c+1)*plane]
			for i := range dst {
				dst[i] = lut[m.Pix[3*i+c]]
			}
		}
	case tensor.Float16:
		for c := range 3 {
			lut := &p.lut16[c]
			dst := out[2*c*plane : 2*(c+1)*plane]
			for i := range plane {
				v := lut[m.Pix[3*i+c]]
				dst[2*i], dst[2*i+1] = byte(v), byte(v>>8)
			}
		}
	}
}
