// Package imagegpu turns encoded images into a model's input batch on the
// GPU: JPEGs are decoded by nvJPEG (the hardware JPEG engines where the GPU
// has them, nvJPEG's GPU decoder for what they refuse), images nvJPEG
// cannot take (PNG, CMYK JPEGs, anything else) by Go on the CPU, and one
// kernel then resizes (antialiased bilinear, as torchvision), center-crops,
// normalises and stores every image of the batch into the input slot.
//
// A corrupt or oversized image fails alone: Run reports an error for its
// index and leaves its slot filled with zeros-after-normalisation, so the
// rest of the batch is answered.
package imagegpu

import (
	"bytes"
	"embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"

	cu "goinfer/internal/cuda"
	"goinfer/internal/imageproc"
	"goinfer/internal/tensor"
)

// kernelFiles hold tools/kernels/images.cu compiled by
// tools/kernels/build.sh: images.ptx (clang) always, images.fatbin (nvcc,
// machine code: no JIT compile at start) when it was built on a machine
// with the CUDA toolkit.
//
//go:embed kernels
var kernelFiles embed.FS

// loadModule loads the fatbin when there is one and the driver takes it,
// else the PTX.
func loadModule(d *cu.Driver) (cu.Module, error) {
	var ferr error
	if fat, err := kernelFiles.ReadFile("kernels/images.fatbin"); err == nil {
		m, err := d.ModuleLoad(fat)
		if err == nil {
			return m, nil
		}
		ferr = err
	}
	ptx, err := kernelFiles.ReadFile("kernels/images.ptx")
	if err != nil {
		return 0, fmt.Errorf("images.ptx is not embedded: %w", err)
	}
	m, err := d.ModuleLoad(ptx)
	if err != nil {
		return 0, errors.Join(ferr, err)
	}
	return m, nil
}

// Spec is the preprocessing of a model's eval transform.
type Spec struct {
	Resize       int // shorter side after resizing
	CropW, CropH int
	Mean, Std    [3]float32
}

// ImageNet is torchvision's ImageNet eval transform: Resize(256),
// CenterCrop(224), ImageNet mean and std.
var ImageNet = Spec{Resize: 256, CropW: 224, CropH: 224, Mean: imageproc.Mean, Std: imageproc.Std}

// Options configure a Preprocessor.
type Options struct {
	Device   int
	MaxBatch int
	Spec     Spec
	// Out is the dtype of the model input: Float32 or Float16 (NCHW).
	Out tensor.DType
	// MaxPixels bounds an image's width x height, checked on its header
	// before anything is allocated (0: imageproc.MaxPixels).
	MaxPixels int
	// NoHardware skips the hardware JPEG decoder even where it exists.
	NoHardware bool
}

// Preprocessor is one decoding pipeline: nvJPEG handles and state, the
// preprocessing kernel, and device and pinned scratch that grow to the
// largest batch seen. It is not safe for concurrent use.
type Preprocessor struct {
	opts Options
	rt   *cu.Runtime
	drv  *cu.Driver
	jpg  *cu.JPEG

	dec     [2]decoder // hardware (may be absent), then GPU
	mod     cu.Module
	fn      cu.Function
	affine  cu.DevPtr // scale[3], shift[3]
	descs   cu.DevPtr
	hdescs  []byte // pinned
	scratch cu.DevPtr
	scrSize int64
	staging []byte // pinned, for CPU-decoded planes
	done    cu.Event
	pending bool
	args    cu.KernelArgs
}

// decoder is one nvJPEG backend's handle and state.
type decoder struct {
	backend cu.JPEGBackend
	h       cu.JPEGHandle
	st      cu.JPEGState
	ok      bool
}

// descSize is sizeof(ImageDesc) in images.cu.
const descSize = 48

