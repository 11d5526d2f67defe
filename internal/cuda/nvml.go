package cuda

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/ebitengine/purego"
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
	// deviceSamples is nil when the driver lacks nvmlDeviceGetSamples:
	// the rest of NVML stays usable.
	deviceSamples func(h uintptr, typ uint32, lastSeen uint64, valType *uint32, count *uint32, samples *nvmlSample) int32
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
	if sym := l.sym("nvmlDeviceGetSamples"); sym != 0 {
		purego.RegisterFunc(&n.deviceSamples, sym)
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

// NVML constants of nvmlDeviceGetSamples (nvml.h).
const (
	nvmlErrorNotFound         = 6 // no sample newer than lastSeenTimeStamp
	nvmlErrorInsufficientSize = 7
	nvmlGPUUtilizationSamples = 1 // NVML_GPU_UTILIZATION_SAMPLES

	// nvmlValueType_t: which member of the nvmlValue_t union is set.
	nvmlValueDouble           = 0
	nvmlValueUnsignedInt      = 1
	nvmlValueUnsignedLong     = 2
	nvmlValueUnsignedLongLong = 3
	nvmlValueSignedLongLong   = 4
	nvmlValueSignedInt        = 5
)

// nvmlSample is nvmlSample_t: a CPU timestamp in microseconds since the Unix
// epoch, then the 8-byte nvmlValue_t union, kept raw until its type is known.
type nvmlSample struct {
	timeStamp uint64
	value     uint64
}

// UtilSample is one entry of the driver's GPU utilization sample buffer.
type UtilSample struct {
	// At is when the driver took the sample: the end of the sample period
	// it describes.
	At time.Time
	// Percent is the part of that period (1/6 s to 1 s, by product) in
	// which one or more kernels ran, 0 to 100.
	Percent float64
}

// ErrNoSamples means the driver has no nvmlDeviceGetSamples (drivers older
// than the Kepler-era R319 API).
var ErrNoSamples = errors.New("nvml: nvmlDeviceGetSamples missing: the driver's NVML is too old to read its utilization sample buffer")

// UtilizationSamples returns the GPU utilization samples the driver has
// buffered for device dev that were taken after since (all it holds when
// since is the zero time), oldest first. The buffer holds the last few
// seconds; it is empty, without an error, when the driver recorded nothing
// newer, which it also does while the GPU idles.
//
// Unlike Utilization, which reports the last sample period only, this
// covers any window of the recent past, read after the fact: that is how a
// run shorter than a second gets a utilization of its own.
func (n *NVML) UtilizationSamples(dev int, since time.Time) ([]UtilSample, error) {
	if n.deviceSamples == nil {
		return nil, ErrNoSamples
	}
	h, err := n.handle(dev)
	if err != nil {
		return nil, err
	}
	var lastSeen uint64
	if us := since.UnixMicro(); !since.IsZero() && us > 0 {
		lastSeen = uint64(us)
	}
	const call = "nvmlDeviceGetSamples"
	var valType, count uint32
	// The first call, without a buffer, says how many entries to make room
	// for. Samples arriving between the two calls can outgrow that, hence
	// the room to spare and the retries.
	code := n.deviceSamples(h, nvmlGPUUtilizationSamples, lastSeen, &valType, &count, nil)
	switch code {
	case nvmlSuccess:
	case nvmlErrorNotFound:
		return []UtilSample{}, nil
	default:
		return nil, fmt.Errorf("device %d: %w", dev, n.check(call, code))
	}
	for try := 0; count > 0; try++ {
		buf := make([]nvmlSample, count+count/4+4)
		got := uint32(len(buf))
		code = n.deviceSamples(h, nvmlGPUUtilizationSamples, lastSeen, &valType, &got, &buf[0])
		switch {
		case code == nvmlSuccess:
			if int(got) > len(buf) {
				return nil, fmt.Errorf("device %d: %s reported %d samples for a buffer of %d", dev, call, got, len(buf))
			}
			return decodeUtilSamples(buf[:got], valType, lastSeen)
		case code == nvmlErrorNotFound:
			return []UtilSample{}, nil
		case code == nvmlErrorInsufficientSize && try < 3:
			count = uint32(len(buf)) * 2
		default:
			return nil, fmt.Errorf("device %d: %w", dev, n.check(call, code))
		}
	}
	return []UtilSample{}, nil
}

// decodeUtilSamples converts the driver's entries, dropping unfilled ones
// (timestamp 0) and any not newer than lastSeen, and sorts them by time:
// the buffer is a ring, whose order the API does not promise.
func decodeUtilSamples(raw []nvmlSample, valType uint32, lastSeen uint64) ([]UtilSample, error) {
	out := make([]UtilSample, 0, len(raw))
	for _, r := range raw {
		if r.timeStamp == 0 || r.timeStamp <= lastSeen {
			continue
		}
		v, err := nvmlValue(r.value, valType)
		if err != nil {
			return nil, err
		}
		if !(v >= 0 && v <= 100) {
			return nil, fmt.Errorf("nvml: utilization sample of %v%% at %d µs is not a percentage", v, r.timeStamp)
		}
		out = append(out, UtilSample{At: time.UnixMicro(int64(r.timeStamp)), Percent: v})
	}
	slices.SortStableFunc(out, func(a, b UtilSample) int { return a.At.Compare(b.At) })
	return out, nil
}

// nvmlValue reads the member of an nvmlValue_t union that typ names. The
// union is little-endian, so 32-bit members are its low half.
func nvmlValue(raw uint64, typ uint32) (float64, error) {
	switch typ {
	case nvmlValueDouble:
		return math.Float64frombits(raw), nil
	case nvmlValueUnsignedInt:
		return float64(uint32(raw)), nil
	case nvmlValueUnsignedLong, nvmlValueUnsignedLongLong:
		return float64(raw), nil
	case nvmlValueSignedLongLong:
		return float64(int64(raw)), nil
	case nvmlValueSignedInt:
		return float64(int32(uint32(raw))), nil
	}
	return 0, fmt.Errorf("nvml: sample value type %d unknown", typ)
}
