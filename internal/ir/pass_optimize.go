package ir

import "fmt"

// OptimizeStats counts what Optimize changed.
type OptimizeStats struct {
	// NodesBefore and NodesAfter are the node counts of the input graph
	// and of the result.
	NodesBefore, NodesAfter int
	// Folded is how many nodes binding folded into constants or found
	// dead.
	Folded int
	// Identities is how many Identity and inference Dropout nodes were
	// bypassed.
	Identities int
	// BatchNorms is how many BatchNormalizations were folded into the
	// preceding Conv, ConvTranspose or Gemm.
	BatchNorms int
	// Composites is how many composite ops (SiLU, HardSwish, Gelu,
	// LayerNormalization) were formed from their primitive spelling.
	Composites int
	// Fused is how many nodes were merged into a Conv's, Gemm's or
	// MatMul's epilogue.
	Fused int
}

func (s OptimizeStats) String() string {
	return fmt.Sprintf("%d -> %d nodes (%d folded, %d identities, %d batchnorms folded, %d composites, %d fused)",
		s.NodesBefore, s.NodesAfter, s.Folded, s.Identities, s.BatchNorms, s.Composites, s.Fused)
}

// Optimize binds g to batch (inferring every type and folding the
// constant subgraphs) and applies the engine-neutral rewrites: identity
// removal, BatchNorm folding, composite recognition and epilogue fusion,
// then drops dead nodes.
// g is not changed. Engines that lack a fused form call Decompose on the
// result.
func Optimize(g *Graph, batch int) (*Graph, OptimizeStats, error) {
	st := OptimizeStats{NodesBefore: len(g.Nodes)}
	b, err := Bind(g, batch)
	if err != nil {
		return nil, st, err
	}
	st.Folded = len(g.Nodes) - len(b.Nodes)
	st.Identities = EliminateIdentities(b)
	if st.BatchNorms, err = FoldBatchNorm(b); err != nil {
		return nil, st, err
	}
	st.Composites = FuseComposites(b)
	if st.Fused, err = FuseEpilogues(b); err != nil {
		return nil, st, err
	}
	RemoveDead(b)
	if err := b.Validate(); err != nil {
		return nil, st, fmt.Errorf("ir: optimized graph is invalid (a pass is wrong): %w", err)
	}
	st.NodesAfter = len(b.Nodes)
	return b, st, nil
}

// EliminateIdentities bypasses Identity nodes and Dropouts (the identity
// at inference) whose mask output is unused: readers of the output read
// the input instead. Where the output is a graph output, the input's
// producer takes it over (when the input is itself no graph output and
// has a producer); otherwise the node stays. It returns how many nodes it
// removed.
func EliminateIdentities(g *Graph) int {
	cons := g.Consumers()
	outs := graphOutputs(g)
	drop := map[*Node]bool{}
	for _, n := range g.Nodes {
		if !isIdentity(n, cons, outs) {
			continue
		}
		x, y := n.Inputs[0], n.Outputs[0]
		if !outs[y] {
			replaceUses(g, y, x)
			drop[n] = true
			continue
		}
		// y is a graph output: let x's producer compute y directly.
		p := x.Producer
		if p == nil || outs[x] || drop[p] {
			continue
		}
		for i, o := range p.Outputs {
			if o == x {
				p.Outputs[i] = y
			}
		}
		y.Producer = p
		replaceUses(g, x, y)
		drop[n] = true
	}
	dropNodes(g, drop)
	return len(drop)
}

func isIdentity(n *Node, cons map[*Value][]*Node, outs map[*Value]bool) bool {
	if len(n.Inputs) == 0 || n.Inputs[0] == nil || len(n.Outputs) == 0 || n.Outputs[0] == nil {
		return false
	}
	switch op := n.Op.(type) {
	case *Unary:
		return op.Fn == OpIdentity
	case *Dropout:
		// Training-mode Dropout binds only where it is the identity (a
		// constant ratio of 0); its mask must be unused.
		for _, o := range n.Outputs[1:] {
			if o != nil && (len(cons[o]) > 0 || outs[o]) {
				return false
			}
		}
		return true
	}
	return false
}
