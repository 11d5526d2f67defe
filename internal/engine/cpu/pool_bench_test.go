package cpu

import (
	"context"
	"fmt"
	"testing"

	"goinfer/internal/engine"
	"goinfer/internal/ir"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
)

// BenchmarkStemMaxPool times ResNet's stem max pool (3x3, stride 2, pad 1
// over 64 x 112 x 112 maps) alone, on one thread, through both executors:
// the ResNet path (model.Graph) and the IR executor (LoadGraph).
// Run: go test -run XXX -bench StemMaxPool ./internal/engine/cpu/
func BenchmarkStemMaxPool(b *testing.B) {
	const c, h, w = 64, 112, 112
	const oh, ow = 56, 56
	ctx := context.Background()
	for _, n := range []int{1, 32} {
		b.Run(fmt.Sprintf("resnet/bs%d", n), func(b *testing.B) {
			p := model.Pool{K: 3, Stride: 2, Pad: 1}
			g := &model.Graph{NumValues: 2, InChannels: c, Classes: c * oh * ow, Output: 1,
				Nodes: []*model.Node{{Name: "pool", Op: model.OpMaxPool, Inputs: []model.Value{0}, Output: 1, Pool: &p}}}
			m, err := Engine{}.Load(ctx, g, engine.Options{MaxBatch: n, Height: h, Width: w, Threads: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			benchModel(b, m, n, 0)
		})
		b.Run(fmt.Sprintf("irexec/bs%d", n), func(b *testing.B) {
			op := &ir.Pool{Max: true, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}}
			x := &ir.Value{Name: "x", Type: ir.Type{DType: tensor.Float32, Shape: []int{ir.Dynamic, c, h, w}}}
			nd := &ir.Node{Name: "pool", Op: op, Inputs: []*ir.Value{x}}
			y := &ir.Value{Name: "y", Producer: nd}
			nd.Outputs = []*ir.Value{y}
			g := &ir.Graph{Name: "pool", Inputs: []*ir.Value{x}, Outputs: []*ir.Value{y}, Nodes: []*ir.Node{nd}}
			m, err := Engine{}.LoadGraph(ctx, g, engine.Options{Compile: true, MaxBatch: n, Threads: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			benchModel(b, m, n, 0)
		})
	}
}