// New loads nvJPEG and the kernel on opts.Device.
func New(libs *cu.Libs, opts Options) (*Preprocessor, error) {
	if libs == nil || libs.Runtime == nil || libs.Driver == nil {
		return nil, errors.New("imagegpu: the CUDA runtime and driver are needed")
	}
	if opts.MaxBatch < 1 {
		return nil, fmt.Errorf("imagegpu: MaxBatch %d must be at least 1", opts.MaxBatch)
	}
	s := opts.Spec
	if s.Resize < 1 || s.CropW < 1 || s.CropH < 1 || s.CropW > s.Resize && s.CropH > s.Resize {
		return nil, fmt.Errorf("imagegpu: bad spec %+v", s)
	}
	if opts.MaxPixels <= 0 {
		opts.MaxPixels = imageproc.MaxPixels
	}
	var kernel string
	switch opts.Out {
	case tensor.Float32:
		kernel = "preprocess_f32"
	case tensor.Float16:
		kernel = "preprocess_f16"
	default:
		return nil, fmt.Errorf("imagegpu: output dtype %s is not supported (want float32 or float16)", opts.Out)
	}
	jpg, _, err := cu.OpenJPEG()
	if err != nil {
		return nil, fmt.Errorf("imagegpu: %w", err)
	}
	p := &Preprocessor{opts: opts, rt: libs.Runtime, drv: libs.Driver, jpg: jpg}
	defer runtime.UnlockOSThread()
	if err := p.enter(); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			p.Close()
		}
	}()
	backends := []cu.JPEGBackend{cu.JPEGBackendHardware, cu.JPEGBackendGPUHybrid}
	for i, b := range backends {
		if b == cu.JPEGBackendHardware && opts.NoHardware {
			continue
		}
		d, err := newDecoder(jpg, b)
		if err != nil {
			if b == cu.JPEGBackendHardware {
				continue // no JPEG engines on this GPU
			}
			return nil, fmt.Errorf("imagegpu: %w", err)
		}
		p.dec[i] = d
	}
	if p.mod, err = loadModule(p.drv); err != nil {
		return nil, fmt.Errorf("imagegpu: loading the kernels: %w", err)
	}
	if p.fn, err = p.drv.ModuleFunction(p.mod, kernel); err != nil {
		return nil, err
	}
	var aff [6]float32
	for c := 0; c < 3; c++ {
		aff[c] = 1 / (255 * s.Std[c])
		aff[3+c] = -s.Mean[c] / s.Std[c]
	}
	if p.affine, err = p.rt.Malloc(24); err != nil {
		return nil, err
	}
	if err := p.rt.MemcpyHtoD(p.affine, tensor.F32Bytes(aff[:])); err != nil {
		return nil, err
	}
	if p.descs, err = p.rt.Malloc(int64(opts.MaxBatch * descSize)); err != nil {
		return nil, err
	}
	if p.hdescs, err = p.rt.HostAlloc(opts.MaxBatch * descSize); err != nil {
		return nil, err
	}
	if p.done, err = p.rt.EventCreate(false); err != nil {
		return nil, err
	}
	ok = true
	return p, nil
}

func newDecoder(j *cu.JPEG, b cu.JPEGBackend) (decoder, error) {
	d := decoder{backend: b}
	var err error
	if d.h, err = j.Create(b); err != nil {
		return d, err
	}
	if d.st, err = j.NewState(d.h); err != nil {
		j.Destroy(d.h)
		return d, err
	}
	d.ok = true
	return d, nil
}

// enter pins the goroutine to its OS thread and makes the device current
// there: driver calls (module loads, launches) act on the calling thread's
// context. The caller unlocks the thread when done, even on error.
func (p *Preprocessor) enter() error {
	runtime.LockOSThread()
	return p.rt.SetDevice(p.opts.Device)
}

// Backends names the nvJPEG backends in use, for reports.
func (p *Preprocessor) Backends() []string {
	var out []string
	for _, d := range p.dec {
		if d.ok {
			out = append(out, d.backend.String())
		}
	}
	return out
}

