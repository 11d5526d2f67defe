package cuda

import (
	"encoding/binary"
	"fmt"

	cu "goinfer/internal/cuda"
)

// pdlMajor is the first compute capability with programmatic dependent
// launch (griddepcontrol).
const pdlMajor = 9

// checkPDL decides whether the graph's own kernels are launched as
// programmatic dependents (Driver.LaunchDependent): where the GPU has it,
// the driver can launch that way, and the code the driver loaded for this
// GPU waits for its predecessor (graph.cu's goinfer_pdl: PTX built for an
// older architecture and compiled by the driver does not). It returns
// false and, where the GPU could have had it, why not.
func (m *graphModel) checkPDL() (bool, string) {
	if hasExperiment(m.opts.GraphExperiments, "nopdl") {
		return false, ""
	}
	major, err := m.dev.rt.DeviceAttribute(cu.AttrComputeCapabilityMajor, m.dev.ordinal)
	if err != nil || major < pdlMajor {
		return false, ""
	}
	drv := m.libs.Driver
	if !drv.HasLaunchEx() {
		return false, "no dependent launches: the driver lacks cuLaunchKernelEx"
	}
	p, n, err := drv.ModuleGlobal(m.kern.mod, "goinfer_pdl")
	if err != nil || n != 4 {
		return false, fmt.Sprintf("no dependent launches: the graph kernels' marker: %v (size %d)", err, n)
	}
	b := make([]byte, 4)
	if err := m.dev.rt.MemcpyDtoH(b, p); err != nil {
		return false, fmt.Sprintf("no dependent launches: reading the graph kernels' marker: %v", err)
	}
	if binary.LittleEndian.Uint32(b) != 1 {
		return false, "no dependent launches: the graph kernels were compiled for an older GPU (PTX), not for this one"
	}
	return true, ""
}

// launch enqueues one of graph.cu's kernels on the instance's stream, as a
// programmatic dependent where the model allows it (checkPDL). After
// another of graph.cu's kernels, which signals at its start, it launches
// early; after a library's kernel, which does not signal, at that kernel's
// end, as an ordinary launch would.
func (i *graphInstance) launch(fn cu.Function, grid, block int, a *cu.KernelArgs) error {
	if i.m.fused.pdl {
		return i.d.libs.Driver.LaunchDependent(fn, grid, block, i.stream, a)
	}
	return i.d.libs.Driver.Launch(fn, grid, block, i.stream, a)
}
