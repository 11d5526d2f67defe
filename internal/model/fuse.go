package model

import (
	"fmt"

	"goinfer/internal/hugepage"
)

// Fuse returns the inference-optimized form of an eager graph, what
// "--compile" means before any engine-specific work:
//   - each batch norm that reads only a convolution's output is folded into
//     that convolution's weights and bias;
//   - a residual add whose operand is such a convolution becomes that
//     convolution's residual input (the later-computed operand is chosen, so
//     the other one is ready);
//   - a relu that reads only a convolution's output becomes its activation.
//
// The result holds only conv (with epilogues), maxpool, global average pool
// and linear nodes for a torchvision ResNet. g is not modified and folded
// weights are fresh copies, unless g is Owned: then they are folded where
// they are (the same values; a seeded ResNet-18's 46 MB are not paged in
// twice) and g is spent.
func Fuse(g *Graph) (*Graph, error) {
	if g.Fused {
		return g, nil
	}
	if err := g.Validate(); err != nil {
		return nil, err
	}
	uses := make([]int, g.NumValues)
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			uses[v]++
		}
	}
	uses[g.Output]++

	out := &Graph{Arch: g.Arch, InChannels: g.InChannels, Classes: g.Classes, NumValues: 1, Fused: true}
	b := &builder{g: out}
	// remap maps an eager value to the fused graph's value computing it.
	remap := make([]Value, g.NumValues)
	// convOf is the fused conv node that produces a fused-graph value, if any,
	// as long as that conv's epilogue can still absorb more.
	convOf := map[Value]*Node{}
	order := map[*Node]int{}
	// The folded weights go in one block the kernel can back with huge pages.
	total := 0
	for _, n := range g.Nodes {
		if n.Op == OpConv && !g.Owned {
			total += len(n.Conv.Weight)
		}
	}
	block := hugepage.Float32s(total)

	for i, n := range g.Nodes {
		in := make([]Value, len(n.Inputs))
		for j, v := range n.Inputs {
			in[j] = remap[v]
		}
		switch n.Op {
		case OpConv:
			c := *n.Conv
			if !g.Owned {
				w := block[:len(c.Weight):len(c.Weight)]
				block = block[len(c.Weight):]
				copy(w, c.Weight)
				c.Weight = w
			}
			if c.Bias != nil {
				c.Bias = append([]float32(nil), c.Bias...)
			}
			nn := &Node{Name: n.Name, Op: OpConv, Inputs: in, Conv: &c}
			v := b.add(nn)
			order[nn] = i
			remap[n.Output] = v
			if uses[n.Output] == 1 {
				convOf[v] = nn
			}
			continue
		case OpBatchNorm:
			if cn, ok := convOf[in[0]]; ok && !cn.Conv.ReLU && !cn.Conv.Residual {
				foldBN(cn.Conv, n.BN)
				cn.Name += "+" + n.Name
				remap[n.Output] = in[0]
				if uses[n.Output] != 1 {
					delete(convOf, in[0])
				}
				continue
			}
		case OpAdd:
			// Absorb into whichever operand's conv was computed last.
			var best *Node
			var other Value
			for j, v := range in {
				if cn, ok := convOf[v]; ok && !cn.Conv.ReLU && !cn.Conv.Residual {
					if best == nil || order[cn] > order[best] {
						best, other = cn, in[1-j]
					}
				}
			}
			if best != nil && best.Output > other {
				best.Conv.Residual = true
				best.Inputs = append(best.Inputs, other)
				best.Name += "+" + n.Name
				remap[n.Output] = best.Output
				if uses[n.Output] != 1 {
					delete(convOf, best.Output)
				}
				continue
			}
		case OpReLU:
			if cn, ok := convOf[in[0]]; ok && !cn.Conv.ReLU {
				cn.Conv.ReLU = true
				cn.Name += "+" + n.Name
				remap[n.Output] = in[0]
				delete(convOf, in[0])
				continue
			}
		}
		// Not fusable: copy the node as is.
		nn := &Node{Name: n.Name, Op: n.Op, Inputs: in, Conv: n.Conv, BN: n.BN, Pool: n.Pool, Linear: n.Linear}
		remap[n.Output] = b.add(nn)
	}
	out.Output = remap[g.Output]
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("fusing: %w", err)
	}
	return out, nil
}

// foldBN rewrites a convolution so that it computes bn(conv(x)):
// W' = W*s, b' = (b - mean)*s + beta with s = gamma/sqrt(var+eps), in float64.
func foldBN(c *Conv, bn *BatchNorm) {
	scale, shift := bn.ScaleShift()
	per := len(c.Weight) / c.OutC
	for o := 0; o < c.OutC; o++ {
		w := c.Weight[o*per : (o+1)*per]
		for i := range w {
			w[i] = float32(float64(w[i]) * scale[o])
		}
	}
	bias := make([]float32, c.OutC)
	for o := range bias {
		b0 := 0.0
		if c.Bias != nil {
			b0 = float64(c.Bias[o])
		}
		bias[o] = float32(b0*scale[o] + shift[o])
	}
	c.Bias = bias
}
