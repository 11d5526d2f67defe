package cuda

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// cuDNN handles and descriptors.
type (
	DNNHandle      uintptr
	TensorDesc     uintptr
	FilterDesc     uintptr
	ConvDesc       uintptr
	ActivationDesc uintptr
)

// cuDNN enums (cudnn_graph.h, cudnn_ops.h, cudnn_cnn.h).
const (
	DataFloat    = 0
	DataHalf     = 2
	DataBFloat16 = 9

	TensorNCHW = 0
	TensorNHWC = 1

	DefaultMath    = 0
	TensorOpMath   = 1
	TensorOpMathAC = 2 // CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
	FMAMath        = 3

	CrossCorrelation = 1

	ActivationRelu     = 1
	ActivationIdentity = 5

	// ConvFwdAlgoImplicitGemm is cuDNN's plain implicit GEMM.
	ConvFwdAlgoImplicitGemm = 0
	// ConvFwdAlgoImplicitPrecompGemm is the one algorithm legacy cuDNN
	// accepts for cudnnConvolutionBiasActivationForward with an identity
	// activation.
	ConvFwdAlgoImplicitPrecompGemm = 1
	ConvFwdAlgoCount               = 8
)

// convFwdAlgoNames are cudnnConvolutionFwdAlgo_t's names.
var convFwdAlgoNames = [...]string{"implicit_gemm", "implicit_precomp_gemm", "gemm", "direct", "fft", "fft_tiling", "winograd", "winograd_nonfused"}

// ConvFwdAlgoName names a cudnnConvolutionFwdAlgo_t, for reports.
func ConvFwdAlgoName(a int) string {
	if a >= 0 && a < len(convFwdAlgoNames) {
		return convFwdAlgoNames[a]
	}
	return fmt.Sprintf("algo%d", a)
}

// ConvFwdPerf is cudnnConvolutionFwdAlgoPerf_t.
type ConvFwdPerf struct {
	Algo        int32
	Status      int32
	Time        float32 // milliseconds (Find only)
	_           int32
	Memory      uint64 // workspace bytes
	Determinism int32
	MathType    int32
	_           [3]int32
	_           int32
}

// DNN is cuDNN's legacy (descriptor) API, the calls goinfer's engine uses.
type DNN struct {
	lib *library

	getErrorString     func(code int32) string
	getLastErrorString func(buf *byte, n uint64)
	getVersion         func() uint64
	getCudartVersion   func() uint64
	create             func(h *uintptr) int32
	destroy            func(h uintptr) int32
	setStream          func(h, s uintptr) int32
	createTensor       func(d *uintptr) int32
	setTensor4d        func(d uintptr, format, dtype, n, c, h, w int32) int32
	destroyTensor      func(d uintptr) int32
	createFilter       func(d *uintptr) int32
	setFilter4d        func(d uintptr, dtype, format, k, c, h, w int32) int32
	destroyFilter      func(d uintptr) int32
	createConv         func(d *uintptr) int32
	setConv2d          func(d uintptr, padH, padW, u, v, dilH, dilW, mode, computeType int32) int32
	setConvMath        func(d uintptr, math int32) int32
	setConvGroups      func(d uintptr, groups int32) int32
	destroyConv        func(d uintptr) int32
	createActivation   func(d *uintptr) int32
	setActivation      func(d uintptr, mode, nanOpt int32, coef float64) int32
	destroyActivation  func(d uintptr) int32
	getConvFwdAlgo     func(h, x, w, c, y uintptr, req int32, ret *int32, perf *ConvFwdPerf) int32
	findConvFwdAlgoEx  func(h, xd, x, wd, w, cd, yd, y uintptr, req int32, ret *int32, perf *ConvFwdPerf, ws uintptr, wsSize uint64) int32
	getConvFwdWsSize   func(h, x, w, c, y uintptr, algo int32, size *uint64) int32

	convForward        uintptr // hot
	convBiasActForward uintptr // hot
}

