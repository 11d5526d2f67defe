package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	cu "goinfer/internal/cuda"
	"goinfer/internal/hugepage"
)

func init() {
	register(command{
		name:    "doctor",
		summary: "report GPUs, driver and the CUDA libraries goinfer found (or where it looked)",
		run:     runDoctor,
	})
}

// doctorGPU is one GPU as doctor reports it.
type doctorGPU struct {
	Index        int    `json:"index"`
	Name         string `json:"name"`
	MemoryBytes  uint64 `json:"memory_bytes"`
	Compute      string `json:"compute_capability,omitempty"`
	SMs          int    `json:"multiprocessors,omitempty"`
	MemoryUsed   uint64 `json:"memory_used_bytes,omitempty"`
	Utilization  uint32 `json:"utilization_percent"`
	FromNVMLOnly bool   `json:"nvml_only,omitempty"`
}

// doctorLib is one library as doctor reports it.
type doctorLib struct {
	Name     string       `json:"name"`
	Found    bool         `json:"found"`
	Version  string       `json:"version,omitempty"`
	Path     string       `json:"path,omitempty"`
	Parts    []string     `json:"parts,omitempty"`
	Error    string       `json:"error,omitempty"`
	Fix      string       `json:"fix,omitempty"`
	Searched []doctorSeen `json:"searched,omitempty"`
}

type doctorSeen struct {
	Path    string `json:"path"`
	Source  string `json:"source"`
	Result  string `json:"result"`
	Version string `json:"version,omitempty"`
}

// doctorReport is everything doctor prints.
type doctorReport struct {
	GPUs          []doctorGPU `json:"gpus"`
	Driver        string      `json:"driver_version,omitempty"`
	DriverCUDA    string      `json:"driver_cuda_version,omitempty"`
	Libraries     []doctorLib `json:"libraries"`
	CUDAUsable    bool        `json:"cuda_engine_usable"`
	CUDAProblem   string      `json:"cuda_engine_problem,omitempty"`
	OverrideVar   string      `json:"override_variable"`
	OverrideValue string      `json:"override_value,omitempty"`
	// JPEGHardware says whether nvJPEG's hardware backend (the GPU's JPEG
	// engines) initialises on GPU 0; empty when it could not be tried.
	JPEGHardware string `json:"jpeg_hardware_decoder,omitempty"`
	// HugePages says whether large host buffers (weights, activations,
	// request tensors) are advised for transparent huge pages.
	HugePages bool `json:"huge_page_advice"`
}

func runDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("doctor", "doctor [--json] [--verbose]", stderr)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	verbose := fs.Bool("verbose", false, "list every place searched, also for libraries that were found")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	r := diagnose()
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	printDoctor(stdout, r, *verbose)
	return nil
}

func libReport(info cu.LibInfo) doctorLib {
	l := doctorLib{Name: info.Name, Found: info.Err == nil && info.Path != "", Version: info.Version, Path: info.Path, Parts: info.Parts}
	if info.Err != nil {
		l.Error = info.Err.Error()
		l.Fix = info.Fix
	}
	for _, a := range info.Attempts {
		res := a.Err
		if res == "" {
			res = "loaded"
		}
		l.Searched = append(l.Searched, doctorSeen{Path: a.Path, Source: a.Source, Result: res, Version: a.Version})
	}
	return l
}

// diagnose gathers the report; it never fails: what is missing is part of
// the report.
func diagnose() doctorReport {
	r := doctorReport{OverrideVar: cu.OverrideEnv, HugePages: hugepage.Advised()}
	r.OverrideValue = cu.OSEnv().Getenv(cu.OverrideEnv)
	libs, _ := cu.Load()
	if libs != nil {
		for _, info := range libs.Infos {
			r.Libraries = append(r.Libraries, libReport(info))
		}
	}
	nv, nvInfo, nvErr := cu.OpenNVMLInfo()
	r.Libraries = append(r.Libraries, libReport(nvInfo))
	if nvErr == nil {
		defer nv.Close()
		if v, err := nv.DriverVersion(); err == nil {
			r.Driver = v
		}
	}
	jpg, jpgInfo, jpgErr := cu.OpenJPEG()
	r.Libraries = append(r.Libraries, libReport(jpgInfo))
	if err := cu.Usable(); err != nil {
		r.CUDAProblem = err.Error()
	} else {
		r.CUDAUsable = true
		if jpgErr == nil {
			r.JPEGHardware = "yes"
			if h, err := jpg.Create(cu.JPEGBackendHardware); err != nil {
				r.JPEGHardware = "no (" + err.Error() + ")"
			} else {
				jpg.Destroy(h)
			}
		}
	}
	if libs != nil && libs.Runtime != nil {
		if v, err := libs.Runtime.DriverVersion(); err == nil {
			r.DriverCUDA = cu.FormatCUDAVersion(v)
		}
		if n, err := libs.Runtime.DeviceCount(); err == nil {
			for i := 0; i < n; i++ {
				r.GPUs = append(r.GPUs, gpuReport(libs, nv, i))
			}
		}
	}
	if len(r.GPUs) == 0 && nv != nil {
		// The runtime is missing or broken, but the driver sees GPUs.
		if n, err := nv.DeviceCount(); err == nil {
			for i := 0; i < n; i++ {
				g := doctorGPU{Index: i, FromNVMLOnly: true}
				g.Name, _ = nv.Name(i)
				g.MemoryUsed, g.MemoryBytes, _ = nv.Memory(i)
				r.GPUs = append(r.GPUs, g)
			}
		}
	}
	return r
}

