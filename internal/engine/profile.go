package engine

import (
	"slices"
	"time"
)

// LayerTime is the time one op of a forward pass takes, as an engine's
// profiler measures it.
type LayerTime struct {
	Name string // the graph node(s): "layer1.0.conv2+layer1.0.bn2+..."
	Kind string // the op: conv, maxpool, linear, ... (an ONNX op type for general graphs)
	// Algo is how the engine ran the op: the convolution algorithm and
	// whether it ran fused (cuda), the planned step (cpu).
	Algo string
	Time time.Duration // per forward
}

// Profiler is implemented by instances that can break a forward down by
// layer. ProfileLayers runs iters forwards of n images (n within the
// model's MaxBatch) apart from the normal Forward path, which pays nothing
// for it, and returns each layer's time per forward in execution order.
// The input is whatever the engine picks (its values do not change the
// work of the models it runs).
type Profiler interface {
	ProfileLayers(n, iters int) ([]LayerTime, error)
}

// MedianTimes returns, per layer, the median over the forwards of
// times[forward][layer], divided by div: on a shared machine a layer that
// loses its core for a scheduler tick would otherwise carry the tick.
func MedianTimes(times [][]time.Duration, div int) []time.Duration {
	if len(times) == 0 {
		return nil
	}
	res := make([]time.Duration, len(times[0]))
	col := make([]time.Duration, len(times))
	for i := range res {
		for it := range times {
			col[it] = times[it][i]
		}
		slices.Sort(col)
		m := col[len(col)/2]
		if len(col)%2 == 0 {
			m = (col[len(col)/2-1] + m) / 2
		}
		res[i] = m / time.Duration(div)
	}
	return res
}