// Close frees everything. Work enqueued by Run must be finished.
func (p *Preprocessor) Close() error {
	defer runtime.UnlockOSThread()
	errs := []error{p.enter()}
	for i := range p.dec {
		d := &p.dec[i]
		if d.ok {
			errs = append(errs, p.jpg.DestroyState(d.st), p.jpg.Destroy(d.h))
			d.ok = false
		}
	}
	if p.mod != 0 {
		errs = append(errs, p.drv.ModuleUnload(p.mod))
		p.mod = 0
	}
	for _, ptr := range []*cu.DevPtr{&p.affine, &p.descs, &p.scratch} {
		if *ptr != 0 {
			errs = append(errs, p.rt.Free(*ptr))
			*ptr = 0
		}
	}
	for _, b := range []*[]byte{&p.hdescs, &p.staging} {
		if *b != nil {
			errs = append(errs, p.rt.FreeHost(*b))
			*b = nil
		}
	}
	if p.done != 0 {
		errs = append(errs, p.rt.EventDestroy(p.done))
		p.done = 0
	}
	return errors.Join(errs...)
}

// route says how one image of a batch is decoded.
type route uint8

const (
	routeFailed route = iota
	routeHardware
	routeGPU
	routeCPU
)

// plan is one image's decode: its route, size and place in scratch.
type plan struct {
	route route
	w, h  int
	pitch int
	off   int64 // of plane 0 in scratch
	rgb   *imageproc.RGB
}

// Run decodes images and writes the preprocessed batch (len(images)
// images, NCHW of opts.Out) to dst on stream s. It returns once the work is
// enqueued; dst is ready when s passes this point. errs has one entry per
// image: nil, or why that image failed (its slot then holds a constant
// image). err is a failure of the whole batch (a CUDA error).
func (p *Preprocessor) Run(images [][]byte, dst cu.DevPtr, s cu.Stream) (errs []error, err error) {
	n := len(images)
	if n == 0 {
		return nil, nil
	}
	if n > p.opts.MaxBatch {
		return nil, fmt.Errorf("imagegpu: batch of %d images is over MaxBatch %d", n, p.opts.MaxBatch)
	}
	defer runtime.UnlockOSThread()
	if err := p.enter(); err != nil {
		return nil, err
	}
	if p.pending {
		// The host-side descriptors and staging of the last batch are in
		// use until its copies have run.
		if err := p.rt.EventSynchronize(p.done); err != nil {
			return nil, err
		}
		p.pending = false
	}
	errs = make([]error, n)
	plans := make([]plan, n)
	var size int64
	var cpu []int
	for i, img := range images {
		pl, err := p.plan(img)
		if err != nil {
			errs[i] = err
			continue
		}
		plans[i] = pl
		if pl.route == routeCPU {
			cpu = append(cpu, i)
		}
	}
	p.decodeCPU(images, plans, errs, cpu)
	for i := range plans {
		pl := plans[i]
		if errs[i] != nil {
			// Whatever route it had, nothing of it is uploaded or decoded.
			plans[i] = plan{route: routeFailed}
			continue
		}
		pl.pitch = (pl.w + 3) &^ 3
		pl.off = size
		size += int64(3 * pl.pitch * pl.h)
		plans[i] = pl
	}
	if err := p.growScratch(size); err != nil {
		return nil, err
	}
	if err := p.uploadCPU(plans, s); err != nil {
		return nil, err
	}
	for ri, r := range []route{routeHardware, routeGPU} {
		if err := p.decodeGPU(ri, r, images, plans, errs, s); err != nil {
			return nil, err
		}
	}
	return errs, p.launch(plans, dst, s)
}

// plan reads an image's header and picks its route, refusing oversized
// images before anything is allocated: the GPU JPEG engines for baseline
// JPEGs they take, nvJPEG's GPU decoder for other JPEGs it can read
// (progressive), Go for the rest (PNG, CMYK).
func (p *Preprocessor) plan(img []byte) (plan, error) {
	if len(img) == 0 {
		return plan{}, errors.New("the image is empty")
	}
	h, err := parseJPEGHeader(img)
	if err != nil || h.components == 4 {
		// Not a JPEG nvJPEG reads: Go decodes it, or says why it cannot.
		return plan{route: routeCPU}, nil
	}
	if err := p.checkSize(h.width, h.height); err != nil {
		return plan{}, err
	}
	pl := plan{route: routeGPU, w: h.width, h: h.height}
	if p.dec[0].ok && h.hardwareOK() {
		pl.route = routeHardware
	}
	return pl, nil
}