func gpuReport(libs *cu.Libs, nv *cu.NVML, i int) doctorGPU {
	g := doctorGPU{Index: i}
	if libs.Driver != nil {
		g.Name, _ = libs.Driver.DeviceName(i)
		g.MemoryBytes, _ = libs.Driver.DeviceTotalMem(i)
	}
	rt := libs.Runtime
	ma, err1 := rt.DeviceAttribute(cu.AttrComputeCapabilityMajor, i)
	mi, err2 := rt.DeviceAttribute(cu.AttrComputeCapabilityMinor, i)
	if err1 == nil && err2 == nil {
		g.Compute = fmt.Sprintf("%d.%d", ma, mi)
	}
	g.SMs, _ = rt.DeviceAttribute(cu.AttrMultiProcessorCount, i)
	if nv != nil {
		// NVML numbers GPUs in PCI order, CUDA by default fastest first;
		// with one GPU (the common case) they agree.
		if g.Name == "" {
			g.Name, _ = nv.Name(i)
		}
		g.MemoryUsed, _, _ = nv.Memory(i)
		g.Utilization, _, _ = nv.Utilization(i)
	}
	return g
}

func printDoctor(w io.Writer, r doctorReport, verbose bool) {
	var driverMissing bool
	var missing []string
	for _, l := range r.Libraries {
		if !l.Found && l.Name != cu.LibJPEG { // only image decoding needs nvJPEG
			missing = append(missing, l.Name)
			driverMissing = driverMissing || l.Name == cu.LibDriver
		}
	}
	if len(r.GPUs) == 0 {
		if driverMissing {
			fmt.Fprintln(w, "No NVIDIA GPU here: the NVIDIA driver (libcuda.so.1) is not installed or not visible to this process.")
		} else {
			fmt.Fprintln(w, "No NVIDIA GPU is visible to this process (check CUDA_VISIBLE_DEVICES and the driver).")
		}
		fmt.Fprintln(w, "goinfer runs on the cpu engine (--engine auto picks it); --engine cuda will fail.")
		fmt.Fprintln(w)
	} else {
		fmt.Fprintln(w, "GPUs:")
	}
	for _, g := range r.GPUs {
		fmt.Fprintf(w, "  %d: %s, %s", g.Index, g.Name, cu.FormatBytes(int64(g.MemoryBytes)))
		if g.Compute != "" {
			fmt.Fprintf(w, ", compute %s, %d SMs", g.Compute, g.SMs)
		}
		fmt.Fprintf(w, ", %s in use, %d%% busy", cu.FormatBytes(int64(g.MemoryUsed)), g.Utilization)
		if g.FromNVMLOnly {
			fmt.Fprint(w, " (seen by NVML only: the CUDA runtime is unusable)")
		}
		fmt.Fprintln(w)
	}
	if r.Driver != "" || r.DriverCUDA != "" {
		fmt.Fprintf(w, "Driver: %s (supports CUDA %s)\n", orUnknown(r.Driver), orUnknown(r.DriverCUDA))
	}
	fmt.Fprintln(w, "Libraries:")
	for _, l := range r.Libraries {
		if l.Found {
			fmt.Fprintf(w, "  %-8s %-10s %s\n", l.Name, l.Version, l.Path)
			for _, p := range l.Parts {
				if p != l.Path {
					fmt.Fprintf(w, "  %-8s %-10s   with %s\n", "", "", p)
				}
			}
			if verbose {
				printSearched(w, l)
			}
			continue
		}
		fmt.Fprintf(w, "  %-8s MISSING\n", l.Name)
		printSearched(w, l)
		if l.Fix != "" {
			fmt.Fprintf(w, "           fix: %s\n", l.Fix)
		}
	}
	if r.OverrideValue != "" {
		fmt.Fprintf(w, "%s=%s (searched first)\n", r.OverrideVar, r.OverrideValue)
	} else {
		fmt.Fprintf(w, "Set %s=DIR[:DIR...] to search other directories first.\n", r.OverrideVar)
	}
	if r.JPEGHardware != "" {
		fmt.Fprintf(w, "GPU JPEG decoding: nvJPEG found; hardware decoder: %s\n", r.JPEGHardware)
	}
	if r.HugePages {
		fmt.Fprintln(w, "Host memory: large buffers advised for transparent huge pages")
	} else {
		fmt.Fprintln(w, "Host memory: large buffers not advised for huge pages (not Linux, or a virtio balloon reports free memory to the host)")
	}
	switch {
	case r.CUDAUsable:
		fmt.Fprintln(w, "cuda engine: usable (--engine auto picks it)")
	case len(missing) > 0:
		fmt.Fprintf(w, "cuda engine: not usable: missing %s\n", strings.Join(missing, ", "))
	default:
		fmt.Fprintf(w, "cuda engine: not usable: %s\n", r.CUDAProblem)
	}
}

func printSearched(w io.Writer, l doctorLib) {
	var dirs []string
	seen := map[string]bool{}
	for _, s := range l.Searched {
		switch {
		case s.Result == "not found":
			d := s.Path[:strings.LastIndexByte(s.Path, '/')+1]
			if !seen[d] {
				seen[d] = true
				dirs = append(dirs, d)
			}
		case strings.Contains(s.Path, "/") || s.Result == "loaded":
			v := ""
			if s.Version != "" {
				v = " version " + s.Version
			}
			fmt.Fprintf(w, "           %s [%s]: %s%s\n", s.Path, s.Source, s.Result, v)
		case !seen["loader"]:
			seen["loader"] = true
			fmt.Fprintln(w, "           not found by the dynamic loader (LD_LIBRARY_PATH, ld.so.cache)")
		}
	}
	if len(dirs) > 0 {
		fmt.Fprintf(w, "           not in: %s\n", strings.Join(dirs, " "))
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
