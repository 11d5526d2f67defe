package cuda

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Module is a loaded CUmodule; Function a kernel in it.
type (
	Module   uintptr
	Function uintptr
)

// Driver is the part of the CUDA driver API (libcuda) goinfer uses: device
// names and loading and launching its own PTX kernels. The runtime's
// primary context is the driver's, so after Runtime.SetDevice on the same OS
// thread the two interoperate.
type Driver struct {
	lib *library

	getErrorName     func(code int32, s **byte) int32
	getErrorString   func(code int32, s **byte) int32
	init_            func(flags uint32) int32
	driverGetVersion func(v *int32) int32
	deviceGet        func(d *int32, ordinal int32) int32
	deviceGetName    func(name *byte, n int32, d int32) int32
	deviceTotalMem   func(b *uint64, d int32) int32
	moduleLoadDataEx func(m *uintptr, image *byte, nopts uint32, opts *int32, vals *uintptr) int32
	moduleGetFunc    func(f *uintptr, m uintptr, name string) int32
	moduleUnload     func(m uintptr) int32

	launchKernel uintptr // hot: through SyscallN
	// cuLaunchKernelEx (CUDA 12.0) and cuModuleGetGlobal_v2; 0 when
	// missing.
	launchKernelEx  uintptr
	moduleGetGlobal uintptr
	// Stream memory operations; 0 when the driver lacks them.
	waitValue32  uintptr
	writeValue32 uintptr
}

func newDriver(l *library) (*Driver, error) {
	d := &Driver{lib: l}
	err := l.bind(map[string]any{
		"cuGetErrorName":      &d.getErrorName,
		"cuGetErrorString":    &d.getErrorString,
		"cuInit":              &d.init_,
		"cuDriverGetVersion":  &d.driverGetVersion,
		"cuDeviceGet":         &d.deviceGet,
		"cuDeviceGetName":     &d.deviceGetName,
		"cuDeviceTotalMem_v2": &d.deviceTotalMem,
		"cuModuleLoadDataEx":  &d.moduleLoadDataEx,
		"cuModuleGetFunction": &d.moduleGetFunc,
		"cuModuleUnload":      &d.moduleUnload,
		"cuLaunchKernel":      &d.launchKernel,
	})
	if err != nil {
		return nil, err
	}
	if err := d.check("cuInit", d.init_(0)); err != nil {
		return nil, err
	}
	d.launchKernelEx = l.sym("cuLaunchKernelEx")
	d.moduleGetGlobal = l.sym("cuModuleGetGlobal_v2")
	d.waitValue32 = l.sym("cuStreamWaitValue32_v2")
	d.writeValue32 = l.sym("cuStreamWriteValue32_v2")
	return d, nil
}

// Comparisons of StreamWaitValue32.
const (
	WaitValueGEQ = 0 // until *addr >= value (as a wrapping 32-bit difference)
	WaitValueEQ  = 1
)

// HasStreamMemOps says whether the driver has StreamWaitValue32 and
// StreamWriteValue32.
func (d *Driver) HasStreamMemOps() bool { return d.waitValue32 != 0 && d.writeValue32 != 0 }

// StreamWaitValue32 makes s wait, on the device, until the 32-bit word at
// addr (device memory, or page-locked host memory through its device
// address) satisfies cmp against value: work enqueued on s after it
// starts only then, without the host taking part.
func (d *Driver) StreamWaitValue32(s Stream, addr DevPtr, value uint32, cmp int) error {
	if d.waitValue32 == 0 {
		return fmt.Errorf("cuStreamWaitValue32: %w", ErrNotSupported)
	}
	c, _, _ := purego.SyscallN(d.waitValue32, uintptr(s), uintptr(addr), uintptr(value), uintptr(cmp))
	if int32(c) != cuSuccess {
		return d.check("cuStreamWaitValue32", int32(c))
	}
	return nil
}

// StreamWriteValue32 enqueues on s a write of value to the 32-bit word at
// addr.
func (d *Driver) StreamWriteValue32(s Stream, addr DevPtr, value uint32) error {
	if d.writeValue32 == 0 {
		return fmt.Errorf("cuStreamWriteValue32: %w", ErrNotSupported)
	}
	c, _, _ := purego.SyscallN(d.writeValue32, uintptr(s), uintptr(addr), uintptr(value), 0)
	if int32(c) != cuSuccess {
		return d.check("cuStreamWriteValue32", int32(c))
	}
	return nil
}

