// Package cuda binds, at run time, the NVIDIA libraries goinfer's GPU engine
// calls: the CUDA runtime (memory, streams, events, graphs), the driver API
// (device names, loading goinfer's PTX kernels), cuDNN 9, cuBLAS and NVML.
//
// Nothing is linked: the libraries are found on the machine (see Candidates
// for where) and opened with purego, so goinfer builds with CGO_ENABLED=0
// on machines without CUDA and runs wherever the libraries exist. Every call
// checks its status and turns a failure into an *Error naming the call and
// the library's own name for the status.
package cuda

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
)

// Libs are the loaded libraries. A nil field is a library that could not be
// loaded; Infos says where it was looked for.
type Libs struct {
	Runtime *Runtime
	Driver  *Driver
	DNN     *DNN
	BLAS    *BLAS
	// BLASLt is cuBLASLt, when it loads (products with fused epilogues);
	// nil otherwise: callers fall back to cuBLAS and a kernel.
	BLASLt *BLASLt
	// Infos describes each library, loaded or not, in a fixed order:
	// runtime, driver, cuDNN, cuBLAS.
	Infos []LibInfo
}

// Loading is process-wide by nature (dlopen), so it happens once.
var (
	loadOnce sync.Once
	loaded   *Libs
	loadErr  error
)

// Load finds and opens the libraries once per process. The error, when
// not nil, lists every missing library with where it was looked for and how
// to install it; the returned Libs are then partial (doctor prints them).
func Load() (*Libs, error) {
	loadOnce.Do(func() { loaded, loadErr = load(OSEnv()) })
	return loaded, loadErr
}

func load(env Env) (*Libs, error) {
	ls := &Libs{}
	var missing []string
	driverMissing := false
	fail := func(info *LibInfo, err error) {
		if info.Err == nil {
			info.Err = err
		}
		driverMissing = driverMissing || info.Name == LibDriver
		missing = append(missing, fmt.Sprintf("%s (%s)", info.Name, info.Fix))
	}

	rt := open(SpecRuntime, env)
	if rt.info.Err == nil {
		r, err := newRuntime(rt)
		if err != nil {
			fail(&rt.info, err)
		} else {
			ls.Runtime = r
			if v, err := r.Version(); err == nil {
				rt.info.Version = FormatCUDAVersion(v)
			}
		}
	} else {
		fail(&rt.info, nil)
	}

	drv := open(SpecDriver, env)
	if drv.info.Err == nil {
		d, err := newDriver(drv)
		if err != nil {
			fail(&drv.info, err)
		} else {
			ls.Driver = d
			if v, err := d.Version(); err == nil {
				drv.info.Version = FormatCUDAVersion(v)
			}
		}
	} else {
		fail(&drv.info, nil)
	}

	dnn := openNewest(SpecDNN, env, cudnnSubLibraries)
	if dnn.info.Err == nil {
		d, err := newDNN(dnn)
		if err != nil {
			fail(&dnn.info, err)
		} else {
			ls.DNN = d
			v := d.Version()
			dnn.info.Version = fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
		}
	} else {
		fail(&dnn.info, nil)
	}

	blas := open(SpecBLAS, env)
	if blas.info.Err == nil {
		b, err := newBLAS(blas)
		if err != nil {
			fail(&blas.info, err)
		} else {
			ls.BLAS = b
			if ma, mi, pa, err := b.Version(); err == nil {
				blas.info.Version = fmt.Sprintf("%d.%d.%d", ma, mi, pa)
			}
			if lt := open(SpecBLASLt, env); lt.info.Err == nil {
				blas.info.Parts = append(blas.info.Parts, lt.info.Path)
				if b, err := newBLASLt(lt); err == nil {
					ls.BLASLt = b
				}
			}
		}
	} else {
		fail(&blas.info, nil)
	}
	if ls.DNN != nil {
		dnn.info.Parts = mappedFiles("libcudnn")
	}
	ls.Infos = []LibInfo{rt.info, drv.info, dnn.info, blas.info}
	switch {
	case driverMissing:
		return ls, errNoDriver
	case len(missing) > 0:
		return ls, fmt.Errorf("GPU libraries missing: %s; `goinfer doctor` lists where goinfer looked", strings.Join(missing, "; "))
	}
	return ls, nil
}

// errNoDriver is Load's and Usable's error where the driver is missing.
var errNoDriver = errors.New("no NVIDIA driver (libcuda.so.1 not found): this machine has no usable GPU; `goinfer doctor` lists where goinfer looked")

// driverFound reports, once per process, whether the driver library opens:
// without it no GPU is usable, and Load's search for the other libraries
// (directory scans of pip's and conda's trees, ~15-25 ms) would only delay
// every start of a machine without a GPU.
var driverFound = sync.OnceValue(func() bool { return open(SpecDriver, OSEnv()).info.Err == nil })

// Usable reports whether the libraries loaded and at least one GPU is
// visible; the error says what is missing.
func Usable() error {
	if !driverFound() {
		return errNoDriver
	}
	ls, err := Load()
	if err != nil {
		return err
	}
	n, err := ls.Runtime.DeviceCount()
	if err != nil {
		if errors.Is(err, ErrNoDevice) {
			return fmt.Errorf("no CUDA GPU: %w", err)
		}
		return err
	}
	if n == 0 {
		return errors.New("no CUDA GPU is visible (cudaGetDeviceCount says 0; check CUDA_VISIBLE_DEVICES)")
	}
	return nil
}

// FormatCUDAVersion prints 13000 as "13.0".
func FormatCUDAVersion(v int) string {
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}

// mappedFiles lists the distinct files mapped into this process whose base
// name starts with prefix: which copies of a library are really in use.
func mappedFiles(prefix string) []string {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		i := strings.IndexByte(line, '/')
		if i < 0 {
			continue
		}
		p := line[i:]
		base := p[strings.LastIndexByte(p, '/')+1:]
		if strings.HasPrefix(base, prefix) && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}
