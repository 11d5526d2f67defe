package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"goinfer/internal/checkpoint"
	"goinfer/internal/engine"
	"goinfer/internal/ir"
	"goinfer/internal/model"
	"goinfer/internal/onnx"
	"goinfer/internal/preprocess"
	"goinfer/internal/torchvision"
)

// netGraph is a model read from its files and not yet on an engine: one
// of the ResNet graphs every engine runs, or a general graph (an ONNX
// file, a torchvision architecture beyond the ResNets) for engines that
// implement engine.GraphLoader.
type netGraph struct {
	resnet  *model.Graph
	general *ir.Graph
	// read is how long reading took, part of the cold start.
	read time.Duration
}

// readNetGraph reads the model src names. size is the image size the
// command was asked for (0: the model's own); a general graph whose height
// and width are not fixed takes it.
func readNetGraph(ctx context.Context, src source, size int) (netGraph, error) {
	start := time.Now()
	var n netGraph
	var err error
	switch {
	case src.Path != "" && isONNX(src.Path):
		n.general, err = loadONNX(src.Path, size)
	case src.TorchVision != "":
		n.general, err = readTorchVision(src, size)
	default:
		n.resnet, err = loadGraph(ctx, src)
		if err != nil && !src.Random && errors.Is(err, model.ErrNotResNet) {
			// Not a ResNet: one of torchvision's other architectures?
			g, tvErr := torchvision.Load(src.Path, "", torchvision.Options{ImageSize: size})
			if tvErr != nil {
				return n, fmt.Errorf("%w; as a torchvision model: %w", err, tvErr)
			}
			n.general, err = g, nil
		}
	}
	n.read = time.Since(start)
	return n, err
}

// loadONNX reads an ONNX model. One whose image input has a symbolic
// height or width (an export with dynamic spatial axes), which the loader
// refuses with a SymbolicShapeError, is read again with size x size (224
// when size is 0) there.
func loadONNX(path string, size int) (*ir.Graph, error) {
	g, err := onnx.Load(path)
	if err == nil {
		return batchable(g), nil
	}
	var se *onnx.SymbolicShapeError
	if !errors.As(err, &se) {
		return g, err
	}
	s := se.Shape.Clone()
	if len(s) != 4 || s[1] == ir.Dynamic {
		return nil, err
	}
	if size == 0 {
		size = 224
	}
	for i := 2; i < 4; i++ {
		if s[i] == ir.Dynamic {
			s[i] = size
		}
	}
	g, err = onnx.Load(path, onnx.WithInputShapes(map[string][]int{se.Input: s}))
	if err != nil {
		return nil, err
	}
	return batchable(g), nil
}

// batchable makes the leading dimension of a graph exported with a fixed
// batch of 1 (no dynamic axes, as torch.onnx.export does by default) the
// batch dimension, when the graph computes every sample on its own at batch
// 2: every shape binds and every output follows the batch. A graph that
// hard-codes its batch (a Reshape to [1, -1] before a Gemm, say) fails that
// check and keeps its fixed batch of 1.
func batchable(g *ir.Graph) *ir.Graph {
	if len(g.Inputs) != 1 {
		return g
	}
	in := g.Inputs[0].Type.Shape
	if len(in) < 2 || in[0] != 1 || slices.Contains(in, ir.Dynamic) {
		return g
	}
	in[0] = ir.Dynamic
	_, outs, err := ir.Signature(g)
	ok := err == nil && len(outs) > 0
	for _, o := range outs {
		ok = ok && len(o.Type.Shape) > 0 && o.Type.Shape[0] == ir.Dynamic
	}
	if ok {
		if _, err := ir.Bind(g, 3); err != nil {
			ok = false
		}
	}
	if !ok {
		in[0] = 1
	}
	return g
}

// readTorchVision builds a torchvision architecture from a checkpoint, or
// from seeded random weights when src has no file.
func readTorchVision(src source, size int) (*ir.Graph, error) {
	opts := torchvision.Options{ImageSize: size}
	if !src.Random {
		return torchvision.Load(src.Path, src.TorchVision, opts)
	}
	var sd *checkpoint.StateDict
	var err error
	if size > 0 {
		// Made for the size asked for: a ViT's position embedding depends on it.
		cfg, cerr := torchvision.NamedConfig(src.TorchVision, 1000)
		if cerr != nil {
			return nil, cerr
		}
		sd, err = torchvision.RandomStateDictFor(cfg, size, uint32(src.Seed))
	} else {
		sd, err = torchvision.RandomStateDict(src.TorchVision, 1000, uint32(src.Seed))
	}
	if err != nil {
		return nil, err
	}
	defer sd.Close()
	if w, ok := torchvision.DefaultWeights(src.TorchVision); ok && size == 0 {
		opts.Weights = &w
	}
	return torchvision.Build(src.TorchVision, sd, opts)
}

// general reports whether src is read as a general graph (ir.Graph), as
// far as is known before reading it.
func (s source) general() bool {
	return (s.Path != "" && isONNX(s.Path)) || s.TorchVision != ""
}

// channels is the channel count of the model's image input.
func (n netGraph) channels() (int, error) {
	if n.resnet != nil {
		return n.resnet.InChannels, nil
	}
	if len(n.general.Inputs) != 1 {
		return 0, fmt.Errorf("the model has %d inputs; goinfer runs models of one image input", len(n.general.Inputs))
	}
	in := n.general.Inputs[0]
	if len(in.Type.Shape) != 4 || in.Type.Shape[1] < 1 {
		return 0, fmt.Errorf("the model's input %s is %s; goinfer runs models of one image input [N, C, H, W]", in.Name, in.Type)
	}
	return in.Type.Shape[1], nil
}

// inputSize is the image size of the model's input: the fixed height and
// width of a general graph, else the size wanted.
func (n netGraph) inputSize(wantH, wantW int) (h, w int) {
	if n.general == nil || len(n.general.Inputs) == 0 {
		return wantH, wantW
	}
	s := n.general.Inputs[0].Type.Shape
	if len(s) == 4 && s[2] > 0 && s[3] > 0 {
		return s[2], s[3]
	}
	return wantH, wantW
}

// preprocessing is how images become the model's input.
func (n netGraph) preprocessing() preprocess.Spec {
	if n.general != nil && n.general.Preprocess != nil {
		return *n.general.Preprocess
	}
	return preprocess.ImageNet(n.inputSize(224, 224))
}

// macs is the multiply-accumulates of one image of h x w.
func (n netGraph) macs(h, w int) (int64, error) {
	if n.resnet != nil {
		return n.resnet.MACs(h, w)
	}
	b, err := ir.Bind(n.general, 1)
	if err != nil {
		return 0, err
	}
	return ir.MACs(b)
}

// load puts the model on e.
func (n netGraph) load(ctx context.Context, e engine.Engine, opts engine.Options) (engine.Model, error) {
	if n.resnet != nil {
		return e.Load(ctx, n.resnet, opts)
	}
	gl, ok := e.(engine.GraphLoader)
	if !ok {
		return nil, fmt.Errorf("the %s engine runs the ResNet graphs only so far; run this model with --engine cpu", e.Name())
	}
	m, err := gl.LoadGraph(ctx, n.general, opts)
	if errors.Is(err, ir.ErrUnsupported) {
		return nil, fmt.Errorf("%w (the %s engine cannot run it)", err, e.Name())
	}
	return m, err
}
