package cuda

import (
	"fmt"
	"sync"
)

// NVML is a session of the NVIDIA Management Library (libnvidia-ml.so.1,
// shipped with the driver): GPU names, utilization and memory, read without
// touching the CUDA context. It is bound with purego rather than
// github.com/NVIDIA/go-nvml, which needs cgo and lazy binding to even start.
// Methods are safe for concurrent use.
type NVML struct {
	lib  *library
	mu   sync.Mutex
	devs map[int]uintptr

	errorString       func(code int32) string
	init_             func() int32
	shutdown          func() int32
	deviceCount       func(n *uint32) int32
	deviceHandle      func(i uint32, h *uintptr) int32
	deviceName        func(h uintptr, buf *byte, n uint32) int32
	deviceUtilization func(h uintptr, u *nvmlUtilization) int32
	deviceMemory      func(h uintptr, m *nvmlMemory) int32
	driverVersion     func(buf *byte, n uint32) int32
	nvmlVersion       func(buf *byte, n uint32) int32
}

type nvmlUtilization struct{ gpu, memory uint32 }

type nvmlMemory struct{ total, free, used uint64 }

// OpenNVML loads and initializes NVML. Close releases it.
func OpenNVML() (*NVML, error) {
	n, _, err := OpenNVMLInfo()
	return n, err
}

// OpenNVMLInfo is OpenNVML that also says where the library was looked for
// and found, for doctor.
func OpenNVMLInfo() (*NVML, LibInfo, error) {
	l := open(SpecNVML, OSEnv())
	n, err := openNVML(l)
	if err != nil && l.info.Err == nil {
		l.info.Err = err
	}
	if n != nil {
		if v, err := n.Version(); err == nil {
			l.info.Version = v
		}
	}
	return n, l.info, err
}

func openNVML(l *library) (*NVML, error) {
	if l.info.Err != nil {
		return nil, fmt.Errorf("%w; fix: %s", l.info.Err, l.info.Fix)
	}
	n := &NVML{lib: l, devs: map[int]uintptr{}}
	err := l.bind(map[string]any{
		"nvmlErrorString":               &n.errorString,
		"nvmlInit_v2":                   &n.init_,
		"nvmlShutdown":                  &n.shutdown,
		"nvmlDeviceGetCount_v2":         &n.deviceCount,
		"nvmlDeviceGetHandleByIndex_v2": &n.deviceHandle,
		"nvmlDeviceGetName":             &n.deviceName,
		"nvmlDeviceGetUtilizationRates": &n.deviceUtilization,
		"nvmlDeviceGetMemoryInfo":       &n.deviceMemory,
		"nvmlSystemGetDriverVersion":    &n.driverVersion,
		"nvmlSystemGetNVMLVersion":      &n.nvmlVersion,
	})
	if err != nil {
		return nil, err
	}
	if err := n.check("nvmlInit_v2", n.init_()); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *NVML) check(call string, code int32) error {
	if code == nvmlSuccess {
		return nil
	}
	return newError(LibNVML, call, int(code), func(c int) (string, string) {
		return n.errorString(int32(c)), ""
	})
}

// Path is the file NVML was loaded from.
func (n *NVML) Path() string { return n.lib.info.Path }

// DeviceCount is the number of GPUs NVML sees (all of them, whatever
// CUDA_VISIBLE_DEVICES says).
func (n *NVML) DeviceCount() (int, error) {
	var c uint32
	err := n.check("nvmlDeviceGetCount_v2", n.deviceCount(&c))
	return int(c), err
}

func (n *NVML) handle(dev int) (uintptr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if h, ok := n.devs[dev]; ok {
		return h, nil
	}
	if dev < 0 {
		return 0, fmt.Errorf("nvml: device %d is negative", dev)
	}
	var h uintptr
	if err := n.check("nvmlDeviceGetHandleByIndex_v2", n.deviceHandle(uint32(dev), &h)); err != nil {
		return 0, fmt.Errorf("device %d: %w", dev, err)
	}
	n.devs[dev] = h
	return h, nil
}

// Utilization is the percent of the last sample period (1/6 s to 1 s) in
// which a kernel ran (gpu) and device memory was read or written (mem).
func (n *NVML) Utilization(dev int) (gpuPercent, memPercent uint32, err error) {
	h, err := n.handle(dev)
	if err != nil {
		return 0, 0, err
	}
	var u nvmlUtilization
	if err := n.check("nvmlDeviceGetUtilizationRates", n.deviceUtilization(h, &u)); err != nil {
		return 0, 0, err
	}
	return u.gpu, u.memory, nil
}

// Memory is the device memory in use and in total, in bytes.
func (n *NVML) Memory(dev int) (used, total uint64, err error) {
	h, err := n.handle(dev)
	if err != nil {
		return 0, 0, err
	}
	var m nvmlMemory
	if err := n.check("nvmlDeviceGetMemoryInfo", n.deviceMemory(h, &m)); err != nil {
		return 0, 0, err
	}
	return m.used, m.total, nil
}

// Name is the GPU's product name ("NVIDIA H200").
func (n *NVML) Name(dev int) (string, error) {
	h, err := n.handle(dev)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 96)
	if err := n.check("nvmlDeviceGetName", n.deviceName(h, &buf[0], uint32(len(buf)))); err != nil {
		return "", err
	}
	return cBuf(buf), nil
}

// DriverVersion is the installed driver's version ("580.159.04").
func (n *NVML) DriverVersion() (string, error) {
	buf := make([]byte, 80)
	if err := n.check("nvmlSystemGetDriverVersion", n.driverVersion(&buf[0], uint32(len(buf)))); err != nil {
		return "", err
	}
	return cBuf(buf), nil
}

// Version is NVML's own version.
func (n *NVML) Version() (string, error) {
	buf := make([]byte, 80)
	if err := n.check("nvmlSystemGetNVMLVersion", n.nvmlVersion(&buf[0], uint32(len(buf)))); err != nil {
		return "", err
	}
	return cBuf(buf), nil
}

// Close shuts the NVML session down.
func (n *NVML) Close() error {
	return n.check("nvmlShutdown", n.shutdown())
}
