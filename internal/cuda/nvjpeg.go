package cuda

import (
	"fmt"
	"runtime"
)

// LibJPEG names nvJPEG in errors and reports.
const LibJPEG = "nvjpeg"

// SpecJPEG finds nvJPEG: the CUDA toolkit ships it beside cudart, and pip
// has it as nvidia-nvjpeg (a dependency of torchvision's GPU decoding).
var SpecJPEG = LibSpec{Name: LibJPEG, Sonames: []string{"libnvjpeg.so.13", "libnvjpeg.so.12"},
	Fix: "install nvJPEG: pip install nvidia-nvjpeg (or the CUDA toolkit), or point " + OverrideEnv + " at the directory holding libnvjpeg.so.*"}

// JPEGBackend is an nvjpegBackend_t.
type JPEGBackend int32

// The nvJPEG backends goinfer asks for.
const (
	JPEGBackendDefault   JPEGBackend = 0
	JPEGBackendHybrid    JPEGBackend = 1 // Huffman on the CPU: best for small images
	JPEGBackendGPUHybrid JPEGBackend = 2 // Huffman on the GPU: best for large batches
	JPEGBackendHardware  JPEGBackend = 3 // the A100/H100/H200 JPEG engines
)

func (b JPEGBackend) String() string {
	switch b {
	case JPEGBackendDefault:
		return "default"
	case JPEGBackendHybrid:
		return "hybrid"
	case JPEGBackendGPUHybrid:
		return "gpu-hybrid"
	case JPEGBackendHardware:
		return "hardware"
	}
	return fmt.Sprintf("backend(%d)", int32(b))
}

// JPEG output formats (nvjpegOutputFormat_t).
const (
	JPEGOutputYUV  = 1 // planar Y, Cb, Cr, chroma at its coded resolution
	JPEGOutputRGB  = 3 // three planes
	JPEGOutputRGBI = 5 // one interleaved plane
)

// JPEGMaxComponent is NVJPEG_MAX_COMPONENT.
const JPEGMaxComponent = 4

// JPEGImage is nvjpegImage_t: up to four planes with their row pitches.
type JPEGImage struct {
	Channel [JPEGMaxComponent]DevPtr
	Pitch   [JPEGMaxComponent]uint64
}

// JPEGHandle, JPEGState and JPEGStream are nvJPEG's opaque handles.
type (
	JPEGHandle uintptr
	JPEGState  uintptr
	JPEGStream uintptr
)

// JPEGInfo is what nvjpegGetImageInfo reads from a header.
type JPEGInfo struct {
	Components  int
	Subsampling int // nvjpegChromaSubsampling_t
	Width       int // of component 0
	Height      int
}

// JPEG is the part of nvJPEG goinfer uses: batched decoding to planar RGB
// on a stream.
type JPEG struct {
	lib *library

	getProperty      func(kind int32, v *int32) int32
	createEx         func(backend int32, dev, pinned uintptr, flags uint32, h *uintptr) int32
	destroy          func(h uintptr) int32
	stateCreate      func(h uintptr, s *uintptr) int32
	stateDestroy     func(s uintptr) int32
	getImageInfo     func(h uintptr, data *byte, n uint64, comps *int32, sub *int32, w, hgt *int32) int32
	batchedInit      func(h, s uintptr, batch, threads, format int32) int32
	decodeBatched    func(h, s uintptr, data **byte, lengths *uint64, dst *JPEGImage, stream uintptr) int32
	streamCreate     func(h uintptr, js *uintptr) int32
	streamDestroy    func(js uintptr) int32
	streamParse      func(h uintptr, data *byte, n uint64, saveMeta, saveStream int32, js uintptr) int32
	batchedSupported func(h, js uintptr, supported *int32) int32
}

