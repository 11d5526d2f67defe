package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// OverrideEnv names the variable that lists directories (colon-separated)
// searched for the GPU libraries before anywhere else.
const OverrideEnv = "GOINFER_CUDA_LIBS"

// LibSpec describes one shared library to find.
type LibSpec struct {
	Name    string   // LibRuntime, LibDNN, ...
	Sonames []string // file names in order of preference
	// System is true for driver libraries (libcuda, libnvidia-ml), which
	// come with the NVIDIA driver, never with a toolkit or a pip wheel.
	System bool
	// Fix says how to install the library when it is missing.
	Fix string
}

// The libraries goinfer loads. cuBLASLt is loaded from cuBLAS's directory
// (cuBLAS links against it by soname).
var (
	SpecRuntime = LibSpec{Name: LibRuntime, Sonames: []string{"libcudart.so.13", "libcudart.so.12"},
		Fix: "install the CUDA runtime: pip install nvidia-cuda-runtime (or the CUDA toolkit), or point " + OverrideEnv + " at the directory holding libcudart.so.*"}
	SpecDriver = LibSpec{Name: LibDriver, Sonames: []string{"libcuda.so.1"}, System: true,
		Fix: "install the NVIDIA driver (libcuda.so.1 comes with it); in a container, run with the NVIDIA container toolkit (--gpus all)"}
	SpecDNN = LibSpec{Name: LibDNN, Sonames: []string{"libcudnn.so.9"},
		Fix: "install cuDNN 9: pip install nvidia-cudnn-cu13 (or nvidia-cudnn-cu12 with CUDA 12), or point " + OverrideEnv + " at the directory holding libcudnn.so.9"}
	SpecBLAS = LibSpec{Name: LibBLAS, Sonames: []string{"libcublas.so.13", "libcublas.so.12"},
		Fix: "install cuBLAS: pip install nvidia-cublas (or the CUDA toolkit), or point " + OverrideEnv + " at the directory holding libcublas.so.*"}
	SpecBLASLt = LibSpec{Name: LibBLASLt, Sonames: []string{"libcublasLt.so.13", "libcublasLt.so.12"},
		Fix: SpecBLAS.Fix}
	SpecNVML = LibSpec{Name: LibNVML, Sonames: []string{"libnvidia-ml.so.1"}, System: true,
		Fix: "install the NVIDIA driver (libnvidia-ml.so.1 comes with it); in a container, run with the NVIDIA container toolkit (--gpus all)"}
)

// cudnnSubLibraries are the parts libcudnn.so.9 dlopens by soname, in an
// order where each one's dependencies come first. Preloading them from the
// chosen libcudnn's directory keeps a newer front end from picking up an
// older system copy of its parts.
var cudnnSubLibraries = []string{
	"libcudnn_graph.so.9",
	"libcudnn_heuristic.so.9",
	"libcudnn_engines_precompiled.so.9",
	"libcudnn_engines_runtime_compiled.so.9",
	"libcudnn_ops.so.9",
	"libcudnn_cnn.so.9",
	"libcudnn_adv.so.9",
}

// Candidate is one place a library may be loaded from.
type Candidate struct {
	// Path is a full path, or a bare soname handed to the dynamic loader
	// to search (LD_LIBRARY_PATH, the ld.so cache, default directories).
	Path string
	// Source says why this place is searched, for reports.
	Source string
}

// Bare reports whether the candidate is a soname for the loader's search.
func (c Candidate) Bare() bool { return !strings.Contains(c.Path, "/") }

// Env is what discovery reads from the machine, so tests can fake it.
type Env struct {
	Getenv func(string) string
	Glob   func(pattern string) ([]string, error)
	// Exists reports whether a path names an existing file (or a link
	// to one).
	Exists func(path string) bool
	// Arch is the Debian multiarch triple and CUDA target folder part:
	// "x86_64" or "aarch64"/"sbsa".
	Arch string
	// ReadFile reads small text files (version headers); may be nil.
	ReadFile func(path string) ([]byte, error)
	// LdCache lists the ld.so cache's paths for a soname; may be nil.
	LdCache func(soname string) []string
}

// OSEnv is the real machine.
func OSEnv() Env {
	arch := "x86_64"
	if runtime.GOARCH == "arm64" {
		arch = "aarch64"
	}
	return Env{
		Getenv: os.Getenv,
		Glob:   filepath.Glob,
		Exists: func(p string) bool {
			st, err := os.Stat(p)
			return err == nil && !st.IsDir()
		},
		Arch:     arch,
		ReadFile: os.ReadFile,
		LdCache:  ldCache,
	}
}

// ldCache asks ldconfig -p where the cache puts a soname.
func ldCache(soname string) []string {
	var out []string
	for _, ldconfig := range []string{"/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"} {
		b, err := exec.Command(ldconfig, "-p").Output()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if !strings.HasPrefix(line, soname+" ") {
				continue
			}
			if i := strings.Index(line, "=> "); i >= 0 {
				out = append(out, strings.TrimSpace(line[i+3:]))
			}
		}
		break
	}
	return out
}