func (d *Driver) check(call string, code int32) error {
	if code == cuSuccess {
		return nil
	}
	return newError(LibDriver, call, int(code), func(c int) (string, string) {
		var n, s *byte
		d.getErrorName(int32(c), &n)
		d.getErrorString(int32(c), &s)
		return goString(n, 256), goString(s, 1024)
	})
}

// Path is the file the driver library was loaded from.
func (d *Driver) Path() string { return d.lib.info.Path }

// Version is the CUDA version the driver supports (13000 for 13.0).
func (d *Driver) Version() (int, error) {
	var v int32
	err := d.check("cuDriverGetVersion", d.driverGetVersion(&v))
	return int(v), err
}

// DeviceName is the marketing name of GPU ordinal.
func (d *Driver) DeviceName(ordinal int) (string, error) {
	var dev int32
	if err := d.check("cuDeviceGet", d.deviceGet(&dev, int32(ordinal))); err != nil {
		return "", err
	}
	buf := make([]byte, 256)
	if err := d.check("cuDeviceGetName", d.deviceGetName(&buf[0], int32(len(buf)), dev)); err != nil {
		return "", err
	}
	return cBuf(buf), nil
}

// DeviceTotalMem is GPU ordinal's memory in bytes.
func (d *Driver) DeviceTotalMem(ordinal int) (uint64, error) {
	var dev int32
	if err := d.check("cuDeviceGet", d.deviceGet(&dev, int32(ordinal))); err != nil {
		return 0, err
	}
	var b uint64
	err := d.check("cuDeviceTotalMem", d.deviceTotalMem(&b, dev))
	return b, err
}

// ModuleLoad JIT-compiles PTX (NUL-terminated or not) into the current
// context. A compile error includes the JIT's log.
func (d *Driver) ModuleLoad(ptx []byte) (Module, error) {
	img := make([]byte, len(ptx)+1)
	copy(img, ptx)
	logBuf := make([]byte, 8192)
	const (
		jitErrorLogBuffer          = 5
		jitErrorLogBufferSizeBytes = 6
	)
	opts := []int32{jitErrorLogBuffer, jitErrorLogBufferSizeBytes}
	vals := []uintptr{uintptr(unsafe.Pointer(&logBuf[0])), uintptr(len(logBuf))}
	var m uintptr
	code := d.moduleLoadDataEx(&m, &img[0], uint32(len(opts)), &opts[0], &vals[0])
	if err := d.check("cuModuleLoadDataEx", code); err != nil {
		if log := cBuf(logBuf); log != "" {
			return 0, fmt.Errorf("%w: %s", err, log)
		}
		return 0, err
	}
	return Module(m), nil
}

// ModuleFunction looks a kernel up by its (extern "C") name.
func (d *Driver) ModuleFunction(m Module, name string) (Function, error) {
	var f uintptr
	if err := d.check("cuModuleGetFunction", d.moduleGetFunc(&f, uintptr(m), name)); err != nil {
		return 0, fmt.Errorf("kernel %s: %w", name, err)
	}
	return Function(f), nil
}

// ModuleUnload releases a module.
func (d *Driver) ModuleUnload(m Module) error {
	return d.check("cuModuleUnload", d.moduleUnload(uintptr(m)))
}

// ModuleGlobal is the device address and size of the __device__ variable
// name (extern "C") of m.
func (d *Driver) ModuleGlobal(m Module, name string) (DevPtr, int, error) {
	if d.moduleGetGlobal == 0 {
		return 0, 0, fmt.Errorf("cuModuleGetGlobal: %w", ErrNotSupported)
	}
	cname := append([]byte(name), 0)
	var p, n uint64
	c, _, _ := purego.SyscallN(d.moduleGetGlobal, uintptr(unsafe.Pointer(&p)), uintptr(unsafe.Pointer(&n)),
		uintptr(m), uintptr(unsafe.Pointer(&cname[0])))
	if err := d.check("cuModuleGetGlobal", int32(c)); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", name, err)
	}
	return DevPtr(p), int(n), nil
}

// HasLaunchEx says whether the driver has cuLaunchKernelEx, which
// LaunchDependent needs.
func (d *Driver) HasLaunchEx() bool { return d.launchKernelEx != 0 }