func newDNN(l *library) (*DNN, error) {
	d := &DNN{lib: l}
	err := l.bind(map[string]any{
		"cudnnGetErrorString":                     &d.getErrorString,
		"cudnnGetLastErrorString":                 &d.getLastErrorString,
		"cudnnGetVersion":                         &d.getVersion,
		"cudnnGetCudartVersion":                   &d.getCudartVersion,
		"cudnnCreate":                             &d.create,
		"cudnnDestroy":                            &d.destroy,
		"cudnnSetStream":                          &d.setStream,
		"cudnnCreateTensorDescriptor":             &d.createTensor,
		"cudnnSetTensor4dDescriptor":              &d.setTensor4d,
		"cudnnDestroyTensorDescriptor":            &d.destroyTensor,
		"cudnnCreateFilterDescriptor":             &d.createFilter,
		"cudnnSetFilter4dDescriptor":              &d.setFilter4d,
		"cudnnDestroyFilterDescriptor":            &d.destroyFilter,
		"cudnnCreateConvolutionDescriptor":        &d.createConv,
		"cudnnSetConvolution2dDescriptor":         &d.setConv2d,
		"cudnnSetConvolutionMathType":             &d.setConvMath,
		"cudnnSetConvolutionGroupCount":           &d.setConvGroups,
		"cudnnDestroyConvolutionDescriptor":       &d.destroyConv,
		"cudnnCreateActivationDescriptor":         &d.createActivation,
		"cudnnSetActivationDescriptor":            &d.setActivation,
		"cudnnDestroyActivationDescriptor":        &d.destroyActivation,
		"cudnnGetConvolutionForwardAlgorithm_v7":  &d.getConvFwdAlgo,
		"cudnnFindConvolutionForwardAlgorithmEx":  &d.findConvFwdAlgoEx,
		"cudnnGetConvolutionForwardWorkspaceSize": &d.getConvFwdWsSize,
		"cudnnConvolutionForward":                 &d.convForward,
		"cudnnConvolutionBiasActivationForward":   &d.convBiasActForward,
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

func (d *DNN) check(call string, code int32) error {
	if code == cudnnStatusSuccess {
		return nil
	}
	return newError(LibDNN, call, int(code), func(c int) (string, string) {
		buf := make([]byte, 1024)
		d.getLastErrorString(&buf[0], uint64(len(buf)))
		return d.getErrorString(int32(c)), cBuf(buf)
	})
}

// Path is the file cuDNN was loaded from.
func (d *DNN) Path() string { return d.lib.info.Path }

// Version is cudnnGetVersion: 91900 for 9.19.0.
func (d *DNN) Version() int { return int(d.getVersion()) }

// CudartVersion is the CUDA runtime version cuDNN was built against.
func (d *DNN) CudartVersion() int { return int(d.getCudartVersion()) }

// Create makes a cuDNN handle on the current device.
func (d *DNN) Create() (DNNHandle, error) {
	var h uintptr
	err := d.check("cudnnCreate", d.create(&h))
	return DNNHandle(h), err
}

// Destroy releases a handle.
func (d *DNN) Destroy(h DNNHandle) error { return d.check("cudnnDestroy", d.destroy(uintptr(h))) }

// SetStream makes h enqueue its work on s.
func (d *DNN) SetStream(h DNNHandle, s Stream) error {
	return d.check("cudnnSetStream", d.setStream(uintptr(h), uintptr(s)))
}

// NewTensor4d makes a 4-d tensor descriptor (n, c, h, w in the given
// format: TensorNCHW or TensorNHWC).
func (d *DNN) NewTensor4d(format, dtype, n, c, h, w int) (TensorDesc, error) {
	var t uintptr
	if err := d.check("cudnnCreateTensorDescriptor", d.createTensor(&t)); err != nil {
		return 0, err
	}
	if err := d.SetTensor4d(TensorDesc(t), format, dtype, n, c, h, w); err != nil {
		d.destroyTensor(t)
		return 0, err
	}
	return TensorDesc(t), nil
}

// SetTensor4d re-shapes a tensor descriptor.
func (d *DNN) SetTensor4d(t TensorDesc, format, dtype, n, c, h, w int) error {
	if err := d.check("cudnnSetTensor4dDescriptor", d.setTensor4d(uintptr(t), int32(format), int32(dtype), int32(n), int32(c), int32(h), int32(w))); err != nil {
		return fmt.Errorf("%w (tensor [%d %d %d %d], format %d, dtype %d)", err, n, c, h, w, format, dtype)
	}
	return nil
}

// DestroyTensor releases a tensor descriptor (0 is a no-op).
func (d *DNN) DestroyTensor(t TensorDesc) error {
	if t == 0 {
		return nil
	}
	return d.check("cudnnDestroyTensorDescriptor", d.destroyTensor(uintptr(t)))
}

// NewFilter4d makes a filter descriptor of k output channels, c input
// channels (per group) and an h x w window.
func (d *DNN) NewFilter4d(dtype, format, k, c, h, w int) (FilterDesc, error) {
	var f uintptr
	if err := d.check("cudnnCreateFilterDescriptor", d.createFilter(&f)); err != nil {
		return 0, err
	}
	if err := d.check("cudnnSetFilter4dDescriptor", d.setFilter4d(f, int32(dtype), int32(format), int32(k), int32(c), int32(h), int32(w))); err != nil {
		d.destroyFilter(f)
		return 0, fmt.Errorf("%w (filter [%d %d %d %d])", err, k, c, h, w)
	}
	return FilterDesc(f), nil
}

// DestroyFilter releases a filter descriptor (0 is a no-op).
func (d *DNN) DestroyFilter(f FilterDesc) error {
	if f == 0 {
		return nil
	}
	return d.check("cudnnDestroyFilterDescriptor", d.destroyFilter(uintptr(f)))
}

// NewConv2d makes a cross-correlation descriptor (what deep learning calls
// convolution) with square padding and stride, groups and math type.
func (d *DNN) NewConv2d(pad, stride, groups, computeType, mathType int) (ConvDesc, error) {
	var c uintptr
	if err := d.check("cudnnCreateConvolutionDescriptor", d.createConv(&c)); err != nil {
		return 0, err
	}
	err := d.check("cudnnSetConvolution2dDescriptor", d.setConv2d(c, int32(pad), int32(pad), int32(stride), int32(stride), 1, 1, CrossCorrelation, int32(computeType)))
	if err == nil && groups > 1 {
		err = d.check("cudnnSetConvolutionGroupCount", d.setConvGroups(c, int32(groups)))
	}
	if err == nil {
		err = d.SetConvMath(ConvDesc(c), mathType)
	}
	if err != nil {
		d.destroyConv(c)
		return 0, err
	}
	return ConvDesc(c), nil
}

// NewConv2dGeneral makes a cross-correlation descriptor with per-axis
// padding (symmetric), stride and dilation, groups, compute and math type.
func (d *DNN) NewConv2dGeneral(padH, padW, strideH, strideW, dilH, dilW, groups, computeType, mathType int) (ConvDesc, error) {
	var c uintptr
	if err := d.check("cudnnCreateConvolutionDescriptor", d.createConv(&c)); err != nil {
		return 0, err
	}
	err := d.check("cudnnSetConvolution2dDescriptor", d.setConv2d(c, int32(padH), int32(padW), int32(strideH), int32(strideW), int32(dilH), int32(dilW), CrossCorrelation, int32(computeType)))
	if err == nil && groups > 1 {
		err = d.check("cudnnSetConvolutionGroupCount", d.setConvGroups(c, int32(groups)))
	}
	if err == nil {
		err = d.SetConvMath(ConvDesc(c), mathType)
	}
	if err != nil {
		d.destroyConv(c)
		return 0, err
	}
	return ConvDesc(c), nil
}

// SetConvMath sets which math (tensor cores, TF32) a convolution may use.
func (d *DNN) SetConvMath(c ConvDesc, mathType int) error {
	return d.check("cudnnSetConvolutionMathType", d.setConvMath(uintptr(c), int32(mathType)))
}

// DestroyConv releases a convolution descriptor (0 is a no-op).
func (d *DNN) DestroyConv(c ConvDesc) error {
	if c == 0 {
		return nil
	}
	return d.check("cudnnDestroyConvolutionDescriptor", d.destroyConv(uintptr(c)))
}

// NewActivation makes an activation descriptor (ActivationRelu,
// ActivationIdentity).
func (d *DNN) NewActivation(mode int) (ActivationDesc, error) {
	var a uintptr
	if err := d.check("cudnnCreateActivationDescriptor", d.createActivation(&a)); err != nil {
		return 0, err
	}
	const propagateNaN = 1
	if err := d.check("cudnnSetActivationDescriptor", d.setActivation(a, int32(mode), propagateNaN, 0)); err != nil {
		d.destroyActivation(a)
		return 0, err
	}
	return ActivationDesc(a), nil
}

// DestroyActivation releases an activation descriptor (0 is a no-op).
func (d *DNN) DestroyActivation(a ActivationDesc) error {
	if a == 0 {
		return nil
	}
	return d.check("cudnnDestroyActivationDescriptor", d.destroyActivation(uintptr(a)))
}

// ConvForwardAlgorithms asks cuDNN's heuristics for the convolution
// algorithms in order of expected speed (no measurement, like PyTorch
// without cudnn.benchmark).
func (d *DNN) ConvForwardAlgorithms(h DNNHandle, x TensorDesc, w FilterDesc, c ConvDesc, y TensorDesc) ([]ConvFwdPerf, error) {
	perf := make([]ConvFwdPerf, ConvFwdAlgoCount)
	var n int32
	if err := d.check("cudnnGetConvolutionForwardAlgorithm_v7", d.getConvFwdAlgo(uintptr(h), uintptr(x), uintptr(w), uintptr(c), uintptr(y), int32(len(perf)), &n, &perf[0])); err != nil {
		return nil, err
	}
	return perf[:n], nil
}

// FindConvForward runs every convolution algorithm on real buffers and
// returns them fastest first (cudnnFindConvolutionForwardAlgorithmEx). It
// synchronizes the device.
func (d *DNN) FindConvForward(h DNNHandle, xd TensorDesc, x DevPtr, wd FilterDesc, w DevPtr, cd ConvDesc, yd TensorDesc, y DevPtr, ws DevPtr, wsSize int64) ([]ConvFwdPerf, error) {
	perf := make([]ConvFwdPerf, ConvFwdAlgoCount)
	var n int32
	err := d.check("cudnnFindConvolutionForwardAlgorithmEx", d.findConvFwdAlgoEx(uintptr(h), uintptr(xd), uintptr(x), uintptr(wd), uintptr(w), uintptr(cd), uintptr(yd), uintptr(y), int32(len(perf)), &n, &perf[0], uintptr(ws), uint64(wsSize)))
	if err != nil {
		return nil, err
	}
	return perf[:n], nil
}

// ConvForwardWorkspace is the workspace algo needs for this convolution.
func (d *DNN) ConvForwardWorkspace(h DNNHandle, x TensorDesc, w FilterDesc, c ConvDesc, y TensorDesc, algo int) (int64, error) {
	var n uint64
	err := d.check("cudnnGetConvolutionForwardWorkspaceSize", d.getConvFwdWsSize(uintptr(h), uintptr(x), uintptr(w), uintptr(c), uintptr(y), int32(algo), &n))
	return int64(n), err
}

// Scaling factors cuDNN reads through pointers; package-level so their
// addresses are stable.
var (
	scaleOne  float32 = 1
	scaleZero float32 = 0
)

// ConvForward enqueues y = conv(x, w).
func (d *DNN) ConvForward(h DNNHandle, xd TensorDesc, x DevPtr, wd FilterDesc, w DevPtr, cd ConvDesc, algo int, ws DevPtr, wsSize int64, yd TensorDesc, y DevPtr) error {
	c, _, _ := purego.SyscallN(d.convForward, uintptr(h), uintptr(unsafe.Pointer(&scaleOne)), uintptr(xd), uintptr(x),
		uintptr(wd), uintptr(w), uintptr(cd), uintptr(algo), uintptr(ws), uintptr(wsSize),
		uintptr(unsafe.Pointer(&scaleZero)), uintptr(yd), uintptr(y))
	if int32(c) != cudnnStatusSuccess {
		return d.check("cudnnConvolutionForward", int32(c))
	}
	return nil
}

// ConvBiasActForward enqueues y = act(conv(x, w) + z + bias) where z (the
// residual) is added when z != 0 (zd must still describe y's shape) and act
// is a's activation.
func (d *DNN) ConvBiasActForward(h DNNHandle, xd TensorDesc, x DevPtr, wd FilterDesc, w DevPtr, cd ConvDesc, algo int, ws DevPtr, wsSize int64,
	zd TensorDesc, z DevPtr, bd TensorDesc, bias DevPtr, a ActivationDesc, yd TensorDesc, y DevPtr) error {
	alpha2 := &scaleOne
	if z == 0 {
		// cuDNN reads z even when alpha2 is 0 (it must not be null): point
		// it at y, which holds the same shape.
		z, alpha2 = y, &scaleZero
	}
	c, _, _ := purego.SyscallN(d.convBiasActForward, uintptr(h), uintptr(unsafe.Pointer(&scaleOne)), uintptr(xd), uintptr(x),
		uintptr(wd), uintptr(w), uintptr(cd), uintptr(algo), uintptr(ws), uintptr(wsSize),
		uintptr(unsafe.Pointer(alpha2)), uintptr(zd), uintptr(z), uintptr(bd), uintptr(bias), uintptr(a), uintptr(yd), uintptr(y))
	if int32(c) != cudnnStatusSuccess {
		return d.check("cudnnConvolutionBiasActivationForward", int32(c))
	}
	return nil
}