// dirSource is a directory to search and why.
type dirSource struct {
	dir, source string
}

// searchDirs lists the directories searched after the override and the
// loader's own search, in order, without duplicates.
func searchDirs(spec LibSpec, env Env) []dirSource {
	var out []dirSource
	seen := map[string]bool{}
	add := func(dir, source string) {
		if dir == "" {
			return
		}
		dir = filepath.Clean(dir)
		if seen[dir] {
			return
		}
		seen[dir] = true
		out = append(out, dirSource{dir, source})
	}
	target := env.Arch + "-linux"
	if env.Arch == "aarch64" {
		target = "sbsa-linux"
	}
	if spec.System {
		// The driver's libraries live where the driver put them; the
		// loader normally knows, these are for containers and odd setups.
		add("/usr/local/nvidia/lib64", "NVIDIA container toolkit directory")
		add("/usr/local/nvidia/lib", "NVIDIA container toolkit directory")
		add("/usr/lib/"+env.Arch+"-linux-gnu", "system library directory")
		add("/usr/lib64", "system library directory")
		add("/usr/lib/wsl/lib", "WSL driver directory")
		return out
	}
	for _, v := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if root := env.Getenv(v); root != "" {
			add(filepath.Join(root, "lib64"), "$"+v)
			add(filepath.Join(root, "targets", target, "lib"), "$"+v)
			add(filepath.Join(root, "lib"), "$"+v)
		}
	}
	add("/usr/local/cuda/lib64", "/usr/local/cuda")
	add("/usr/local/cuda/targets/"+target+"/lib", "/usr/local/cuda")
	if spec.Name == LibDNN {
		add("/usr/lib/"+env.Arch+"-linux-gnu", "system library directory")
	}
	for _, d := range pipDirs(env) {
		add(d.dir, d.source)
	}
	return out
}

// pipDirs finds the nvidia/*/lib folders that pip-installed NVIDIA wheels
// (what PyTorch brings) put in Python environments: the active virtualenv
// or conda environment, then common places.
func pipDirs(env Env) []dirSource {
	type root struct{ dir, source string }
	var roots []root
	if v := env.Getenv("VIRTUAL_ENV"); v != "" {
		roots = append(roots, root{v, "$VIRTUAL_ENV"})
	}
	if v := env.Getenv("CONDA_PREFIX"); v != "" {
		roots = append(roots, root{v, "$CONDA_PREFIX"})
	}
	home := env.Getenv("HOME")
	if home != "" {
		roots = append(roots, root{filepath.Join(home, ".venv"), "~/.venv"},
			root{filepath.Join(home, ".local"), "~/.local (pip --user)"})
	}
	roots = append(roots, root{".venv", "./.venv"}, root{"/opt/*/.venv", "/opt/*/.venv"},
		root{"/opt/conda", "/opt/conda"}, root{"/usr/local", "/usr/local (system pip)"}, root{"/usr", "/usr (system pip)"})
	if home != "" {
		roots = append(roots, root{filepath.Join(home, "miniconda3"), "~/miniconda3"}, root{filepath.Join(home, "anaconda3"), "~/anaconda3"})
	}
	var out []dirSource
	for _, r := range roots {
		var dirs []string
		for _, site := range []string{"lib/python3*/site-packages", "lib/python3*/dist-packages", "lib64/python3*/site-packages"} {
			m, err := env.Glob(filepath.Join(r.dir, site, "nvidia", "*", "lib"))
			if err == nil {
				dirs = append(dirs, m...)
			}
		}
		sort.Strings(dirs)
		for _, d := range dirs {
			out = append(out, dirSource{d, "pip wheel in " + r.source})
		}
	}
	return out
}

// Candidates lists where to look for a library, in order: the override
// directories, the dynamic loader's own search, the CUDA toolkit, then pip
// wheels. Files that do not exist are kept (Exists tells), so a report can
// say every place that was looked at.
func Candidates(spec LibSpec, env Env) []Candidate {
	var out []Candidate
	for _, dir := range filepath.SplitList(env.Getenv(OverrideEnv)) {
		if dir == "" {
			continue
		}
		for _, so := range spec.Sonames {
			out = append(out, Candidate{filepath.Join(dir, so), "$" + OverrideEnv})
		}
	}
	for _, so := range spec.Sonames {
		out = append(out, Candidate{so, "dynamic loader search (LD_LIBRARY_PATH, ld.so.cache)"})
	}
	for _, d := range searchDirs(spec, env) {
		for _, so := range spec.Sonames {
			out = append(out, Candidate{filepath.Join(d.dir, so), d.source})
		}
	}
	return out
}
