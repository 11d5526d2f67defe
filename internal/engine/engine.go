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
	"fmt"
	"strings"
	"time"

	"goinfer/internal/model"
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
	// Progress, when set, receives human-readable lines about long steps
	// (autotuning, capture).
	Progress func(format string, args ...any)
	// TuningCache, when set, is a directory where the engine keeps its
	// autotuning results between processes (one file per GPU model and
	// library versions), so that a later Compile on the same machine skips
	// the measurements: a faster cold start, as TensorRT's timing cache.
	TuningCache string
}

// ImageNet normalization, applied on the device to uint8 input: the
// torchvision eval transform's mean and std, scaled to 0..255 pixels.
var (
	ImageNetMean = [3]float32{0.485, 0.456, 0.406}
	ImageNetStd  = [3]float32{0.229, 0.224, 0.225}
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

// Info describes a loaded model.
type Info struct {
	Engine     string // "cpu", "cuda"
	Device     string // "cpu (8 threads)", "NVIDIA H200 (cuda:0)"
	Arch       string
	Classes    int
	InChannels int
	Height     int
	Width      int
	InputDType tensor.DType
	Precision  Precision
	Compiled   bool
	MaxBatch   int
	// CompileTime is the time Load and NewInstance spent on compile-only
	// work (fusing, autotuning, capture), so callers can report load and
	// compile time apart as the reference does.
	CompileTime time.Duration
	// WeightBytes is device memory holding weights, shared by instances.
	WeightBytes int64
}

// InputBytes is the size of one image of the model's input.
func (i Info) InputBytes() int {
	return i.InChannels * i.Height * i.Width * i.InputDType.Size()
}

// OutputBytes is the size of one image's float32 logits.
func (i Info) OutputBytes() int { return i.Classes * 4 }

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
