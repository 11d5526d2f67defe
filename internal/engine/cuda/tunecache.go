package cuda

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
)

// tuneFormat versions the tuning cache's file: a goinfer whose tuning
// changes what an entry means bumps it, and older files are ignored.
const tuneFormat = 2

// tuneFile is the on-disk form of a model's autotuning results
// (Options.TuningCache), as TensorRT keeps a timing cache: cuDNN's
// measurements of each convolution problem and the choices tuneFused made,
// so that the next process on the same GPU and libraries skips both. A
// file holds one device and library combination (Device); problems of
// every model and batch size run there accumulate in it.
type tuneFile struct {
	Format int          `json:"format"`
	Device string       `json:"device"`
	Find   []findEntry  `json:"find"`
	Fused  []fusedEntry `json:"fused"`
	// Depthwise: the general-graph executor's choices between its own
	// depthwise kernel and cuDNN's (graphdwtune.go).
	Depthwise []dwEntry `json:"depthwise,omitempty"`
}

// tuneSaveMu orders the read-modify-write saves of cache files shared by
// the ResNet path's and the general graphs' models of one process.
var tuneSaveMu sync.Mutex

// depthwise returns the file's depthwise measurements of precision.
func (f *tuneFile) depthwise(precision string) map[dwShape]dwTimed {
	out := map[dwShape]dwTimed{}
	for _, e := range f.Depthwise {
		if e.Precision == precision {
			out[e.Shape] = e.dwTimed
		}
	}
	return out
}

// setDepthwise replaces the file's depthwise measurements of precision
// with times (in a stable order, so that rewriting a file with the same
// results gives the same bytes).
func (f *tuneFile) setDepthwise(precision string, times map[dwShape]dwTimed) {
	kept := f.Depthwise[:0:0]
	for _, e := range f.Depthwise {
		if e.Precision != precision {
			kept = append(kept, e)
		}
	}
	var add []dwEntry
	for s, t := range times {
		add = append(add, dwEntry{Shape: s, Precision: precision, dwTimed: t})
	}
	sort.Slice(add, func(i, j int) bool { return fmt.Sprint(add[i].Shape) < fmt.Sprint(add[j].Shape) })
	f.Depthwise = append(kept, add...)
}

type tuneKey struct {
	N, C, H, W, K, R, Stride, Pad, Groups int
	Precision                             string
}

type findEntry struct {
	Key  tuneKey   `json:"key"`
	Perf []perfRow `json:"perf"`
}

type perfRow struct {
	Algo, Status, Determinism, MathType int32
	Time                                float32
	Memory                              uint64
}

type fusedEntry struct {
	Key            tuneKey `json:"key"`
	ReLU, Residual bool
	Fused          int `json:"fused"`
	Plain          int `json:"plain"`
	Math           int `json:"math"`
	// Splits and Chunks: conv_mma's launch, when Splits > 0.
	Splits int `json:"splits,omitempty"`
	Chunks int `json:"chunks,omitempty"`
}

func toTuneKey(k algoKey) tuneKey {
	return tuneKey{k.n, k.c, k.h, k.w, k.k, k.r, k.stride, k.pad, k.groups, k.prec.String()}
}

func fromTuneKey(k tuneKey) (algoKey, bool) {
	p, err := engine.ParsePrecision(k.Precision)
	if err != nil {
		return algoKey{}, false
	}
	return algoKey{k.N, k.C, k.H, k.W, k.K, k.R, k.Stride, k.Pad, k.Groups, p}, true
}

// tuneDevice names what tuning results depend on: the GPU model, its
// compute capability, the driver and cuDNN.
func tuneDevice(libs *cu.Libs, ordinal int) string {
	name, err := libs.Driver.DeviceName(ordinal)
	if err != nil {
		name = "GPU"
	}
	const attrMajor, attrMinor = 75, 76 // cudaDevAttrComputeCapabilityMajor/Minor
	major, _ := libs.Runtime.DeviceAttribute(attrMajor, ordinal)
	minor, _ := libs.Runtime.DeviceAttribute(attrMinor, ordinal)
	driver, _ := libs.Runtime.DriverVersion()
	return fmt.Sprintf("%s sm_%d%d driver %d cudnn %d", name, major, minor, driver, libs.DNN.Version())
}

// tunePath is the cache file for device in dir.
func tunePath(dir, device string) string {
	safe := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-':
			return r
		}
		return '_'
	}, device)
	return filepath.Join(dir, "cuda-tuning-"+safe+".json")
}

// readTuneFile reads the cache file at path written for device; nil and
// no error when there is none yet.
func readTuneFile(path, device string) (*tuneFile, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var f tuneFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("not a tuning cache: %w", err)
	}
	if f.Format != tuneFormat || f.Device != device {
		return nil, fmt.Errorf("written for format %d on %q, not format %d on %q", f.Format, f.Device, tuneFormat, device)
	}
	return &f, nil
}

