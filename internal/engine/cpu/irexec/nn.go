package irexec

import "goinfer/internal/ir"

// buildNN compiles the neural-network, reduction and normalization ops.
func buildNN(nc *nodeCtx) (step, error) {
	switch any(nc.n.Op).(type) {
	case *ir.Conv:
		return buildConv(nc)
	case *ir.ConvTranspose:
		return buildConvTranspose(nc)
	case *ir.Gemm:
		return buildGemm(nc)
	case *ir.MatMul:
		return buildMatMul(nc)
	case *ir.Pool, *ir.LpPool:
		return buildPool(nc)
	case *ir.GlobalPool, *ir.GlobalLpPool:
		return buildGlobalPool(nc)
	case *ir.BatchNorm:
		return buildBatchNorm(nc)
	case *ir.InstanceNorm:
		return buildInstanceNorm(nc)
	case *ir.LayerNorm:
		return buildLayerNorm(nc)
	case *ir.LRN:
		return buildLRN(nc)
	case *ir.Softmax:
		return buildSoftmax(nc)
	case *ir.Reduce:
		return buildReduce(nc)
	case *ir.ArgReduce:
		return buildArgReduce(nc)
	}
	return nil, unsupportedf("", "no kernel for %s", nc.n.Op.Kind())
}
