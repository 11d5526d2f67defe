// Package torchvision builds goinfer's general graph (internal/ir) for
// torchvision's classification architectures from their state dicts: all
// 80 of torchvision 0.14 (ResNet and its variants, MobileNet V2/V3,
// EfficientNet and V2, RegNet, ConvNeXt, ViT, Swin V1/V2, MaxViT,
// DenseNet, ShuffleNet V2, SqueezeNet, MNASNet, GoogLeNet, Inception v3,
// AlexNet, VGG). Each architecture is a Config (torchvision's constructor
// arguments); Build picks torchvision's named configuration, BuildWith
// takes any, which is how tests build narrow models.
//
// Every state-dict tensor is checked against the shape the architecture
// needs, and a state dict that does not fit is refused with one error
// naming every missing, unexpected and misshapen key. torchvision's own
// weight file names ("mobilenet_v3_large-5c1a4163.pth") are recognised
// (FromFileName) and bring their architecture and evaluation transform,
// which the graph carries as its Preprocess.
package torchvision

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"goinfer/internal/checkpoint"
	"goinfer/internal/ir"
	"goinfer/internal/preprocess"
	"goinfer/internal/tensor"
)

// Config is one architecture with its hyperparameters, as torchvision's
// model constructors take them.
type Config interface {
	// Name is torchvision's architecture name for its standard
	// configurations, else a description.
	Name() string
	// build emits the network from x ([N, 3, size, size]) to the logits.
	build(b *builder, x *ir.Value, size int) *ir.Value
}

// Input and output names of the graphs Build makes.
const (
	InputName  = "input"
	OutputName = "logits"
)

// Options adjust Build.
type Options struct {
	// ImageSize is the input's height and width. 0 takes the weights'
	// crop size, else what the state dict implies (a ViT's position
	// embedding), else 224.
	ImageSize int
	// Weights is the torchvision weights entry the state dict came from,
	// when known (FromFileName finds it): it supplies the preprocessing and
	// the image size.
	Weights *Weights
	// Preprocess overrides the preprocessing the graph carries.
	Preprocess *preprocess.Spec
}

// archEntry is one named architecture.
type archEntry struct {
	config func(classes int) Config
	// classifier is the key whose first dimension is the class count.
	classifier string
}

var archs = map[string]archEntry{}

func register(name, classifier string, config func(classes int) Config) {
	archs[name] = archEntry{config: config, classifier: classifier}
}

