package cuda

import (
	_ "embed"
	"fmt"
	"os"

	cu "goinfer/internal/cuda"
	"goinfer/internal/tensor"
)

// kernelPTX is tools/kernels/goinfer.cu compiled for compute_80 by
// tools/kernels/build.sh; the driver JIT-compiles it for the GPU at hand.
//
//go:embed kernels/goinfer.ptx
var kernelPTX []byte

// kernels are the custom kernels of one precision, loaded in a device's
// primary context.
type kernels struct {
	mod                                               cu.Module
	convert                                           cu.Function // input dtype -> compute dtype
	scaleShift, relu, add, epilogue, maxpool, avgpool cu.Function
	addBias                                           cu.Function
}

// ptxEnv names a PTX file to load instead of the embedded one (for
// trying kernels without rebuilding).
const ptxEnv = "GOINFER_CUDA_PTX"

func loadKernels(d *cu.Driver, in tensor.DType, p precision) (*kernels, error) {
	ptx := kernelPTX
	if f := os.Getenv(ptxEnv); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("cuda engine: %s: %w", ptxEnv, err)
		}
		ptx = b
	}
	mod, err := d.ModuleLoad(ptx)
	if err != nil {
		return nil, fmt.Errorf("loading goinfer's PTX kernels: %w", err)
	}
	k := &kernels{mod: mod}
	var inName string
	switch in {
	case tensor.Float32:
		inName = "f32"
	case tensor.Float16:
		inName = "f16"
	case tensor.Uint8:
		inName = "u8"
	default:
		d.ModuleUnload(mod)
		return nil, fmt.Errorf("cuda engine: input dtype %v is not supported (want float32, float16 or uint8)", in)
	}
	for _, f := range []struct {
		dst  *cu.Function
		name string
	}{
		{&k.convert, "convert_" + inName + "_" + p.suffix},
		{&k.scaleShift, "scale_shift_" + p.suffix},
		{&k.relu, "relu_" + p.suffix},
		{&k.add, "add_" + p.suffix},
		{&k.epilogue, "epilogue_" + p.suffix},
		{&k.maxpool, "maxpool_" + p.suffix},
		{&k.avgpool, "avgpool_" + p.suffix},
		{&k.addBias, "add_bias_f32"},
	} {
		fn, err := d.ModuleFunction(mod, f.name)
		if err != nil {
			d.ModuleUnload(mod)
			return nil, err
		}
		*f.dst = fn
	}
	return k, nil
}
