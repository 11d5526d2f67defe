// Package model holds the op graph that engines compile: a small, static,
// topologically ordered list of ops (conv, batch norm, relu, add, pooling,
// linear) over NCHW values, built from a checkpoint by the ResNet builder.
package model

import (
	"fmt"
)

// Op is the kind of a node.
type Op uint8

// The ops a ResNet needs.
const (
	OpConv Op = iota + 1
	OpBatchNorm
	OpReLU
	OpAdd
	OpMaxPool
	OpGlobalAvgPool
	OpLinear
)

func (o Op) String() string {
	switch o {
	case OpConv:
		return "conv"
	case OpBatchNorm:
		return "batchnorm"
	case OpReLU:
		return "relu"
	case OpAdd:
		return "add"
	case OpMaxPool:
		return "maxpool"
	case OpGlobalAvgPool:
		return "globalavgpool"
	case OpLinear:
		return "linear"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Value names an intermediate tensor. The graph input is value 0.
type Value int

// Conv is a 2-D convolution, square kernel, with an optional fused epilogue
// (set by Fuse): out = relu?(conv(x) + Bias + residual), which is exactly what
// cudnnConvolutionBiasActivationForward computes.
type Conv struct {
	InC, OutC int
	K         int // kernel height and width
	Stride    int
	Pad       int
	Groups    int       // 1 for ordinary convolutions
	Weight    []float32 // [OutC, InC/Groups, K, K]
	Bias      []float32 // [OutC] or nil
	Residual  bool      // Inputs[1] is added before the activation
	ReLU      bool
}

// BatchNorm is inference-mode batch normalization with running statistics:
// y = (x - Mean) / sqrt(Var + Eps) * Gamma + Beta.
type BatchNorm struct {
	C                      int
	Gamma, Beta, Mean, Var []float32
	Eps                    float32
}

// Scale and shift turn the batch norm into y = x*scale + shift per channel.
func (b *BatchNorm) ScaleShift() (scale, shift []float64) {
	scale = make([]float64, b.C)
	shift = make([]float64, b.C)
	for c := 0; c < b.C; c++ {
		s := float64(b.Gamma[c]) / sqrt64(float64(b.Var[c])+float64(b.Eps))
		scale[c] = s
		shift[c] = float64(b.Beta[c]) - float64(b.Mean[c])*s
	}
	return scale, shift
}

// Pool is a square max pooling window (PyTorch semantics: padding counts as
// -inf, floor rounding).
type Pool struct {
	K, Stride, Pad int
}

// Linear is a fully connected layer over the flattened input:
// y = x W^T + b with W of shape [Out, In].
type Linear struct {
	In, Out int
	Weight  []float32
	Bias    []float32
}

// Node is one op. Exactly one of Conv, BN, Pool, Linear is set for the ops
// that take parameters.
type Node struct {
	Name   string // checkpoint prefix, e.g. "layer1.0.conv1"
	Op     Op
	Inputs []Value
	Output Value

	Conv   *Conv
	BN     *BatchNorm
	Pool   *Pool
	Linear *Linear
}

// Graph is a static forward pass over one NCHW input.
type Graph struct {
	Arch       Arch
	Nodes      []*Node
	Output     Value
	NumValues  int
	InChannels int
	Classes    int
	// Fused is true once Fuse has folded batch norms and fused epilogues.
	Fused bool
	// Owned marks a graph whose weights nothing else reads: a loader built
	// it for one engine load. Fuse then folds the batch norms into its
	// convolution weights where they are instead of into a copy, and the
	// graph must not be used again. Graphs are not owned unless a loader
	// says so.
	Owned bool
}

// Dims is the per-image shape of a value: channels, height, width.
type Dims struct{ C, H, W int }

// Elements is C*H*W.
func (d Dims) Elements() int { return d.C * d.H * d.W }

// convOut is PyTorch's output size for a convolution or pooling window.
func convOut(in, k, stride, pad int) int {
	return (in+2*pad-k)/stride + 1
}

// Shapes infers every value's per-image dims for an input of h x w pixels.
// It fails when the image is too small for the network.
func (g *Graph) Shapes(h, w int) ([]Dims, error) {
	if h <= 0 || w <= 0 {
		return nil, fmt.Errorf("image size %dx%d is not positive", h, w)
	}
	d := make([]Dims, g.NumValues)
	d[0] = Dims{g.InChannels, h, w}
	for _, n := range g.Nodes {
		in := d[n.Inputs[0]]
		var out Dims
		switch n.Op {
		case OpConv:
			c := n.Conv
			if in.C != c.InC {
				return nil, fmt.Errorf("%s: input has %d channels, conv wants %d", n.Name, in.C, c.InC)
			}
			out = Dims{c.OutC, convOut(in.H, c.K, c.Stride, c.Pad), convOut(in.W, c.K, c.Stride, c.Pad)}
			if c.Residual {
				if r := d[n.Inputs[1]]; r != out {
					return nil, fmt.Errorf("%s: residual is %v, output is %v", n.Name, r, out)
				}
			}
		case OpBatchNorm:
			if in.C != n.BN.C {
				return nil, fmt.Errorf("%s: input has %d channels, batch norm wants %d", n.Name, in.C, n.BN.C)
			}
			out = in
		case OpReLU:
			out = in
		case OpAdd:
			if o := d[n.Inputs[1]]; o != in {
				return nil, fmt.Errorf("%s: adding %v to %v", n.Name, o, in)
			}
			out = in
		case OpMaxPool:
			p := n.Pool
			out = Dims{in.C, convOut(in.H, p.K, p.Stride, p.Pad), convOut(in.W, p.K, p.Stride, p.Pad)}
		case OpGlobalAvgPool:
			out = Dims{in.C, 1, 1}
		case OpLinear:
			if in.Elements() != n.Linear.In {
				return nil, fmt.Errorf("%s: input has %d features, linear wants %d", n.Name, in.Elements(), n.Linear.In)
			}
			out = Dims{n.Linear.Out, 1, 1}
		default:
			return nil, fmt.Errorf("%s: unknown op %v", n.Name, n.Op)
		}
		if out.H <= 0 || out.W <= 0 {
			return nil, fmt.Errorf("image size %dx%d is too small: %s (%s) would output %dx%d", h, w, n.Name, n.Op, out.H, out.W)
		}
		d[n.Output] = out
	}
	return d, nil
}

// MACs is the number of multiply-accumulates of one image's forward pass at
// h x w (convolutions and the linear layer; the rest is negligible).
// Effective GFLOP/s figures count 2 FLOPs per MAC.
func (g *Graph) MACs(h, w int) (int64, error) {
	d, err := g.Shapes(h, w)
	if err != nil {
		return 0, err
	}
	var macs int64
	for _, n := range g.Nodes {
		switch n.Op {
		case OpConv:
			c := n.Conv
			o := d[n.Output]
			macs += int64(o.Elements()) * int64(c.InC/c.Groups*c.K*c.K)
		case OpLinear:
			macs += int64(n.Linear.In) * int64(n.Linear.Out)
		}
	}
	return macs, nil
}

// LastUse returns, for each value, the index of the last node that reads it
// (-1 for values never read; the graph output counts as read at the end).
// Engines use it to recycle activation buffers.
func (g *Graph) LastUse() []int {
	last := make([]int, g.NumValues)
	for i := range last {
		last[i] = -1
	}
	for i, n := range g.Nodes {
		for _, v := range n.Inputs {
			last[v] = i
		}
	}
	last[g.Output] = len(g.Nodes)
	return last
}

// NumParams counts the parameters the graph holds.
func (g *Graph) NumParams() int64 {
	var p int64
	for _, n := range g.Nodes {
		switch {
		case n.Conv != nil:
			p += int64(len(n.Conv.Weight) + len(n.Conv.Bias))
		case n.BN != nil:
			p += 4 * int64(n.BN.C)
		case n.Linear != nil:
			p += int64(len(n.Linear.Weight) + len(n.Linear.Bias))
		}
	}
	return p
}

// Validate checks the graph's structural invariants: values defined before
// use, each defined once, parameters of the sizes their ops say.
func (g *Graph) Validate() error {
	defined := make([]bool, g.NumValues)
	if g.NumValues == 0 {
		return fmt.Errorf("graph has no values")
	}
	defined[0] = true
	for i, n := range g.Nodes {
		want := 1
		if n.Op == OpAdd || (n.Op == OpConv && n.Conv != nil && n.Conv.Residual) {
			want = 2
		}
		if len(n.Inputs) != want {
			return fmt.Errorf("node %d %s (%s): %d inputs, want %d", i, n.Name, n.Op, len(n.Inputs), want)
		}
		for _, v := range n.Inputs {
			if v < 0 || int(v) >= g.NumValues || !defined[v] {
				return fmt.Errorf("node %d %s: input value %d not defined yet", i, n.Name, v)
			}
		}
		if n.Output <= 0 || int(n.Output) >= g.NumValues || defined[n.Output] {
			return fmt.Errorf("node %d %s: output value %d invalid or defined twice", i, n.Name, n.Output)
		}
		defined[n.Output] = true
		switch n.Op {
		case OpConv:
			c := n.Conv
			if c == nil || c.Groups < 1 || c.InC%c.Groups != 0 || c.OutC%c.Groups != 0 || c.K < 1 || c.Stride < 1 || c.Pad < 0 {
				return fmt.Errorf("node %s: bad conv parameters", n.Name)
			}
			if len(c.Weight) != c.OutC*c.InC/c.Groups*c.K*c.K {
				return fmt.Errorf("node %s: conv weight has %d values, want %d", n.Name, len(c.Weight), c.OutC*c.InC/c.Groups*c.K*c.K)
			}
			if c.Bias != nil && len(c.Bias) != c.OutC {
				return fmt.Errorf("node %s: conv bias has %d values, want %d", n.Name, len(c.Bias), c.OutC)
			}
		case OpBatchNorm:
			b := n.BN
			if b == nil || len(b.Gamma) != b.C || len(b.Beta) != b.C || len(b.Mean) != b.C || len(b.Var) != b.C {
				return fmt.Errorf("node %s: bad batch norm parameters", n.Name)
			}
		case OpMaxPool:
			if n.Pool == nil || n.Pool.K < 1 || n.Pool.Stride < 1 || n.Pool.Pad < 0 || 2*n.Pool.Pad > n.Pool.K {
				return fmt.Errorf("node %s: bad pooling parameters", n.Name)
			}
		case OpLinear:
			l := n.Linear
			if l == nil || len(l.Weight) != l.In*l.Out || (l.Bias != nil && len(l.Bias) != l.Out) {
				return fmt.Errorf("node %s: bad linear parameters", n.Name)
			}
		}
	}
	if int(g.Output) >= g.NumValues || !defined[g.Output] {
		return fmt.Errorf("graph output value %d is not defined", g.Output)
	}
	return nil
}

// Summary is a one-line description for logs: "resnet18: 11.7M params, 21 nodes".
func (g *Graph) Summary() string {
	return fmt.Sprintf("%s: %.2fM params, %d classes, %d nodes", g.Arch.Name(), float64(g.NumParams())/1e6, g.Classes, len(g.Nodes))
}

// builder appends nodes with fresh output values.
type builder struct {
	g *Graph
}

func (b *builder) add(n *Node) Value {
	n.Output = Value(b.g.NumValues)
	b.g.NumValues++
	b.g.Nodes = append(b.g.Nodes, n)
	return n.Output
}
