package ir

// The neural-network ops' attributes. Spatial attributes are per spatial
// dimension (2 for images); Pads hold the begin values of every spatial
// dimension, then the end values, as ONNX does. Importers resolve auto_pad
// into explicit Pads once input shapes are known, so AutoPad is kept only
// for that.

// Activation is the epilogue activation of a fused op.
type Activation uint8

// The activations an epilogue can apply.
const (
	ActNone Activation = iota
	ActRelu
	ActRelu6 // Clip(0, 6)
	ActClip  // Clip(Lo, Hi) with the op's bounds
	ActSigmoid
	ActSiLU
	ActHardSwish
	ActHardSigmoid
	ActGELU     // exact, with erf
	ActGELUTanh // tanh approximation
	ActLeakyRelu
	ActTanh
)

// Epilogue is what a fused Conv or Gemm applies to its output, in order:
// add the bias (the op's optional input), add the residual (an extra
// input), then the activation.
type Epilogue struct {
	Act Activation
	// Alpha, Beta parameterize LeakyRelu (Alpha), HardSigmoid (Alpha, Beta)
	// and Clip (Lo, Hi).
	Alpha, Beta float64
	Lo, Hi      float64
	// Residual: the node has one more input, added before the activation.
	Residual bool
}

// Conv is an N-d convolution (ONNX Conv): inputs X [N,C,spatial...],
// W [M, C/Group, k...], optional B [M]; with a fused Epilogue, an extra
// residual input follows B (B may be absent).
type Conv struct {
	Kernel    []int // from W's shape when not given
	Strides   []int
	Pads      []int // begins then ends
	Dilations []int
	Group     int
	AutoPad   string // "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"
	Epilogue  Epilogue
}

// ConvTranspose is ONNX's ConvTranspose.
type ConvTranspose struct {
	Kernel        []int
	Strides       []int
	Pads          []int
	Dilations     []int
	OutputPadding []int
	OutputShape   []int
	Group         int
	AutoPad       string
}

// Pool is MaxPool or AveragePool over the spatial dimensions.
type Pool struct {
	Max             bool
	Kernel          []int
	Strides         []int
	Pads            []int
	Dilations       []int
	CeilMode        bool
	CountIncludePad bool
	AutoPad         string
	StorageOrder    int  // MaxPool's second output layout (unused by goinfer)
	WantIndices     bool // MaxPool with its Indices output
}

// GlobalPool averages (or takes the max of) every spatial dimension,
// keeping them as size 1.
type GlobalPool struct{ Max bool }

// LpPool is ONNX's LpPool: the P-norm of each window (padding adds
// nothing). The window attributes are Pool's (Max and the average-only
// fields unused). It is a type of its own so that an engine without it
// refuses it rather than running it as a Pool.
type LpPool struct {
	Pool Pool
	P    int
}

// GlobalLpPool is the P-norm over every spatial dimension, kept as size 1.
type GlobalLpPool struct{ P int }

// Gemm is ONNX's Gemm: Y = alpha * A' B' + beta * C, A' = A or A^T,
// B' = B or B^T; with a fused Epilogue a residual input follows C.
type Gemm struct {
	Alpha, Beta    float64
	TransA, TransB bool
	Epilogue       Epilogue
}

// MatMul is NumPy's matmul with broadcast batch dimensions. With a fused
// Epilogue, an optional bias (broadcast to the output, typically [N])
// follows the two operands, then the residual.
type MatMul struct{ Epilogue Epilogue }

// BatchNorm is inference-mode BatchNormalization: inputs X, scale, B,
// mean, var.
type BatchNorm struct{ Epsilon float64 }

// LayerNorm is LayerNormalization over the dimensions from Axis on:
// inputs X, Scale, optional B.
type LayerNorm struct {
	Axis    int
	Epsilon float64
}

// InstanceNorm is InstanceNormalization: inputs X, scale, B.
type InstanceNorm struct{ Epsilon float64 }

// LRN is local response normalization across channels.
type LRN struct {
	Alpha, Beta, Bias float64
	Size              int
}

// Clip bounds values; Min and Max are optional inputs (absent: no bound).
type Clip struct{}

// LeakyRelu is max(x, Alpha*x) for Alpha < 1.
type LeakyRelu struct{ Alpha float64 }

// Elu is ONNX's Elu.
type Elu struct{ Alpha float64 }

// Selu is ONNX's Selu.
type Selu struct{ Alpha, Gamma float64 }

// Celu is ONNX's Celu.
type Celu struct{ Alpha float64 }

// HardSigmoid is max(0, min(1, Alpha*x + Beta)).
type HardSigmoid struct{ Alpha, Beta float64 }

// Gelu is ONNX's Gelu (opset 20): exact (erf) or the tanh approximation.
type Gelu struct{ Tanh bool }

// Softmax, LogSoftmax (Log) and Hardmax (Hard) normalize along Axis
// (opset 13 semantics). Coerce2D is the semantics before opset 13: the
// input is seen as 2-D, [prod(dims before Axis), prod(dims from Axis on)],
// and each row is normalized as a whole.
type Softmax struct {
	Axis     int
	Log      bool
	Hard     bool
	Coerce2D bool
}

// Resize is ONNX's Resize (opset 19 semantics): inputs X, roi, scales,
// sizes, each but X optional (scales or sizes must be given, as load-time
// constants). With ScalesOnly the inputs are X and scales, as Upsample's
// and Resize-10's are.
type Resize struct {
	Mode                    string // "nearest", "linear", "cubic"
	CoordinateTransformMode string
	NearestMode             string
	CubicCoeffA             float64
	ExcludeOutside          bool
	Antialias               bool
	// Axes are the dimensions roi, scales and sizes refer to; empty: all.
	Axes []int
	// ExtrapolationValue fills tf_crop_and_resize's samples outside X.
	ExtrapolationValue float64
	// KeepAspectRatioPolicy is "stretch", "not_larger" or "not_smaller".
	KeepAspectRatioPolicy string
	ScalesOnly            bool
}
