package irexec

import (
	"fmt"

	"goinfer/internal/ir"
)

// A Split runs every step once per chunk, so it reads every weight once
// per chunk. Where a graph ends in layers whose weights dwarf their
// activations (a CNN's classifier after its global pooling: 10 of
// MobileNetV3-Large's 14.8 MB of weights act on 960 and 1280 values an
// image), that tail runs better once over the whole batch, its weights
// read once, on all the threads. TailCut finds where such a tail starts.
const (
	// tailMinWeightBytes is the least weight a tail must hold to be worth
	// a plan of its own.
	tailMinWeightBytes = 1 << 20
	// tailActWeight is what a byte of one image's activations in the tail
	// (its input included) counts against a byte of its weights: a cut
	// gains where the tail's weights outweigh tailActWeight times its
	// activations, and the best cut is where they outweigh them most.
	tailActWeight = 16
)

// TailCut returns the value of g (bound at batch 1, optimized as the plans
// are) after which the rest of the graph is a weight-heavy tail to run
// over the whole batch instead of per chunk: among the points in node
// order where that one value alone carries everything the later nodes
// need (no other activation, no graph output, lives across it) and the
// nodes after it hold at least tailMinWeightBytes of weights, the one
// whose tail's weight bytes exceed tailActWeight times its activation
// bytes by the most. It returns "" where there is none.
func TailCut(g *ir.Graph) string {
	nodes := g.Nodes
	last := map[*ir.Value]int{} // the last node reading each value
	for i, n := range nodes {
		for _, v := range n.Inputs {
			if v != nil && v.Const == nil {
				last[v] = i
			}
		}
	}
	for _, v := range g.Outputs {
		last[v] = len(nodes)
	}
	// Suffix sums from the end: the weights (constants counted once) and
	// activation bytes of nodes i and later.
	weights, acts := make([]int64, len(nodes)+1), make([]int64, len(nodes)+1)
	seen := map[*ir.Value]bool{}
	for i := len(nodes) - 1; i >= 0; i-- {
		weights[i], acts[i] = weights[i+1], acts[i+1]
		for _, v := range nodes[i].Inputs {
			if v != nil && v.Const != nil && !seen[v] {
				seen[v] = true
				weights[i] += int64(len(v.Const.Data))
			}
		}
		for _, v := range nodes[i].Outputs {
			if v != nil {
				acts[i] += valueBytes(v)
			}
		}
	}
	best, bestScore := "", int64(0)
	live := map[*ir.Value]bool{}
	for _, v := range g.Inputs {
		live[v] = true
	}
	for i, n := range nodes[:max(0, len(nodes)-1)] {
		for _, v := range n.Outputs {
			if v != nil {
				live[v] = true
			}
		}
		for v := range live {
			if last[v] <= i {
				delete(live, v)
			}
		}
		if len(live) != 1 {
			continue
		}
		var cut *ir.Value
		for v := range live {
			cut = v
		}
		if cut.Producer != n || last[cut] == len(nodes) {
			continue // a graph input or output
		}
		w, a := weights[i+1], acts[i+1]+valueBytes(cut)
		if score := w - tailActWeight*a; w >= tailMinWeightBytes && score > bestScore {
			best, bestScore = cut.Name, score
		}
	}
	return best
}

// valueBytes is the bytes of a bound value.
func valueBytes(v *ir.Value) int64 {
	return int64(v.Type.Shape.NumElements() * v.Type.DType.Size())
}

// CutAt splits g (bound, ordered as TailCut's graph) at the value named
// cut into the graph computing it from g's inputs and the graph computing
// g's outputs from it. The two share g's nodes and values.
func CutAt(g *ir.Graph, cut string) (head, tail *ir.Graph, err error) {
	for i, n := range g.Nodes {
		for _, v := range n.Outputs {
			if v == nil || v.Name != cut {
				continue
			}
			head = &ir.Graph{Name: g.Name + " head", Inputs: g.Inputs, Nodes: g.Nodes[: i+1 : i+1], Outputs: []*ir.Value{v}, Meta: g.Meta}
			tail = &ir.Graph{Name: g.Name + " tail", Inputs: []*ir.Value{v}, Nodes: g.Nodes[i+1:], Outputs: g.Outputs, Meta: g.Meta}
			if err := head.Validate(); err != nil {
				return nil, nil, fmt.Errorf("irexec: cutting %q at %q: %w", g.Name, cut, err)
			}
			if err := tail.Validate(); err != nil {
				return nil, nil, fmt.Errorf("irexec: cutting %q at %q: %w", g.Name, cut, err)
			}
			return head, tail, nil
		}
	}
	return nil, nil, fmt.Errorf("irexec: cutting %q: no value %q", g.Name, cut)
}
