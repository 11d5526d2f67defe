package model

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"goinfer/internal/checkpoint"
	"goinfer/internal/tensor"
)

// BlockKind is a ResNet residual block type.
type BlockKind uint8

// The two torchvision block types.
const (
	Basic      BlockKind = iota + 1 // two 3x3 convs (ResNet-18/34)
	Bottleneck                      // 1x1, 3x3, 1x1 (ResNet-50 and deeper)
)

// ErrNotResNet marks a state dict whose keys are not those of a
// torchvision ResNet, so that callers can try other architectures.
var ErrNotResNet = errors.New("not a torchvision ResNet state dict")

func (b BlockKind) String() string {
	switch b {
	case Basic:
		return "basic"
	case Bottleneck:
		return "bottleneck"
	}
	return "unknown"
}

// Stage is one group of residual blocks ("layer1" ... "layer4").
type Stage struct {
	Blocks int
	Width  int // channels inside a block (conv1's output)
	Out    int // channels a block outputs
	Stride int // stride of the stage's first block
	Groups int // groups of the 3x3 conv (ResNeXt); 1 otherwise
}

// Arch is a ResNet's shape as torchvision builds it. It is inferred from a
// checkpoint's tensor names and shapes, or chosen by name for `model init`.
type Arch struct {
	Block      BlockKind
	InChannels int
	Stem       int // conv1's output channels
	StemK      int // conv1's kernel (7 in torchvision)
	Stages     []Stage
	Classes    int
}

// Blocks returns the blocks per stage, e.g. [2 2 2 2].
func (a Arch) Blocks() []int {
	b := make([]int, len(a.Stages))
	for i, s := range a.Stages {
		b[i] = s.Blocks
	}
	return b
}

// Widths returns each stage's inner width.
func (a Arch) Widths() []int {
	w := make([]int, len(a.Stages))
	for i, s := range a.Stages {
		w[i] = s.Width
	}
	return w
}

// Name is torchvision's name when the layout is a standard one
// ("resnet18", "resnet50", "wide_resnet50_2", ...), otherwise a description
// such as "resnet-basic[2 2 2 2]-w16".
func (a Arch) Name() string {
	for _, name := range knownNames {
		k, _ := KnownArch(name, a.Classes)
		if archEqual(k, a) {
			return name
		}
	}
	return fmt.Sprintf("resnet-%s%v-w%d", a.Block, a.Blocks(), a.Stem)
}

func archEqual(a, b Arch) bool {
	if a.Block != b.Block || a.InChannels != b.InChannels || a.Stem != b.Stem || a.StemK != b.StemK || a.Classes != b.Classes || len(a.Stages) != len(b.Stages) {
		return false
	}
	for i := range a.Stages {
		if a.Stages[i] != b.Stages[i] {
			return false
		}
	}
	return true
}

