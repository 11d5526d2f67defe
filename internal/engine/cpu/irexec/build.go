package irexec

import "goinfer/internal/ir"

// build compiles one node: a step, nil for a view (the output shares the
// input's bytes), or an *unsupported error.
func build(nc *nodeCtx) (step, error) {
	switch op := any(nc.n.Op).(type) {
	case *ir.Reshape, *ir.Flatten, *ir.Squeeze, *ir.Unsqueeze:
		return buildView(nc)
	case *ir.Dropout:
		return buildView(nc)
	case *ir.Unary:
		return buildUnary(nc)
	case *ir.Binary:
		return buildBinary(nc)
	case *ir.Variadic:
		return buildVariadic(nc)
	case *ir.IsInf:
		return buildIsInf(nc)
	case *ir.LeakyRelu, *ir.Elu, *ir.Selu, *ir.Celu, *ir.HardSigmoid, *ir.Gelu, *ir.Clip, *ir.ThresholdedRelu, *ir.Shrink:
		return buildParamUnary(nc)
	case *ir.Where:
		return buildWhere(nc)
	case *ir.Cast:
		return buildCast(nc)
	case *ir.CastLike:
		return buildCastLike(nc)
	case *ir.Transpose:
		return buildTranspose(nc)
	case *ir.Expand:
		return buildExpand(nc)
	case *ir.Gather:
		return buildGather(nc)
	case *ir.GatherElements:
		return buildGatherElements(nc)
	case *ir.Resize:
		if op.Mode != "nearest" || op.CoordinateTransformMode == "tf_crop_and_resize" {
			return nil, unsupportedf(op.Mode, "%s resizing (the executor runs nearest-neighbour resizing)", op.Mode)
		}
		return buildRuns(nc) // a gather: each output copies one input element
	case *ir.Slice, *ir.Pad, *ir.Tile, *ir.Concat, *ir.Split, *ir.DepthToSpace, *ir.SpaceToDepth:
		return buildRuns(nc)
	default:
		return buildNN(nc)
	}
}
