// Package imagegpu turns encoded images into a model's input batch on the
// GPU: JPEGs are decoded by nvJPEG (the hardware JPEG engines where the GPU
// has them, nvJPEG's GPU decoder for what they refuse), images nvJPEG
// cannot take (PNG, CMYK JPEGs, anything else) by Go on the CPU. YCbCr
// JPEGs come out of nvJPEG as planes at their coded resolution, and a
// kernel upsamples the chroma and converts to RGB as libjpeg (so PIL)
// does. One kernel then resizes with PIL's fixed-point antialiased filter
// (as torchvision on PIL images), center-crops, normalises and stores
// every image of the batch into the input slot: from the same RGB pixels,
// the CPU path's input bit for bit.
//
// A corrupt or oversized image fails alone: Run reports an error for its
// index and leaves its slot filled with zeros-after-normalisation, so the
// rest of the batch is answered.
package imagegpu

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	cu "goinfer/internal/cuda"
	"goinfer/internal/imageproc"
	"goinfer/internal/tensor"
)

// kernelFiles hold tools/kernels/images.cu compiled by
// tools/kernels/build.sh: images.ptx (clang) always, images.fatbin (nvcc,
// machine code: no JIT compile at start) when it was built on a machine
// with the CUDA toolkit, and sources.sha256, the source each was built
// from.
//
//go:embed kernels
var kernelFiles embed.FS

// loadModule loads the fatbin when it was built from the same source as
// the PTX (a kernel edited where only clang is installed leaves the
// fatbin behind until nvcc rebuilds it) and the driver takes it, else the
// PTX.
func loadModule(d *cu.Driver) (cu.Module, error) {
	var ferr error
	sums := map[string]string{}
	if rec, err := kernelFiles.ReadFile("kernels/sources.sha256"); err == nil {
		for _, line := range strings.Split(string(rec), "\n") {
			if sum, name, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
				sums[name] = sum
			}
		}
	}
	if fat, err := kernelFiles.ReadFile("kernels/images.fatbin"); err == nil && sums["images.fatbin"] != "" && sums["images.fatbin"] == sums["images.ptx"] {
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
	// Bicubic resizes with PIL's bicubic filter instead of its bilinear
	// one.
	Bicubic bool
}

// filter is the spec's PIL filter.
func (s Spec) filter() imageproc.Filter {
	if s.Bicubic {
		return imageproc.Bicubic
	}
	return imageproc.Bilinear
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
	// NoYCbCr has nvJPEG convert JPEGs to RGB itself (its own chroma
	// upsampling and colour conversion, not libjpeg's), for comparisons.
	NoYCbCr bool
	// GPUShare is the fraction of the JPEGs the hardware decoder takes
	// that go to nvJPEG's GPU backend instead, decoded at the same time
	// on its own stream and thread (0: none). On an H200 any share made
	// the batch slower (notes/img-fast.md), so it is for GPUs whose JPEG
	// engines are slow, and for measuring.
	GPUShare float64
	// PinInput copies the bitstreams into page-locked memory before
	// nvJPEG reads them.
	PinInput bool
}

// Preprocessor is one decoding pipeline: nvJPEG handles and state, the
// preprocessing kernel, and device and pinned scratch that grow to the
// largest batch seen. It is not safe for concurrent use.
type Preprocessor struct {
	opts Options
	rt   *cu.Runtime
	drv  *cu.Driver
	jpg  *cu.JPEG

	dec      [2]decoder // hardware (may be absent), then GPU
	mod      cu.Module
	fn, fYCC cu.Function
	lut      cu.DevPtr // [3][256] normalised values, of the output dtype
	meta     cu.DevPtr // descriptors and taps of a batch (batchMeta)
	metaSize int64
	hmeta    []byte // pinned, batchMeta's buffer
	scratch  cu.DevPtr
	scrSize  int64
	staging  []byte // pinned, for CPU-decoded planes
	taps     tapCache
	done     cu.Event // timing: the batch's end, on the caller's stream
	start    cu.Event // timing: before the batch's decodes
	kstart   cu.Event // timing: before its kernels
	pending  bool
	args     cu.KernelArgs
	pinned   []byte // page-locked copy of the bitstreams (Options.PinInput)

	// share is the fraction of hardware-decodable JPEGs sent to the GPU
	// backend; last counts what each backend decoded in the batch in
	// flight.
	share float64
	last  [2]int
	stats Stats
	// reinit sets nvJPEG's batched state up before every decode, as
	// nvjpegDecodeBatched's examples do, instead of when the batch size
	// or format changes (for measuring what that costs).
	reinit bool
}