// loadTuning fills m's tuning maps from its cache file, if there is one
// for this device. A missing file is normal; an unreadable or foreign one
// is reported through Progress and ignored (it is rewritten on save).
func (m *cudaModel) loadTuning() {
	if m.opts.TuningCache == "" {
		return
	}
	var path string
	var f *tuneFile
	m.tuneDevice, path, f = openTuning(m.opts.TuningCache, m.libs, m.dev.ordinal, m.progress)
	if f == nil {
		return
	}
	algos, fused := f.entries()
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, v := range algos {
		m.algos[k] = v
	}
	for k, v := range fused {
		m.fused[k] = v
	}
	m.progress("cuda: tuning cache %s: %d measured problems, %d tuned", path, len(algos), len(fused))
}

// openTuning reads the tuning cache in dir for GPU ordinal: the device
// line that names its file, the file's path, and its contents, nil when
// there is no file yet or when it cannot be used (said through progress;
// it is rewritten on save).
func openTuning(dir string, libs *cu.Libs, ordinal int, progress func(format string, args ...any)) (device, path string, f *tuneFile) {
	device = tuneDevice(libs, ordinal)
	path = tunePath(dir, device)
	f, err := readTuneFile(path, device)
	if err != nil {
		progress("cuda: tuning cache %s ignored: %v", path, err)
		return device, path, nil
	}
	return device, path, f
}

// entries converts the file's entries, skipping any it cannot read.
func (f *tuneFile) entries() (map[algoKey][]cu.ConvFwdPerf, map[fusedKey]tuned) {
	algos, fused := map[algoKey][]cu.ConvFwdPerf{}, map[fusedKey]tuned{}
	for _, e := range f.Find {
		k, ok := fromTuneKey(e.Key)
		if !ok || len(e.Perf) == 0 {
			continue
		}
		perf := make([]cu.ConvFwdPerf, len(e.Perf))
		for j, p := range e.Perf {
			perf[j] = cu.ConvFwdPerf{Algo: p.Algo, Status: p.Status, Time: p.Time, Memory: p.Memory, Determinism: p.Determinism, MathType: p.MathType}
		}
		algos[k] = perf
	}
	for _, e := range f.Fused {
		if k, ok := fromTuneKey(e.Key); ok {
			fused[fusedKey{k, e.ReLU, e.Residual}] = tuned{fused: e.Fused, plain: e.Plain, math: e.Math, splits: e.Splits, chunks: e.Chunks}
		}
	}
	return algos, fused
}

// newTuneFile is the file form of tuning results.
func newTuneFile(device string, algos map[algoKey][]cu.ConvFwdPerf, fused map[fusedKey]tuned) tuneFile {
	f := tuneFile{Format: tuneFormat, Device: device}
	for k, perf := range algos {
		e := findEntry{Key: toTuneKey(k)}
		for _, p := range perf {
			e.Perf = append(e.Perf, perfRow{Algo: p.Algo, Status: p.Status, Time: p.Time, Memory: p.Memory, Determinism: p.Determinism, MathType: p.MathType})
		}
		f.Find = append(f.Find, e)
	}
	for k, t := range fused {
		f.Fused = append(f.Fused, fusedEntry{Key: toTuneKey(k.algoKey), ReLU: k.relu, Residual: k.residual, Fused: t.fused, Plain: t.plain, Math: t.math, Splits: t.splits, Chunks: t.chunks})
	}
	return f
}

// saveTuning writes m's tuning results to its cache file when tuning added
// any, through a temporary file and a rename, so that a reader (another
// process starting) never sees half a file. Failing to save costs only
// the next start's time: it is reported, not returned.
func (m *cudaModel) saveTuning() {
	if m.opts.TuningCache == "" {
		return
	}
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	m.mu.Lock()
	if !m.tuneDirty {
		m.mu.Unlock()
		return
	}
	f := newTuneFile(m.tuneDevice, m.algos, m.fused)
	m.tuneDirty = false
	m.mu.Unlock()
	path := tunePath(m.opts.TuningCache, m.tuneDevice)
	tuneSaveMu.Lock()
	defer tuneSaveMu.Unlock()
	// The general graphs' depthwise choices share the file: kept.
	if old, err := readTuneFile(path, m.tuneDevice); err == nil && old != nil {
		f.Depthwise = old.Depthwise
	}
	if err := writeAtomic(path, f); err != nil {
		m.progress("cuda: saving the tuning cache: %v", err)
	}
}

func writeAtomic(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tuning-*.json")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