func (p *Preprocessor) checkSize(w, h int) error {
	if w <= 0 || h <= 0 || int64(w)*int64(h) > int64(p.opts.MaxPixels) {
		return fmt.Errorf("image is %dx%d pixels: want 1 to %d pixels", w, h, p.opts.MaxPixels)
	}
	return nil
}

// decodeCPU decodes the images routed to Go, in parallel (Go's decoders
// are far slower than nvJPEG); imageproc.Decode checks the size on the
// header before it allocates.
func (p *Preprocessor) decodeCPU(images [][]byte, plans []plan, errs []error, idx []int) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for _, i := range idx {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			m, err := imageproc.Decode(bytes.NewReader(images[i]))
			if err == nil {
				err = p.checkSize(m.W, m.H)
			}
			if err != nil {
				errs[i] = err
				return
			}
			plans[i] = plan{route: routeCPU, w: m.W, h: m.H, rgb: m}
		}()
	}
	wg.Wait()
}

func (p *Preprocessor) growScratch(size int64) error {
	if size <= p.scrSize {
		return nil
	}
	size = max(size, p.scrSize*3/2)
	if p.scratch != 0 {
		// The previous batch's kernel may still read it.
		if err := p.rt.EventSynchronize(p.done); err != nil {
			return err
		}
		if err := p.rt.Free(p.scratch); err != nil {
			return err
		}
		p.scratch, p.scrSize = 0, 0
	}
	ptr, err := p.rt.Malloc(size)
	if err != nil {
		return fmt.Errorf("imagegpu: %d bytes of decode scratch: %w", size, err)
	}
	p.scratch, p.scrSize = ptr, size
	return nil
}

// uploadCPU copies the CPU-decoded images, as planes, into scratch.
func (p *Preprocessor) uploadCPU(plans []plan, s cu.Stream) error {
	var need int
	for _, pl := range plans {
		if pl.route == routeCPU {
			need += 3 * pl.pitch * pl.h
		}
	}
	if need == 0 {
		return nil
	}
	if len(p.staging) < need {
		if p.staging != nil {
			if err := p.rt.FreeHost(p.staging); err != nil {
				return err
			}
			p.staging = nil
		}
		b, err := p.rt.HostAlloc(need)
		if err != nil {
			return fmt.Errorf("imagegpu: %d bytes of pinned staging: %w", need, err)
		}
		p.staging = b
	}
	at := 0
	for _, pl := range plans {
		if pl.route != routeCPU {
			continue
		}
		planeLen := pl.pitch * pl.h
		buf := p.staging[at : at+3*planeLen]
		toPlanes(buf, pl.rgb, pl.pitch)
		if err := p.rt.MemcpyHtoDAsync(p.scratch+cu.DevPtr(pl.off), buf, s); err != nil {
			return err
		}
		at += 3 * planeLen
	}
	return nil
}