var knownNames = []string{"resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "wide_resnet50_2", "wide_resnet101_2", "resnext50_32x4d", "resnext101_32x8d"}

// KnownArchNames lists the names KnownArch accepts.
func KnownArchNames() []string { return append([]string(nil), knownNames...) }

// KnownArch returns torchvision's layout for name with the given class count
// (1000 for ImageNet).
func KnownArch(name string, classes int) (Arch, error) {
	var block BlockKind
	var layers []int
	groups, widthPerGroup := 1, 64
	switch name {
	case "resnet18":
		block, layers = Basic, []int{2, 2, 2, 2}
	case "resnet34":
		block, layers = Basic, []int{3, 4, 6, 3}
	case "resnet50":
		block, layers = Bottleneck, []int{3, 4, 6, 3}
	case "resnet101":
		block, layers = Bottleneck, []int{3, 4, 23, 3}
	case "resnet152":
		block, layers = Bottleneck, []int{3, 8, 36, 3}
	case "wide_resnet50_2":
		block, layers, widthPerGroup = Bottleneck, []int{3, 4, 6, 3}, 128
	case "wide_resnet101_2":
		block, layers, widthPerGroup = Bottleneck, []int{3, 4, 23, 3}, 128
	case "resnext50_32x4d":
		block, layers, groups, widthPerGroup = Bottleneck, []int{3, 4, 6, 3}, 32, 4
	case "resnext101_32x8d":
		block, layers, groups, widthPerGroup = Bottleneck, []int{3, 4, 23, 3}, 32, 8
	default:
		return Arch{}, fmt.Errorf("unknown architecture %q (known: %s)", name, strings.Join(knownNames, ", "))
	}
	return NewArch(block, layers, 64, classes, groups, widthPerGroup), nil
}

// NewArch builds torchvision's layout for a block type, blocks per stage and
// base width (64 in torchvision; smaller for narrow test models). groups and
// widthPerGroup are torchvision's ResNeXt/wide parameters (1 and 64 for a
// plain ResNet); they scale the bottleneck's inner width.
func NewArch(block BlockKind, layers []int, base, classes, groups, widthPerGroup int) Arch {
	a := Arch{Block: block, InChannels: 3, Stem: base, StemK: 7, Classes: classes}
	for i, n := range layers {
		planes := base << i
		s := Stage{Blocks: n, Width: planes, Out: planes, Stride: 2, Groups: 1}
		if i == 0 {
			s.Stride = 1
		}
		if block == Bottleneck {
			s.Width = planes * widthPerGroup / 64 * groups
			s.Out = planes * 4
			s.Groups = groups
		}
		a.Stages = append(a.Stages, s)
	}
	return a
}

// ParamSpec is one tensor a checkpoint of an Arch must hold.
type ParamSpec struct {
	Name  string
	Shape tensor.Shape
	// Optional tensors (num_batches_tracked) may be absent.
	Optional bool
}

func bnSpecs(prefix string, c int) []ParamSpec {
	return []ParamSpec{
		{Name: prefix + ".weight", Shape: tensor.Shape{c}},
		{Name: prefix + ".bias", Shape: tensor.Shape{c}},
		{Name: prefix + ".running_mean", Shape: tensor.Shape{c}},
		{Name: prefix + ".running_var", Shape: tensor.Shape{c}},
		{Name: prefix + ".num_batches_tracked", Shape: tensor.Shape{}, Optional: true},
	}
}

// blockLayout lists a block's convs in forward order: name, out, in/groups,
// kernel, stride, groups.
type convSpec struct {
	name                      string
	out, in, k, stride, group int
}

func (a Arch) blockConvs(s Stage, in, stride int) []convSpec {
	if a.Block == Basic {
		return []convSpec{
			{"conv1", s.Width, in, 3, stride, 1},
			{"conv2", s.Width, s.Width, 3, 1, 1},
		}
	}
	return []convSpec{
		{"conv1", s.Width, in, 1, 1, 1},
		{"conv2", s.Width, s.Width, 3, stride, s.Groups},
		{"conv3", s.Out, s.Width, 1, 1, 1},
	}
}

// Params lists every tensor a torchvision state dict of this arch holds, in
// torchvision's order.
func (a Arch) Params() []ParamSpec {
	var ps []ParamSpec
	ps = append(ps, ParamSpec{Name: "conv1.weight", Shape: tensor.Shape{a.Stem, a.InChannels, a.StemK, a.StemK}})
	ps = append(ps, bnSpecs("bn1", a.Stem)...)
	in := a.Stem
	for si, s := range a.Stages {
		for b := 0; b < s.Blocks; b++ {
			prefix := fmt.Sprintf("layer%d.%d.", si+1, b)
			stride := 1
			if b == 0 {
				stride = s.Stride
			}
			for i, c := range a.blockConvs(s, in, stride) {
				ps = append(ps, ParamSpec{Name: prefix + c.name + ".weight", Shape: tensor.Shape{c.out, c.in / c.group, c.k, c.k}})
				ps = append(ps, bnSpecs(fmt.Sprintf("%sbn%d", prefix, i+1), c.out)...)
			}
			if stride != 1 || in != s.Out {
				ps = append(ps, ParamSpec{Name: prefix + "downsample.0.weight", Shape: tensor.Shape{s.Out, in, 1, 1}})
				ps = append(ps, bnSpecs(prefix+"downsample.1", s.Out)...)
			}
			in = s.Out
		}
	}
	ps = append(ps, ParamSpec{Name: "fc.weight", Shape: tensor.Shape{a.Classes, in}})
	ps = append(ps, ParamSpec{Name: "fc.bias", Shape: tensor.Shape{a.Classes}})
	return ps
}

// lastOut is the channel count the final stage outputs.
func (a Arch) lastOut() int {
	if len(a.Stages) == 0 {
		return a.Stem
	}
	return a.Stages[len(a.Stages)-1].Out
}

// InferArch reads a torchvision ResNet layout off a state dict's names and
// shapes. It checks only the anchor tensors it reads; Build checks them all.
func InferArch(sd *checkpoint.StateDict) (Arch, error) {
	shape := func(name string) (tensor.Shape, bool) {
		t, ok := sd.Get(name)
		if !ok {
			return nil, false
		}
		return t.Shape, true
	}
	need := func(name string, rank int) (tensor.Shape, error) {
		s, ok := shape(name)
		if !ok {
			return nil, fmt.Errorf("checkpoint has no key %q: %w (%s)", name, ErrNotResNet, firstKeys(sd))
		}
		if len(s) != rank {
			return nil, fmt.Errorf("checkpoint key %q has shape %v, want rank %d", name, s, rank)
		}
		for _, d := range s {
			if d <= 0 {
				return nil, fmt.Errorf("checkpoint key %q has shape %v with an empty dimension", name, s)
			}
		}
		return s, nil
	}
	c1, err := need("conv1.weight", 4)
	if err != nil {
		return Arch{}, err
	}
	if c1[2] != c1[3] {
		return Arch{}, fmt.Errorf("checkpoint key \"conv1.weight\" has shape %v: the stem kernel must be square", c1)
	}
	a := Arch{Block: Basic, Stem: c1[0], InChannels: c1[1], StemK: c1[2]}
	if _, ok := shape("layer1.0.conv3.weight"); ok {
		a.Block = Bottleneck
	}
	for si := 1; ; si++ {
		if _, ok := shape(fmt.Sprintf("layer%d.0.conv1.weight", si)); !ok {
			break
		}
		s := Stage{Stride: 2, Groups: 1}
		if si == 1 {
			s.Stride = 1
		}
		for b := 0; ; b++ {
			if _, ok := shape(fmt.Sprintf("layer%d.%d.conv1.weight", si, b)); !ok {
				break
			}
			s.Blocks++
		}
		w, err := need(fmt.Sprintf("layer%d.0.conv1.weight", si), 4)
		if err != nil {
			return Arch{}, err
		}
		s.Width, s.Out = w[0], w[0]
		if a.Block == Bottleneck {
			c2, err := need(fmt.Sprintf("layer%d.0.conv2.weight", si), 4)
			if err != nil {
				return Arch{}, err
			}
			if s.Width%c2[1] != 0 {
				return Arch{}, fmt.Errorf("checkpoint key %q has shape %v: %d input channels per group does not divide width %d", fmt.Sprintf("layer%d.0.conv2.weight", si), c2, c2[1], s.Width)
			}
			s.Groups = s.Width / c2[1]
			c3, err := need(fmt.Sprintf("layer%d.0.conv3.weight", si), 4)
			if err != nil {
				return Arch{}, err
			}
			s.Out = c3[0]
		}
		a.Stages = append(a.Stages, s)
	}
	if len(a.Stages) == 0 {
		return Arch{}, fmt.Errorf("checkpoint has no key \"layer1.0.conv1.weight\": %w (%s)", ErrNotResNet, firstKeys(sd))
	}
	fc, err := need("fc.weight", 2)
	if err != nil {
		return Arch{}, err
	}
	a.Classes = fc[0]
	return a, nil
}

func firstKeys(sd *checkpoint.StateDict) string {
	n := sd.Names()
	if len(n) == 0 {
		return "it is empty"
	}
	if len(n) > 4 {
		n = append(n[:4], "...")
	}
	return "its keys are " + strings.Join(n, ", ")
}

// StripPrefix removes a "module." prefix that DataParallel checkpoints carry
// on every key, returning sd itself when there is none.
func StripPrefix(sd *checkpoint.StateDict) *checkpoint.StateDict {
	names := sd.Names()
	if len(names) == 0 {
		return sd
	}
	for _, n := range names {
		if !strings.HasPrefix(n, "module.") {
			return sd
		}
	}
	out := checkpoint.NewStateDict()
	for _, n := range names {
		t, _ := sd.Get(n)
		out.Set(strings.TrimPrefix(n, "module."), t)
	}
	return out
}

// CheckParams compares a state dict with what arch needs and reports every
// missing key, unexpected key and wrong shape, naming the key and both shapes.
func CheckParams(a Arch, sd *checkpoint.StateDict) error {
	want := map[string]ParamSpec{}
	var problems []string
	for _, p := range a.Params() {
		want[p.Name] = p
		t, ok := sd.Get(p.Name)
		if !ok {
			if !p.Optional {
				problems = append(problems, fmt.Sprintf("missing key %q (want shape %v)", p.Name, p.Shape))
			}
			continue
		}
		if !t.Shape.Equal(p.Shape) {
			problems = append(problems, fmt.Sprintf("key %q has shape %v, want %v", p.Name, t.Shape, p.Shape))
			continue
		}
		if !p.Optional {
			switch t.DType {
			case tensor.Float32, tensor.Float16, tensor.BFloat16, tensor.Float64:
			default:
				problems = append(problems, fmt.Sprintf("key %q has dtype %s, want a floating-point type", p.Name, t.DType))
			}
		}
	}
	var extra []string
	for _, n := range sd.Names() {
		if _, ok := want[n]; !ok {
			t, _ := sd.Get(n)
			extra = append(extra, fmt.Sprintf("unexpected key %q (shape %v)", n, t.Shape))
		}
	}
	sort.Strings(extra)
	problems = append(problems, extra...)
	if len(problems) == 0 {
		return nil
	}
	const maxShown = 8
	msg := strings.Join(problems[:min(len(problems), maxShown)], "; ")
	if len(problems) > maxShown {
		msg += fmt.Sprintf("; and %d more", len(problems)-maxShown)
	}
	return fmt.Errorf("checkpoint does not fit %s: %s", a.Name(), msg)
}

// FromStateDict infers the architecture, checks every tensor against it, and
// builds the eager graph (one node per torchvision module). The graph copies
// the weights to float32, so sd may be closed afterwards.
func FromStateDict(sd *checkpoint.StateDict) (*Graph, error) {
	sd = StripPrefix(sd)
	a, err := InferArch(sd)
	if err != nil {
		return nil, err
	}
	if err := CheckParams(a, sd); err != nil {
		return nil, err
	}
	return Build(a, sd)
}

// Build makes the eager graph of arch with weights from sd, which must
// already fit arch (CheckParams).
func Build(a Arch, sd *checkpoint.StateDict) (*Graph, error) {
	return build(a, sd, true)
}

// build is Build; with own false the graph's weights share sd's memory
// instead of copying it, for callers that own sd's data (Init does: a copy
// of a ResNet-18's 47 MB costs tens of milliseconds of page faults).
func build(a Arch, sd *checkpoint.StateDict, own bool) (*Graph, error) {
	g := &Graph{Arch: a, NumValues: 1, InChannels: a.InChannels, Classes: a.Classes}
	b := &builder{g: g}
	var firstErr error
	get := func(name string) []float32 {
		t, ok := sd.Get(name)
		if !ok {
			if firstErr == nil {
				firstErr = fmt.Errorf("checkpoint has no key %q", name)
			}
			return nil
		}
		v, err := t.ToFloat32()
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("checkpoint key %q: %w", name, err)
			}
			return nil
		}
		if !own {
			return v
		}
		// Own the data: the state dict may be a memory mapping about to close.
		return append([]float32(nil), v...)
	}
	conv := func(x Value, name string, out, in, k, stride, pad, groups int) Value {
		return b.add(&Node{Name: name, Op: OpConv, Inputs: []Value{x}, Conv: &Conv{
			InC: in, OutC: out, K: k, Stride: stride, Pad: pad, Groups: groups, Weight: get(name + ".weight"),
		}})
	}
	bn := func(x Value, name string, c int) Value {
		return b.add(&Node{Name: name, Op: OpBatchNorm, Inputs: []Value{x}, BN: &BatchNorm{
			C: c, Gamma: get(name + ".weight"), Beta: get(name + ".bias"),
			Mean: get(name + ".running_mean"), Var: get(name + ".running_var"), Eps: 1e-5,
		}})
	}
	relu := func(x Value, name string) Value {
		return b.add(&Node{Name: name, Op: OpReLU, Inputs: []Value{x}})
	}

	x := conv(0, "conv1", a.Stem, a.InChannels, a.StemK, 2, a.StemK/2, 1)
	x = bn(x, "bn1", a.Stem)
	x = relu(x, "relu")
	x = b.add(&Node{Name: "maxpool", Op: OpMaxPool, Inputs: []Value{x}, Pool: &Pool{K: 3, Stride: 2, Pad: 1}})
	in := a.Stem
	for si, s := range a.Stages {
		for bi := 0; bi < s.Blocks; bi++ {
			prefix := fmt.Sprintf("layer%d.%d.", si+1, bi)
			stride := 1
			if bi == 0 {
				stride = s.Stride
			}
			identity := x
			convs := a.blockConvs(s, in, stride)
			for i, c := range convs {
				x = conv(x, prefix+c.name, c.out, c.in, c.k, c.stride, c.k/2, c.group)
				x = bn(x, fmt.Sprintf("%sbn%d", prefix, i+1), c.out)
				if i < len(convs)-1 {
					x = relu(x, fmt.Sprintf("%srelu%d", prefix, i+1))
				}
			}
			if stride != 1 || in != s.Out {
				identity = conv(identity, prefix+"downsample.0", s.Out, in, 1, stride, 0, 1)
				identity = bn(identity, prefix+"downsample.1", s.Out)
			}
			x = b.add(&Node{Name: prefix + "add", Op: OpAdd, Inputs: []Value{x, identity}})
			x = relu(x, prefix+"relu")
			in = s.Out
		}
	}
	x = b.add(&Node{Name: "avgpool", Op: OpGlobalAvgPool, Inputs: []Value{x}})
	x = b.add(&Node{Name: "fc", Op: OpLinear, Inputs: []Value{x}, Linear: &Linear{
		In: in, Out: a.Classes, Weight: get("fc.weight"), Bias: get("fc.bias"),
	}})
	g.Output = x
	if firstErr != nil {
		return nil, firstErr
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("building %s: %w", a.Name(), err)
	}
	return g, nil
}

func sqrt64(x float64) float64 { return math.Sqrt(x) }