// OpenJPEG finds and binds nvJPEG. It is separate from Load because the
// engine runs without it: only image requests decoded on the GPU need it.
func OpenJPEG() (*JPEG, LibInfo, error) {
	l := open(SpecJPEG, OSEnv())
	if l.info.Err != nil {
		return nil, l.info, fmt.Errorf("%w; fix: %s", l.info.Err, l.info.Fix)
	}
	j := &JPEG{lib: l}
	err := l.bind(map[string]any{
		"nvjpegGetProperty":             &j.getProperty,
		"nvjpegCreateEx":                &j.createEx,
		"nvjpegDestroy":                 &j.destroy,
		"nvjpegJpegStateCreate":         &j.stateCreate,
		"nvjpegJpegStateDestroy":        &j.stateDestroy,
		"nvjpegGetImageInfo":            &j.getImageInfo,
		"nvjpegDecodeBatchedInitialize": &j.batchedInit,
		"nvjpegDecodeBatched":           &j.decodeBatched,
		"nvjpegJpegStreamCreate":        &j.streamCreate,
		"nvjpegJpegStreamDestroy":       &j.streamDestroy,
		"nvjpegJpegStreamParse":         &j.streamParse,
		"nvjpegDecodeBatchedSupported":  &j.batchedSupported,
	})
	if err != nil {
		l.info.Err = err
		return nil, l.info, err
	}
	if v, err := j.Version(); err == nil {
		l.info.Version = v
	}
	return j, l.info, nil
}

// jpegStatusNames are nvjpegStatus_t's names; nvJPEG has no string
// function.
var jpegStatusNames = map[int]string{
	1:  "NVJPEG_STATUS_NOT_INITIALIZED",
	2:  "NVJPEG_STATUS_INVALID_PARAMETER",
	3:  "NVJPEG_STATUS_BAD_JPEG",
	4:  "NVJPEG_STATUS_JPEG_NOT_SUPPORTED",
	5:  "NVJPEG_STATUS_ALLOCATOR_FAILURE",
	6:  "NVJPEG_STATUS_EXECUTION_FAILED",
	7:  "NVJPEG_STATUS_ARCH_MISMATCH",
	8:  "NVJPEG_STATUS_INTERNAL_ERROR",
	9:  "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED",
	10: "NVJPEG_STATUS_INCOMPLETE_BITSTREAM",
}

func (j *JPEG) check(call string, code int32) error {
	if code == 0 {
		return nil
	}
	return newError(LibJPEG, call, int(code), func(c int) (string, string) { return jpegStatusNames[c], "" })
}

// Path is the file nvJPEG was loaded from.
func (j *JPEG) Path() string { return j.lib.info.Path }

// Version is nvJPEG's "major.minor.patch".
func (j *JPEG) Version() (string, error) {
	var v [3]int32
	for i, k := range []int32{libraryPropertyMajor, libraryPropertyMinor, libraryPropertyPatch} {
		if err := j.check("nvjpegGetProperty", j.getProperty(k, &v[i])); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]), nil
}

// Create makes a handle for backend on the current device; the hardware
// backend fails on GPUs without JPEG engines.
func (j *JPEG) Create(b JPEGBackend) (JPEGHandle, error) {
	var h uintptr
	if err := j.check("nvjpegCreateEx("+b.String()+")", j.createEx(int32(b), 0, 0, 0, &h)); err != nil {
		return 0, err
	}
	return JPEGHandle(h), nil
}

// Destroy frees a handle.
func (j *JPEG) Destroy(h JPEGHandle) error { return j.check("nvjpegDestroy", j.destroy(uintptr(h))) }

// NewState makes a decoding state (one per concurrent decoder).
func (j *JPEG) NewState(h JPEGHandle) (JPEGState, error) {
	var s uintptr
	if err := j.check("nvjpegJpegStateCreate", j.stateCreate(uintptr(h), &s)); err != nil {
		return 0, err
	}
	return JPEGState(s), nil
}

// DestroyState frees a state.
func (j *JPEG) DestroyState(s JPEGState) error {
	return j.check("nvjpegJpegStateDestroy", j.stateDestroy(uintptr(s)))
}