// decoder is one nvJPEG backend's handle and state.
type decoder struct {
	backend cu.JPEGBackend
	h       cu.JPEGHandle
	st      cu.JPEGState
	ok      bool
	stream  cu.Stream // its own: the backends decode concurrently
	end     cu.Event  // timing: its part of the batch decoded
	// initN and initFormat are what the state was last set up for.
	initN, initFormat int
	// noYCbCr is set once the backend has refused planar YCbCr output
	// for a batch it decoded to RGB: its JPEGs go to RGB from then on.
	noYCbCr bool
}

// New loads nvJPEG and the kernel on opts.Device.
func New(libs *cu.Libs, opts Options) (*Preprocessor, error) {
	if libs == nil || libs.Runtime == nil || libs.Driver == nil {
		return nil, errors.New("imagegpu: the CUDA runtime and driver are needed")
	}
	if opts.MaxBatch < 1 {
		return nil, fmt.Errorf("imagegpu: MaxBatch %d must be at least 1", opts.MaxBatch)
	}
	s := opts.Spec
	if s.Resize < 1 || s.CropW < 1 || s.CropH < 1 {
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
	p := &Preprocessor{opts: opts, rt: libs.Runtime, drv: libs.Driver, jpg: jpg, taps: tapCache{filter: s.filter()},
		share: max(0, min(1, opts.GPUShare))}
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
		d, err := newDecoder(jpg, p.rt, b)
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
	if p.fYCC, err = p.drv.ModuleFunction(p.mod, "ycc_to_rgb"); err != nil {
		return nil, err
	}
	lut, lut16 := normLUTs(s.Mean, s.Std)
	if opts.Out == tensor.Float16 {
		lut = lut16
	}
	if p.lut, err = p.rt.Malloc(int64(len(lut))); err != nil {
		return nil, err
	}
	if err := p.rt.MemcpyHtoD(p.lut, lut); err != nil {
		return nil, err
	}
	for _, e := range []*cu.Event{&p.done, &p.start, &p.kstart} {
		if *e, err = p.rt.EventCreate(true); err != nil {
			return nil, err
		}
	}
	ok = true
	return p, nil
}

func newDecoder(j *cu.JPEG, rt *cu.Runtime, b cu.JPEGBackend) (decoder, error) {
	d := decoder{backend: b}
	var err error
	if d.h, err = j.Create(b); err != nil {
		return d, err
	}
	if d.st, err = j.NewState(d.h); err != nil {
		j.Destroy(d.h)
		return d, err
	}
	if d.stream, err = rt.StreamCreate(); err != nil {
		return d, errors.Join(err, j.DestroyState(d.st), j.Destroy(d.h))
	}
	if d.end, err = rt.EventCreate(true); err != nil {
		return d, errors.Join(err, rt.StreamDestroy(d.stream), j.DestroyState(d.st), j.Destroy(d.h))
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
			errs = append(errs, p.rt.StreamSynchronize(d.stream), p.rt.StreamDestroy(d.stream), p.rt.EventDestroy(d.end),
				p.jpg.DestroyState(d.st), p.jpg.Destroy(d.h))
			d.ok = false
		}
	}
	if p.mod != 0 {
		errs = append(errs, p.drv.ModuleUnload(p.mod))
		p.mod = 0
	}
	for _, ptr := range []*cu.DevPtr{&p.lut, &p.meta, &p.scratch} {
		if *ptr != 0 {
			errs = append(errs, p.rt.Free(*ptr))
			*ptr = 0
		}
	}
	for _, b := range []*[]byte{&p.hmeta, &p.staging, &p.pinned} {
		if *b != nil {
			errs = append(errs, p.rt.FreeHost(*b))
			*b = nil
		}
	}
	for _, e := range []*cu.Event{&p.done, &p.start, &p.kstart} {
		if *e != 0 {
			errs = append(errs, p.rt.EventDestroy(*e))
			*e = 0
		}
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
	off   int64 // of the R plane in scratch
	rgb   *imageproc.RGB
	// ycc is how ycc_to_rgb converts nvJPEG's YCbCr planes (yccNone: nvJPEG
	// writes RGB); they lie at yoff: Y, then Cb and Cr of cw x ch pixels
	// with pitch cpitch.
	ycc            int
	cw, ch, cpitch int
	yoff           int64
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
	t0 := time.Now()
	if p.pending {
		// The host-side descriptors and staging of the last batch are in
		// use until its copies have run.
		if err := p.rt.EventSynchronize(p.done); err != nil {
			return nil, err
		}
		p.pending = false
		p.collect()
	}
	t1 := time.Now()
	p.stats.Wait += t1.Sub(t0)
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
	p.split(plans, errs)
	t2 := time.Now()
	p.stats.Plan += t2.Sub(t1)
	p.decodeCPU(images, plans, errs, cpu)
	p.stats.CPUDecode += time.Since(t2)
	for i := range plans {
		pl := plans[i]
		if errs[i] != nil {
			// Whatever route it had, nothing of it is uploaded or decoded.
			plans[i] = plan{route: routeFailed, ycc: yccNone}
			continue
		}
		pl.pitch = (pl.w + 3) &^ 3
		pl.off = size
		size += int64(3 * pl.pitch * pl.h)
		if pl.ycc != yccNone {
			pl.cw, pl.ch = chromaSize(pl.w, pl.h, pl.ycc)
			pl.cpitch = (pl.cw + 3) &^ 3
			pl.yoff = size
			size += int64(pl.pitch*pl.h + 2*pl.cpitch*pl.ch)
		}
		plans[i] = pl
	}
	if err := p.growScratch(size); err != nil {
		return nil, err
	}
	if err := p.uploadCPU(plans, s); err != nil {
		return nil, err
	}
	if err := p.decodeAll(images, plans, errs, s); err != nil {
		return nil, err
	}
	t3 := time.Now()
	err = p.launch(plans, dst, s)
	p.stats.Launch += time.Since(t3)
	p.stats.Batches++
	p.stats.Images += n
	return errs, err
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
		return plan{route: routeCPU, ycc: yccNone}, nil
	}
	if err := p.checkSize(h.width, h.height); err != nil {
		return plan{}, err
	}
	pl := plan{route: routeGPU, w: h.width, h: h.height, ycc: h.yccMode()}
	d := &p.dec[1]
	if p.dec[0].ok && h.hardwareOK() {
		pl.route, d = routeHardware, &p.dec[0]
	}
	if p.opts.NoYCbCr || d.noYCbCr {
		pl.ycc = yccNone
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
			plans[i] = plan{route: routeCPU, w: m.W, h: m.H, rgb: m, ycc: yccNone}
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

// decodeGPU decodes the images routed to one nvJPEG backend, those to
// planar YCbCr (ycc) or those to RGB, in one batched call. When a YCbCr
// batch fails and the same batch decodes to RGB, the backend does not
// take YCbCr output: its images go to RGB from then on. When a batch
// fails otherwise (a bitstream that parses but does not decode), each
// image is decoded alone to RGB to find which, and those go to the CPU.
//
// data holds what nvJPEG reads (images or a page-locked copy), images the
// originals for the CPU fallback.
func (p *Preprocessor) decodeGPU(di int, r route, ycc bool, data, images [][]byte, plans []plan, errs []error, s cu.Stream) error {
	d := &p.dec[di]
	var idx []int
	for i, pl := range plans {
		if pl.route == r && errs[i] == nil && (pl.ycc != yccNone) == ycc {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	src := make([][]byte, len(idx))
	dst := make([]cu.JPEGImage, len(idx))
	rgb := make([]cu.JPEGImage, len(idx))
	for k, i := range idx {
		pl := plans[i]
		src[k] = data[i]
		rgb[k] = p.rgbPlanes(pl)
		dst[k] = rgb[k]
		if ycc {
			base := p.scratch + cu.DevPtr(pl.yoff)
			cb := base + cu.DevPtr(pl.pitch*pl.h)
			dst[k].Channel = [cu.JPEGMaxComponent]cu.DevPtr{base, cb, cb + cu.DevPtr(pl.cpitch*pl.ch)}
			dst[k].Pitch = [cu.JPEGMaxComponent]uint64{uint64(pl.pitch), uint64(pl.cpitch), uint64(pl.cpitch)}
		}
	}
	format := cu.JPEGOutputRGB
	if ycc {
		format = cu.JPEGOutputYUV
	}
	err := p.decodeBatched(d, src, dst, format, s)
	if err == nil {
		return nil
	}
	var ce *cu.Error
	if !errors.As(err, &ce) || ce.Lib != cu.LibJPEG {
		return err
	}
	for _, i := range idx {
		plans[i].ycc = yccNone
	}
	if ycc {
		if e := p.decodeBatched(d, src, rgb, cu.JPEGOutputRGB, s); e == nil {
			d.noYCbCr = true
			return nil
		}
	}
	for k, i := range idx {
		e := p.decodeBatched(d, src[k:k+1], rgb[k:k+1], cu.JPEGOutputRGB, s)
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

// rgbPlanes is where an image's RGB planes lie in scratch.
func (p *Preprocessor) rgbPlanes(pl plan) cu.JPEGImage {
	var im cu.JPEGImage
	planeLen := cu.DevPtr(pl.pitch * pl.h)
	base := p.scratch + cu.DevPtr(pl.off)
	for c := 0; c < 3; c++ {
		im.Channel[c] = base + cu.DevPtr(c)*planeLen
		im.Pitch[c] = uint64(pl.pitch)
	}
	return im
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
	pl.route, pl.ycc = routeCPU, yccNone
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

// launch uploads the batch's descriptors and taps, converts the YCbCr
// images to RGB and runs the preprocessing kernel.
func (p *Preprocessor) launch(plans []plan, dst cu.DevPtr, s cu.Stream) error {
	sp := p.opts.Spec
	// The meta buffer's size is known only once it is laid out; laying it
	// out again is cheap when the device buffer had to grow.
	meta, nycc := p.batchMeta(p.hmeta, plans, uint64(p.scratch), uint64(p.meta))
	if int64(len(meta)) > p.metaSize || len(meta) > len(p.hmeta) {
		if err := p.growMeta(len(meta)); err != nil {
			return err
		}
		meta, nycc = p.batchMeta(p.hmeta, plans, uint64(p.scratch), uint64(p.meta))
	}
	if err := p.rt.EventRecord(p.kstart, s); err != nil {
		return err
	}
	if err := p.rt.MemcpyHtoDAsync(p.meta, meta, s); err != nil {
		return err
	}
	n := len(plans)
	const block = 256
	if nycc > 0 {
		most := 0
		for _, pl := range plans {
			if pl.route != routeFailed && pl.ycc != yccNone {
				most = max(most, pl.w*pl.h)
			}
		}
		grid := min((most+block-1)/block, 128)
		a := p.args.Reset().Ptr(p.meta + cu.DevPtr(n*descSize))
		if err := p.drv.Launch2D(p.fYCC, grid, nycc, block, s, a); err != nil {
			return err
		}
	}
	grid := (sp.CropW*sp.CropH + block - 1) / block
	a := p.args.Reset().Ptr(p.meta).Ptr(dst).Int(sp.CropW).Int(sp.CropH).Ptr(p.lut)
	if err := p.drv.Launch2D(p.fn, grid, n, block, s, a); err != nil {
		return err
	}
	if err := p.rt.EventRecord(p.done, s); err != nil {
		return err
	}
	p.pending = true
	return nil
}

// growMeta makes the pinned and device meta buffers hold size bytes.
func (p *Preprocessor) growMeta(size int) error {
	size = max(size, int(p.metaSize)*3/2, 64<<10)
	if p.meta != 0 {
		// The previous batch's kernels may still read it.
		if err := p.rt.EventSynchronize(p.done); err != nil {
			return err
		}
		if err := p.rt.Free(p.meta); err != nil {
			return err
		}
		p.meta, p.metaSize = 0, 0
	}
	if p.hmeta != nil {
		if err := p.rt.FreeHost(p.hmeta); err != nil {
			return err
		}
		p.hmeta = nil
	}
	ptr, err := p.rt.Malloc(int64(size))
	if err != nil {
		return fmt.Errorf("imagegpu: %d bytes of descriptors: %w", size, err)
	}
	p.meta, p.metaSize = ptr, int64(size)
	if p.hmeta, err = p.rt.HostAlloc(size); err != nil {
		return fmt.Errorf("imagegpu: %d bytes of pinned descriptors: %w", size, err)
	}
	return nil
}