// Archs lists the architecture names Build accepts, sorted.
func Archs() []string {
	out := make([]string, 0, len(archs))
	for n := range archs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Known reports whether arch is a name Build accepts.
func Known(arch string) bool {
	_, ok := archs[arch]
	return ok
}

// NamedConfig returns torchvision's configuration of arch for the given
// class count.
func NamedConfig(arch string, classes int) (Config, error) {
	e, ok := archs[arch]
	if !ok {
		return nil, fmt.Errorf("torchvision: unknown architecture %q (known: %s)", arch, strings.Join(Archs(), ", "))
	}
	if classes < 1 {
		return nil, fmt.Errorf("torchvision: %s with %d classes: need at least one", arch, classes)
	}
	return e.config(classes), nil
}

// Build makes the graph of torchvision's architecture arch with the
// weights of sd. The class count comes from the state dict's classifier.
// The graph does not alias sd's memory: sd may be closed afterwards.
func Build(arch string, sd *checkpoint.StateDict, opts Options) (*ir.Graph, error) {
	e, ok := archs[arch]
	if !ok {
		return nil, fmt.Errorf("torchvision: unknown architecture %q (known: %s)", arch, strings.Join(Archs(), ", "))
	}
	if sd == nil {
		return nil, fmt.Errorf("torchvision: %s: no state dict", arch)
	}
	sd = normalizeKeys(arch, sd)
	classes := 1000
	if t, ok := sd.Get(e.classifier); ok && len(t.Shape) >= 1 && t.Shape[0] > 0 {
		classes = t.Shape[0]
	}
	if opts.ImageSize == 0 && opts.Weights == nil {
		opts.ImageSize = impliedImageSize(arch, sd)
	}
	g, err := BuildWith(adapt(e.config(classes), sd), sd, opts)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// adapter is implemented by configurations with variants that only the
// state dict tells apart (MNASNet's first-version stem).
type adapter interface {
	adapt(sd *checkpoint.StateDict) Config
}

func adapt(cfg Config, sd *checkpoint.StateDict) Config {
	if a, ok := cfg.(adapter); ok {
		return a.adapt(sd)
	}
	return cfg
}

// normalizeKeys strips the "module." prefix DataParallel checkpoints put on
// every key and renames the legacy keys of torchvision's published
// DenseNet files as torchvision's loader does. sd itself is returned when
// nothing changes.
func normalizeKeys(arch string, sd *checkpoint.StateDict) *checkpoint.StateDict {
	names := sd.Names()
	strip := len(names) > 0
	for _, n := range names {
		if !strings.HasPrefix(n, "module.") {
			strip = false
			break
		}
	}
	dense := strings.HasPrefix(arch, "densenet")
	if !strip && !dense {
		return sd
	}
	out := checkpoint.NewStateDict()
	for _, n := range names {
		t, _ := sd.Get(n)
		k := n
		if strip {
			k = strings.TrimPrefix(k, "module.")
		}
		if dense {
			k = denseKey(k)
		}
		out.Set(k, t)
	}
	return out
}

// impliedImageSize reads the image size off a ViT's position embedding
// ((size/patch)^2 + 1 positions); 0 for other architectures.
func impliedImageSize(arch string, sd *checkpoint.StateDict) int {
	cfg, err := NamedConfig(arch, 1)
	if err != nil {
		return 0
	}
	v, ok := cfg.(ViTConfig)
	if !ok {
		return 0
	}
	t, ok := sd.Get("encoder.pos_embedding")
	if !ok || len(t.Shape) != 3 || t.Shape[1] < 2 {
		return 0
	}
	side := int(math.Round(math.Sqrt(float64(t.Shape[1] - 1))))
	if side*side != t.Shape[1]-1 {
		return 0
	}
	return side * v.PatchSize
}

// BuildWith makes the graph of any configuration with the weights of sd.
func BuildWith(cfg Config, sd *checkpoint.StateDict, opts Options) (*ir.Graph, error) {
	if sd == nil {
		return nil, fmt.Errorf("torchvision: %s: no state dict", cfg.Name())
	}
	pp := PreprocessFor(opts)
	size := opts.ImageSize
	if size == 0 {
		size = pp.Height
	}
	if size < 1 {
		return nil, fmt.Errorf("torchvision: image size %d must be positive", size)
	}
	if pp.Height != size || pp.Width != size {
		pp = pp.WithSize(size, size)
	}
	b := newBuilder(sd)
	g, err := b.graph(cfg, size)
	if err != nil {
		return nil, err
	}
	if err := b.finish(cfg.Name()); err != nil {
		return nil, err
	}
	g.Preprocess = &pp
	if opts.Weights != nil {
		g.Meta["weights"] = opts.Weights.Arch + "." + opts.Weights.Name
	}
	return g, nil
}

// PreprocessFor is the preprocessing opts imply: the override, the
// weights' own, or ImageNet's defaults.
func PreprocessFor(opts Options) preprocess.Spec {
	switch {
	case opts.Preprocess != nil:
		return *opts.Preprocess
	case opts.Weights != nil:
		return opts.Weights.Preprocess
	}
	return preprocess.ImageNet(224, 224)
}

// graph runs cfg's build over a fresh input, recovering the panics an
// inconsistent custom configuration could cause (a zero width, a group
// count that does not divide) as errors.
func (b *builder) graph(cfg Config, size int) (g *ir.Graph, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("torchvision: %s: invalid configuration: %v", cfg.Name(), r)
		}
	}()
	x := &ir.Value{Name: InputName, Type: ir.Type{DType: tensor.Float32, Shape: tensor.Shape{ir.Dynamic, 3, size, size}}}
	b.g.Name = cfg.Name()
	b.g.Inputs = []*ir.Value{x}
	y := cfg.build(b, x, size)
	out := b.node(OutputName, &ir.Unary{Fn: ir.OpIdentity}, y)
	b.g.Outputs = []*ir.Value{out}
	b.g.Meta = map[string]string{"producer": "goinfer/torchvision", "arch": cfg.Name()}
	return b.g, nil
}

// ParamSpecs lists every tensor a state dict of cfg holds, in the order
// the network reads them, for an input of size x size pixels (only a
// ViT's position embedding depends on it).
func ParamSpecs(cfg Config, size int) ([]ParamSpec, error) {
	b := newBuilder(nil)
	if _, err := b.graph(cfg, size); err != nil {
		return nil, err
	}
	return b.specs, nil
}

// ParamCount is the number of parameters of cfg (integer buffers and
// running statistics excluded), as torchvision counts model.parameters():
// auxiliary classifiers that the configuration holds count too.
func ParamCount(cfg Config, size int) (int64, error) {
	specs, err := ParamSpecs(cfg, size)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, s := range specs {
		if !s.Int && !s.Buffer && !isBuffer(s.Key) {
			n += int64(s.Shape.NumElements())
		}
	}
	return n, nil
}

// isBuffer tells BatchNorm's running statistics, which state dicts hold
// but model.parameters() does not count.
func isBuffer(key string) bool {
	return strings.HasSuffix(key, ".running_mean") || strings.HasSuffix(key, ".running_var")
}