// decodeGPU decodes the images routed to one nvJPEG backend in one batched
// call. When the batch fails (a bitstream that parses but does not decode),
// each image is decoded alone to find which, and those fail.
func (p *Preprocessor) decodeGPU(di int, r route, images [][]byte, plans []plan, errs []error, s cu.Stream) error {
	d := &p.dec[di]
	var idx []int
	for i, pl := range plans {
		if pl.route == r && errs[i] == nil {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	data := make([][]byte, len(idx))
	dst := make([]cu.JPEGImage, len(idx))
	for k, i := range idx {
		pl := plans[i]
		data[k] = images[i]
		planeLen := cu.DevPtr(pl.pitch * pl.h)
		base := p.scratch + cu.DevPtr(pl.off)
		for c := 0; c < 3; c++ {
			dst[k].Channel[c] = base + cu.DevPtr(c)*planeLen
			dst[k].Pitch[c] = uint64(pl.pitch)
		}
	}
	err := p.jpg.DecodeBatched(d.h, d.st, data, dst, cu.JPEGOutputRGB, s)
	if err == nil {
		return nil
	}
	var ce *cu.Error
	if !errors.As(err, &ce) || ce.Lib != cu.LibJPEG {
		return err
	}
	for k, i := range idx {
		e := p.jpg.DecodeBatched(d.h, d.st, data[k:k+1], dst[k:k+1], cu.JPEGOutputRGB, s)
		if e == nil {
			continue
		}
		// nvJPEG refused what its header promised: Go decodes it, or
		// says why it is corrupt.
		if err := p.decodeOnCPU(&plans[i], images[i], s); err != nil {
			errs[i] = err
			plans[i].route = routeFailed
		}
	}
	return nil
}

// decodeOnCPU is the slow path for an image nvJPEG failed on: decoded by
// Go and copied, synchronously, to its place in scratch.
func (p *Preprocessor) decodeOnCPU(pl *plan, img []byte, s cu.Stream) error {
	m, err := imageproc.Decode(bytes.NewReader(img))
	if err != nil {
		return err
	}
	if m.W != pl.w || m.H != pl.h {
		return fmt.Errorf("corrupt JPEG: its header says %dx%d, its data %dx%d", pl.w, pl.h, m.W, m.H)
	}
	planeLen := pl.pitch * pl.h
	planes := make([]byte, 3*planeLen)
	toPlanes(planes, m, pl.pitch)
	if err := p.rt.StreamSynchronize(s); err != nil {
		return err
	}
	pl.route = routeCPU
	return p.rt.MemcpyHtoD(p.scratch+cu.DevPtr(pl.off), planes)
}

// toPlanes writes m's interleaved pixels as three planes of the given
// pitch into dst.
func toPlanes(dst []byte, m *imageproc.RGB, pitch int) {
	planeLen := pitch * m.H
	for y := 0; y < m.H; y++ {
		row := m.Pix[3*m.W*y : 3*m.W*(y+1)]
		r, g, b := dst[y*pitch:], dst[planeLen+y*pitch:], dst[2*planeLen+y*pitch:]
		for x := 0; x < m.W; x++ {
			r[x], g[x], b[x] = row[3*x], row[3*x+1], row[3*x+2]
		}
	}
}

// launch writes the descriptors and runs the preprocessing kernel.
func (p *Preprocessor) launch(plans []plan, dst cu.DevPtr, s cu.Stream) error {
	sp := p.opts.Spec
	le := binary.LittleEndian
	for i, pl := range plans {
		b := p.hdescs[i*descSize : (i+1)*descSize]
		clear(b)
		if pl.route == routeFailed || pl.w == 0 {
			continue // width 0: the kernel writes the normalised zero
		}
		rw, rh := imageproc.ResizedSize(pl.w, pl.h, sp.Resize)
		le.PutUint64(b[0:], uint64(p.scratch)+uint64(pl.off))
		le.PutUint64(b[8:], uint64(pl.pitch*pl.h))
		le.PutUint32(b[16:], uint32(pl.pitch))
		le.PutUint32(b[20:], uint32(pl.w))
		le.PutUint32(b[24:], uint32(pl.h))
		le.PutUint32(b[28:], uint32(rw))
		le.PutUint32(b[32:], uint32(rh))
		le.PutUint32(b[36:], uint32(cropOffset(rw, sp.CropW)))
		le.PutUint32(b[40:], uint32(cropOffset(rh, sp.CropH)))
	}
	n := len(plans)
	if err := p.rt.MemcpyHtoDAsync(p.descs, p.hdescs[:n*descSize], s); err != nil {
		return err
	}
	const block = 256
	grid := (sp.CropW*sp.CropH + block - 1) / block
	a := p.args.Reset().Ptr(p.descs).Ptr(dst).Int(sp.CropW).Int(sp.CropH).Ptr(p.affine).Ptr(p.affine + 12)
	if err := p.drv.Launch2D(p.fn, grid, n, block, s, a); err != nil {
		return err
	}
	if err := p.rt.EventRecord(p.done, s); err != nil {
		return err
	}
	p.pending = true
	return nil
}

// cropOffset is torchvision's center_crop offset, round half to even of
// (size-crop)/2; negative when the crop is larger (torchvision pads with
// zeros there, which is what the kernel writes outside the image).
func cropOffset(size, crop int) int {
	return int(math.RoundToEven(float64(size-crop) / 2))
}