// ImageInfo reads a JPEG header.
func (j *JPEG) ImageInfo(h JPEGHandle, data []byte) (JPEGInfo, error) {
	if len(data) == 0 {
		return JPEGInfo{}, fmt.Errorf("nvjpegGetImageInfo: empty data")
	}
	var comps, sub int32
	var w, hgt [JPEGMaxComponent]int32
	code := j.getImageInfo(uintptr(h), &data[0], uint64(len(data)), &comps, &sub, &w[0], &hgt[0])
	runtime.KeepAlive(data)
	if err := j.check("nvjpegGetImageInfo", code); err != nil {
		return JPEGInfo{}, err
	}
	return JPEGInfo{Components: int(comps), Subsampling: int(sub), Width: int(w[0]), Height: int(hgt[0])}, nil
}

// NewStream makes a parsed-bitstream holder for BatchedSupported.
func (j *JPEG) NewStream(h JPEGHandle) (JPEGStream, error) {
	var s uintptr
	if err := j.check("nvjpegJpegStreamCreate", j.streamCreate(uintptr(h), &s)); err != nil {
		return 0, err
	}
	return JPEGStream(s), nil
}

// DestroyStream frees a bitstream holder.
func (j *JPEG) DestroyStream(s JPEGStream) error {
	return j.check("nvjpegJpegStreamDestroy", j.streamDestroy(uintptr(s)))
}

// BatchedSupported parses data's header into js and reports whether the
// handle's batched decoder takes it (the hardware backend refuses, for
// example, progressive and some subsamplings).
func (j *JPEG) BatchedSupported(h JPEGHandle, js JPEGStream, data []byte) (bool, error) {
	if len(data) == 0 {
		return false, nil
	}
	code := j.streamParse(uintptr(h), &data[0], uint64(len(data)), 0, 0, uintptr(js))
	runtime.KeepAlive(data)
	if err := j.check("nvjpegJpegStreamParse", code); err != nil {
		return false, err
	}
	var not int32
	if err := j.check("nvjpegDecodeBatchedSupported", j.batchedSupported(uintptr(h), uintptr(js), &not)); err != nil {
		return false, err
	}
	return not == 0, nil
}

// DecodeBatched decodes len(data) JPEGs into dst on stream, with format
// (JPEGOutputRGB: three planes per image). data must stay unchanged until
// the stream has passed the decode; nvJPEG reads it from the host while it
// parses, so page-locked memory is faster but not required.
func (j *JPEG) DecodeBatched(h JPEGHandle, s JPEGState, data [][]byte, dst []JPEGImage, format int, stream Stream) error {
	if len(data) == 0 {
		return nil
	}
	if err := j.InitBatched(h, s, len(data), format); err != nil {
		return err
	}
	return j.DecodeBatchedInitialized(h, s, data, dst, stream)
}

// InitBatched sets state s up for batches of n images decoded to format
// (nvjpegDecodeBatchedInitialize). It holds for every later
// DecodeBatchedInitialized of n images on s until the next InitBatched.
func (j *JPEG) InitBatched(h JPEGHandle, s JPEGState, n, format int) error {
	return j.check("nvjpegDecodeBatchedInitialize", j.batchedInit(uintptr(h), uintptr(s), int32(n), 1, int32(format)))
}

// DecodeBatchedInitialized is DecodeBatched on a state that InitBatched
// set up for len(data) images and the format wanted: a service decoding
// batches of one size does not set the state up again for each.
func (j *JPEG) DecodeBatchedInitialized(h JPEGHandle, s JPEGState, data [][]byte, dst []JPEGImage, stream Stream) error {
	n := len(data)
	if n == 0 {
		return nil
	}
	if len(dst) != n {
		return fmt.Errorf("nvjpegDecodeBatched: %d images but %d destinations", n, len(dst))
	}
	ptrs := make([]*byte, n)
	lens := make([]uint64, n)
	var pin runtime.Pinner
	defer pin.Unpin()
	for i, d := range data {
		if len(d) == 0 {
			return fmt.Errorf("nvjpegDecodeBatched: image %d is empty", i)
		}
		pin.Pin(&d[0])
		ptrs[i] = &d[0]
		lens[i] = uint64(len(d))
	}
	code := j.decodeBatched(uintptr(h), uintptr(s), &ptrs[0], &lens[0], &dst[0], uintptr(stream))
	runtime.KeepAlive(ptrs)
	runtime.KeepAlive(lens)
	runtime.KeepAlive(dst)
	return j.check("nvjpegDecodeBatched", code)
}
