package cuda

import (
	_ "embed"
	"fmt"
	"os"
	"strings"

	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
	"goinfer/internal/tensor"
)

// kernelFatbin is tools/kernels/goinfer.cu compiled by nvcc
// (tools/kernels/build.sh) to machine code for Ampere, Ada, Hopper and
// Blackwell (sm_80, 86, 89, 90, 100, 120) plus compute_80 PTX for later
// GPUs. Loading PTX alone made the driver JIT-compile it in every process
// that had no disk cache for it: 1.2 s of a 2.5 s cold start on an H200.
//
//go:embed kernels/goinfer.fatbin
var kernelFatbin []byte

// kernelPTX is the same source compiled to PTX (ISA 7.0) by clang: the
// fallback when the driver refuses the fatbin (one older than the CUDA 13
// toolkit that built it).
//
//go:embed kernels/goinfer.ptx
var kernelPTX []byte

// kernelSums records the source each of the two was built from: the fatbin
// is loaded only when it was built from the same source as the PTX (a
// kernel edited where only clang is installed leaves the fatbin behind
// until nvcc rebuilds it, and an old fatbin lacks the new kernels).
//
//go:embed kernels/sources.sha256
var kernelSums string

// kernels are the custom kernels of one precision, loaded in a device's
// primary context.
type kernels struct {
	mod                                               cu.Module
	convert                                           cu.Function // input dtype -> compute dtype
	scaleShift, relu, add, epilogue, maxpool, avgpool cu.Function
	addBias                                           cu.Function
	// convMMA: conv_mma (convmma.go), 16-bit precisions only.
	convMMA cu.Function
}

// loadKernels loads the embedded kernels, or those of file (a PTX, cubin
// or fatbin; engine.Options.KernelFile) when it is not empty.
func loadKernels(d *cu.Driver, file string, in tensor.DType, p precision) (*kernels, error) {
	var mod cu.Module
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("cuda engine: kernel file: %w", err)
		}
		if mod, err = d.ModuleLoad(b); err != nil {
			return nil, fmt.Errorf("cuda engine: loading the kernels of %s: %w", file, err)
		}
	} else {
		var err error
		if mod, err = d.ModuleLoad(currentImage(kernelSums, "goinfer", kernelFatbin, kernelPTX)); err != nil {
			var perr error
			if mod, perr = d.ModuleLoad(kernelPTX); perr != nil {
				return nil, fmt.Errorf("loading goinfer's kernels: %w (and their PTX: %w)", err, perr)
			}
		}
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
	if p.p == engine.FP16 || p.p == engine.BF16 {
		fn, err := d.ModuleFunction(mod, "conv_mma_"+p.suffix)
		if err != nil {
			d.ModuleUnload(mod)
			return nil, err
		}
		k.convMMA = fn
	}
	return k, nil
}

// currentImage returns fat, the nvcc build of kernel source name, when sums
// (a sources.sha256 file) records it as built from the same source as
// name's PTX, and ptx otherwise.
func currentImage(sums, name string, fat, ptx []byte) []byte {
	got := map[string]string{}
	for _, line := range strings.Split(sums, "\n") {
		if sum, file, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			got[file] = sum
		}
	}
	if f := got[name+".fatbin"]; f != "" && f == got[name+".ptx"] && len(fat) > 0 {
		return fat
	}
	return ptx
}
