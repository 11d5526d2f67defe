// Package engine defines how a model graph runs on a device. An Engine loads
// a model.Graph onto a Device and returns a Model; each pipeline worker takes
// an Instance of it (its own stream, workspace and activation buffers) and
// enqueues forwards on its stream.
//
// The interfaces follow CUDA's execution model: device buffers, pinned host
// buffers, streams that order work, events that mark points in a stream. The
// cpu engine implements them synchronously (a "stream" runs work at once and
// events are complete when recorded), so the same pipeline code drives both.
package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"goinfer/internal/ir"
	"goinfer/internal/model"
	"goinfer/internal/preprocess"
	"goinfer/internal/tensor"
)

// Precision is the arithmetic an engine uses inside the network.
type Precision uint8

// The precisions of --precision.
const (
	FP32 Precision = iota // full float32, tensor-core TF32 off
	TF32                  // float32 storage, TF32 tensor-core math allowed
	FP16                  // float16 storage and math (fp32 accumulation), NHWC
	BF16                  // bfloat16 storage and math (fp32 accumulation), NHWC
)

func (p Precision) String() string {
	switch p {
	case FP32:
		return "fp32"
	case TF32:
		return "tf32"
	case FP16:
		return "fp16"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("precision(%d)", uint8(p))
}

// ParsePrecision reads a --precision value.
func ParsePrecision(s string) (Precision, error) {
	switch strings.ToLower(s) {
	case "fp32", "float32":
		return FP32, nil
	case "tf32":
		return TF32, nil
	case "fp16", "float16", "half":
		return FP16, nil
	case "bf16", "bfloat16":
		return BF16, nil
	}
	return 0, fmt.Errorf("unknown precision %q (want fp32, tf32, fp16 or bf16)", s)
}

// SplitAuto is Options.SplitBatch's value that lets the cpu engine choose
// whether and in what chunks to split each batch.
const SplitAuto = -1

// Options say how to load a model.
type Options struct {
	// Compile trades a slower start for a faster steady state, as
	// torch.compile does: batch norms folded, epilogues fused, algorithms
	// chosen by measurement, forwards captured as CUDA graphs.
	Compile   bool
	Precision Precision
	// MaxBatch is the largest batch an Instance accepts; buffers are sized
	// for it once.
	MaxBatch int
	// BatchSizes are the batch sizes to prepare ahead (autotuning and graph
	// capture); other sizes up to MaxBatch still run. Empty means MaxBatch.
	BatchSizes []int
	// Height and Width of the input images. Engines may specialize on them.
	Height, Width int
	// InputDType is the dtype of input buffers: Float32 (normalized NCHW),
	// Float16 (normalized NCHW) or Uint8 (raw 0..255 pixels NCHW, normalized
	// with the ImageNet mean and std on the device).
	InputDType tensor.DType
	// Device is the GPU ordinal (ignored by the cpu engine).
	Device int
	// Threads bounds the cpu engine's parallelism (0: GOMAXPROCS).
	Threads int
	// NoWinograd makes the cpu engine run every convolution as a direct
	// GEMM, never as Winograd F(4x4, 3x3) (for A/B comparisons).
	NoWinograd bool
	// ExpandFusion says when the cpu engine runs an inverted residual
	// block's pointwise expansion and the depthwise convolution after it
	// as one step, band by band of rows: "off" or "" (two steps, the
	// default: measured faster on the reference host), "auto" (batches of
	// several images) or "on" (every batch).
	ExpandFusion string
	// SplitBatch (cpu engine, general graphs; 0: off) runs a forward of
	// more than SplitBatch images, a multiple of it, as chunks of
	// SplitBatch images, each on one thread, the threads taking chunks
	// in turn: a chunk's activations stay in its core's caches between
	// layers. Only for graphs whose images are independent (every
	// classifier; not a graph that mixes the batch dimension).
	// SplitAuto lets the engine choose per batch size: chunks where the
	// graph's images are independent and the split is expected to pay.
	SplitBatch int
	// Progress, when set, receives human-readable lines about long steps
	// (autotuning, capture).
	Progress func(format string, args ...any)
	// TuningCache, when set, is a directory where the engine keeps its
	// autotuning results between processes (one file per GPU model and
	// library versions), so that a later Compile on the same machine skips
	// the measurements: a faster cold start, as TensorRT's timing cache.
	TuningCache string
	// FuseChains (cuda engine, general graphs) runs chains of elementwise
	// ops whose intermediates have one consumer as one kernel. Off by
	// default until measured on a GPU.
	FuseChains bool
	// TuneAll (cuda engine, compiled ResNet path) times every candidate
	// algorithm and math type instead of the shortlist within reach of
	// Find's best: slower compiles, to check that the shortlist loses
	// nothing.
	TuneAll bool
	// Stem (cuda engine, compiled ResNet path, channels-last precisions)
	// says how the image's channels reach the first convolution: "s2d"
	// (the default when empty: space to depth, the stride-2 stem as a
	// stride-1 convolution over 2x2 pixel blocks), "pad" (zero channels up
	// to StemChannels) or "none" (the channels as they are). For A/B runs.
	Stem string
	// StemChannels is the channel count the "pad" and "s2d" stems pad a
	// narrow input to (0: 8).
	StemChannels int
	// KernelFile (cuda engine, ResNet path) is a PTX, cubin or fatbin file
	// loaded instead of the embedded elementwise kernels, for trying
	// kernels without rebuilding.
	KernelFile string
	// GraphKernelFile (cuda engine, general graphs) is a fatbin, cubin or
	// PTX of tools/kernels/graph.cu loaded instead of the embedded one, to
	// measure a kernel built with nvcc on the GPU machine before it is
	// committed.
	GraphKernelFile string
	// GraphExperiments (cuda engine) is a comma-separated list of fusion
	// changes to turn off or force, for A/B runs and tests. ResNet path:
	// "nomma" (no split tensor-core convolutions: cuDNN only), "forcemma"
	// (every convolution they can run uses them, faster or not),
	// "mmanosplit" (only their unsplit form). General graphs: "noidentity" (a
	// convolution whose activation cuDNN's fused call lacks runs that call
	// with the identity, bias fused, then the activation), "noprologue" (a
	// 1x1 expansion's SiLU, hard swish or ReLU6 applied by the depthwise
	// kernel reading its output, as it loads), "nofindmath" (unfused
	// convolutions run under the math type cudnnFind measured their
	// algorithm with), "noltune" (cuBLASLt's heuristic algorithm, untimed),
	// "nolnvec" (layer norms without the one-read vector kernel),
	// "nolngroup" (nor the several-rows-a-warp kernel many short rows
	// take; "lngroup" forces it),
	// "nodwrows" (the row-split depthwise kernel not among those timed),
	// "nodwslide" (nor the sliding-window one), "nodwsmem" (nor the
	// shared-memory one), "nopdl" (the graph's own
	// kernels launched the ordinary way, not as programmatic dependents),
	// "noattnsplit" (no key-split attention for few query tiles); "findlog"
	// reports cudnnFind's ranking of each convolution through Progress.
	// Empty: every change on.
	GraphExperiments string
}

// ImageNet normalization, applied on the device to uint8 input: the
// torchvision eval transform's mean and std, scaled to 0..255 pixels.
var (
	ImageNetMean = preprocess.ImageNetMean
	ImageNetStd  = preprocess.ImageNetStd
)

// Engine turns graphs into runnable models on its kind of device.
type Engine interface {
	// Name is the --engine value: "cpu", "cuda".
	Name() string
	// Available returns nil when the engine can run here, or an error that
	// says what is missing and how to fix it.
	Available() error
	// Load prepares g on a device. With opts.Compile it fuses and tunes.
	Load(ctx context.Context, g *model.Graph, opts Options) (Model, error)
}

// TensorSpec describes one named input or output of a model: its element
// type and its shape for one sample (the batch dimension is left out; every
// tensor of a model is batched along a leading dimension).
type TensorSpec struct {
	Name  string
	DType tensor.DType
	Shape []int
}

// Elems is the number of elements of one sample.
func (s TensorSpec) Elems() int {
	n := 1
	for _, d := range s.Shape {
		n *= d
	}
	return n
}

// Bytes is the size of one sample.
func (s TensorSpec) Bytes() int { return s.Elems() * s.DType.Size() }

// String is "input float32 [3 224 224]".
func (s TensorSpec) String() string { return fmt.Sprintf("%s %s %v", s.Name, s.DType, s.Shape) }

// Names of the tensors of the ResNet graphs, which have no names of their
// own; graphs from other formats carry theirs.
const (
	DefaultInputName  = "input"
	DefaultOutputName = "logits"
)

// GraphLoader is an Engine that also runs general graphs (ONNX models,
// torchvision architectures beyond the ResNets): g is bound to no batch
// size yet; the engine binds it for opts.MaxBatch and the batch sizes it
// prepares. Engines that run only the ResNet graphs do not implement it.
type GraphLoader interface {
	LoadGraph(ctx context.Context, g *ir.Graph, opts Options) (Model, error)
}

// Preparer is an Engine that can set a device up before it has a model:
// the work that depends on no model (a GPU's context, its libraries'
// handles) then overlaps with reading or building the model, which a cold
// start otherwise does first.
type Preparer interface {
	// Prepare starts that work for device in the background and returns
	// at once; Load on device waits for it. Calling it again is harmless.
	// Its errors are not reported: Load meets them again and says so.
	Prepare(device int)
}

// Info describes a loaded model. A model is described by its named input
// and output tensors, so that everything above the engine follows the
// model instead of assuming an image classifier's shapes. Forward takes
// the first input and writes the first output, as float32.
type Info struct {
	Engine  string // "cpu", "cuda"
	Device  string // "cpu (8 threads)", "NVIDIA H200 (cuda:0)"
	Arch    string
	Inputs  []TensorSpec
	Outputs []TensorSpec
	// Precision is the arithmetic inside the network.
	Precision Precision
	Compiled  bool
	MaxBatch  int
	// CompileTime is the time Load and NewInstance spent on compile-only
	// work (fusing, autotuning, capture), so callers can report load and
	// compile time apart as the reference does.
	CompileTime time.Duration
	// WeightBytes is device memory holding weights, shared by instances.
	WeightBytes int64
}

// Input is the model's first input, the one Forward takes.
func (i Info) Input() TensorSpec {
	if len(i.Inputs) == 0 {
		return TensorSpec{}
	}
	return i.Inputs[0]
}

// Output is the model's first output, the one Forward writes.
func (i Info) Output() TensorSpec {
	if len(i.Outputs) == 0 {
		return TensorSpec{}
	}
	return i.Outputs[0]
}

// InputBytes is the size of one sample of the model's input.
func (i Info) InputBytes() int { return i.Input().Bytes() }

// OutputBytes is the size of one sample's float32 output.
func (i Info) OutputBytes() int { return i.Output().Elems() * 4 }

// OutputElems is the number of float32 values Forward writes per sample
// (the class count of a classifier).
func (i Info) OutputElems() int { return i.Output().Elems() }

// ImageInput describes a model whose input is an image batch [N, C, H, W]:
// its channels, height and width. ok is false for other inputs.
func (i Info) ImageInput() (c, h, w int, ok bool) {
	s := i.Input().Shape
	if len(s) != 3 {
		return 0, 0, 0, false
	}
	return s[0], s[1], s[2], true
}

// Validate says whether the model's description is usable by a pipeline:
// an input and an output with positive dimensions, a sized input dtype and
// a positive MaxBatch.
func (i Info) Validate() error {
	if len(i.Inputs) == 0 || len(i.Outputs) == 0 {
		return fmt.Errorf("model %s describes %d inputs and %d outputs: want at least one of each", i.Arch, len(i.Inputs), len(i.Outputs))
	}
	for _, s := range []TensorSpec{i.Input(), i.Output()} {
		for _, d := range s.Shape {
			if d <= 0 {
				return fmt.Errorf("model %s: tensor %s has a dimension that is not positive", i.Arch, s)
			}
		}
	}
	if i.Input().DType.Size() == 0 {
		return fmt.Errorf("model %s: input %s has no element size", i.Arch, i.Input())
	}
	if i.MaxBatch <= 0 {
		return fmt.Errorf("model %s: max batch %d must be positive", i.Arch, i.MaxBatch)
	}
	return nil
}

// ClassifierSpecs are the specs of a classifier graph without tensor names
// of its own (the ResNets): input [C, H, W] of dtype, output [classes].
func ClassifierSpecs(dtype tensor.DType, c, h, w, classes int) (in, out []TensorSpec) {
	return []TensorSpec{{Name: DefaultInputName, DType: dtype, Shape: []int{c, h, w}}},
		[]TensorSpec{{Name: DefaultOutputName, DType: tensor.Float32, Shape: []int{classes}}}
}

// Model is a graph loaded on one device; instances share its weights.
type Model interface {
	Info() Info
	Device() Device
	// NewInstance allocates one worker's private state (stream, library
	// handles, workspace, activations for MaxBatch; with Compile, captured
	// graphs for the prepared batch sizes). Instances may run concurrently.
	NewInstance(ctx context.Context) (Instance, error)
	// Close frees the weights. All instances must be closed first.
	Close() error
}

// Instance runs forwards on its own stream. It is not safe for concurrent
// use: one worker owns it.
type Instance interface {
	// Stream is where Forward enqueues work.
	Stream() Stream
	// Forward enqueues the forward pass of n images (1 <= n <= MaxBatch):
	// in holds n images of the model's input dtype in NCHW order, out
	// receives n*Classes float32 logits. It returns once the work is
	// enqueued, which on the cpu engine means done. Neither buffer may be
	// reused until the stream has passed this point (record an event).
	Forward(in, out Buffer, n int) error
	// MemoryBytes is the device memory this instance holds (workspace and
	// activations), for reports.
	MemoryBytes() int64
	Close() error
}

// HostIO is an Instance whose forward pass can read its input from, and
// write its logits to, page-locked host memory in place (the GPU reaching
// it over the bus), sparing a lone small request the calls and transfers
// of its two copies. in holds n images as Forward's in does and out
// receives n*Classes float32 logits; both must lie in memory the device
// can address (Device.AllocHost's, or registered through HostRegisterer).
// Neither may be touched until the stream has passed this point.
type HostIO interface {
	ForwardHost(in, out []byte, n int) error
}

// ErrNotHostMapped is ForwardHost's error, before it has enqueued
// anything, for memory the device cannot address in place: copy instead.
var ErrNotHostMapped = errors.New("host memory is not mapped for the device")

// Device is where buffers live and streams run.
type Device interface {
	// Name is a human-readable name: "cpu", "NVIDIA H200 (cuda:0)".
	Name() string
	// Alloc returns device memory of n bytes.
	Alloc(n int) (Buffer, error)
	// AllocHost returns n bytes of host memory that copies can use
	// asynchronously (page-locked on a GPU).
	AllocHost(n int) (HostBuffer, error)
	NewStream() (Stream, error)
	NewEvent() (Event, error)
}

// HostRegisterer is a Device that can page-lock host memory it did not
// allocate (cudaHostRegister), so that asynchronous copies read it
// directly, as they read AllocHost's. The HostBuffer's Bytes is the memory
// given; Free unregisters it and leaves the memory itself alone.
type HostRegisterer interface {
	RegisterHost(b []byte) (HostBuffer, error)
}

// Buffer is device memory.
type Buffer interface {
	Size() int
	Free() error
}

// HostBuffer is host memory usable by asynchronous copies.
type HostBuffer interface {
	Bytes() []byte
	Free() error
}

// Stream is an ordered queue of device work.
type Stream interface {
	// CopyToDevice enqueues a copy of src (which must lie in a HostBuffer
	// for the copy to be asynchronous) to dst at byte offset off.
	CopyToDevice(dst Buffer, off int, src []byte) error
	// CopyToHost enqueues a copy of len(dst) bytes from src at offset off.
	CopyToHost(dst []byte, src Buffer, off int) error
	// Record marks the current end of the stream in e.
	Record(e Event) error
	// Wait makes later work on this stream wait for e, on the device; the
	// calling goroutine does not block.
	Wait(e Event) error
	// Synchronize blocks until all enqueued work is done.
	Synchronize() error
	Close() error
}

// Event marks a point in a stream.
type Event interface {
	// Synchronize blocks until the marked work is done.
	Synchronize() error
	// Done reports whether the marked work is done, without blocking.
	Done() (bool, error)
	// Since returns the device time between start's mark and this one's.
	// Both must have completed.
	Since(start Event) (time.Duration, error)
	Close() error
}