// KernelArgs holds one launch's arguments where the driver can read them:
// each value in an 8-byte slot (the kernel reads as many bytes as its
// parameter's size, little-endian) and a pointer to each slot. Allocate it
// once with new and reuse it: filling and launching does not allocate.
type KernelArgs struct {
	vals [20]uint64
	ptrs [20]unsafe.Pointer
	n    int
	// cfg and attr are LaunchDependent's CUlaunchConfig and its one
	// attribute, kept here so that a launch does not allocate.
	cfg  launchConfig
	attr launchAttr
}

// launchConfig is CUlaunchConfig.
type launchConfig struct {
	gridX, gridY, gridZ, blockX, blockY, blockZ, sharedMem uint32
	_                                                      uint32
	stream                                                 uintptr
	attrs                                                  *launchAttr
	numAttrs                                               uint32
	_                                                      uint32
}

// launchAttr is CUlaunchAttribute: an id, padding, a 64-byte value union.
type launchAttr struct {
	id  uint32
	_   uint32
	val [16]uint32
}

// launchAttrProgrammaticSerialization is
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION.
const launchAttrProgrammaticSerialization = 6

// Reset empties the argument list.
func (a *KernelArgs) Reset() *KernelArgs { a.n = 0; return a }

func (a *KernelArgs) push(v uint64) *KernelArgs {
	if a.n == len(a.vals) {
		panic("cuda: more than 20 kernel arguments")
	}
	a.vals[a.n] = v
	a.n++
	return a
}

// Ptr appends a device pointer argument.
func (a *KernelArgs) Ptr(p DevPtr) *KernelArgs { return a.push(uint64(p)) }

// Int appends an int (32-bit) argument.
func (a *KernelArgs) Int(v int) *KernelArgs { return a.push(uint64(uint32(int32(v)))) }

// Int64 appends a long long argument.
func (a *KernelArgs) Int64(v int64) *KernelArgs { return a.push(uint64(v)) }

// Launch enqueues f on s over grid x block threads (1-D) with args.
func (d *Driver) Launch(f Function, grid, block int, s Stream, a *KernelArgs) error {
	return d.Launch2D(f, grid, 1, block, s, a)
}

// Launch2D enqueues f on s over a gridX x gridY grid of 1-D blocks.
func (d *Driver) Launch2D(f Function, gridX, gridY, block int, s Stream, a *KernelArgs) error {
	for i := 0; i < a.n; i++ {
		a.ptrs[i] = unsafe.Pointer(&a.vals[i])
	}
	c, _, _ := purego.SyscallN(d.launchKernel, uintptr(f),
		uintptr(gridX), uintptr(gridY), 1, uintptr(block), 1, 1, 0, uintptr(s),
		uintptr(unsafe.Pointer(&a.ptrs[0])), 0)
	if int32(c) != cuSuccess {
		return d.check("cuLaunchKernel", int32(c))
	}
	return nil
}

// LaunchDependent is Launch with programmatic dependent launch allowed: f
// may start while the kernel before it on s finishes, once that kernel's
// blocks have all signalled (griddepcontrol.launch_dependents) or ended. f
// must wait for its predecessor (griddepcontrol.wait) before it reads
// anything that kernel writes, and before it ends. Compute capability 9.0
// and later; needs HasLaunchEx.
func (d *Driver) LaunchDependent(f Function, grid, block int, s Stream, a *KernelArgs) error {
	if d.launchKernelEx == 0 {
		return fmt.Errorf("cuLaunchKernelEx: %w", ErrNotSupported)
	}
	for i := 0; i < a.n; i++ {
		a.ptrs[i] = unsafe.Pointer(&a.vals[i])
	}
	a.attr = launchAttr{id: launchAttrProgrammaticSerialization}
	a.attr.val[0] = 1
	a.cfg = launchConfig{gridX: uint32(grid), gridY: 1, gridZ: 1, blockX: uint32(block), blockY: 1, blockZ: 1,
		stream: uintptr(s), attrs: &a.attr, numAttrs: 1}
	c, _, _ := purego.SyscallN(d.launchKernelEx, uintptr(unsafe.Pointer(&a.cfg)), uintptr(f),
		uintptr(unsafe.Pointer(&a.ptrs[0])), 0)
	if int32(c) != cuSuccess {
		return d.check("cuLaunchKernelEx", int32(c))
	}
	return nil
}
