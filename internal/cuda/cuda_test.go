package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ebitengine/purego"
)

// fakeEnv is a machine made of a variable map and a list of files.
func fakeEnv(vars map[string]string, files ...string) Env {
	set := map[string]bool{}
	for _, f := range files {
		set[f] = true
	}
	return Env{
		Getenv: func(k string) string { return vars[k] },
		Glob: func(pattern string) ([]string, error) {
			var out []string
			for _, f := range files {
				// Match the pattern against each prefix directory of f.
				for d := f; d != "/" && d != "."; d = filepath.Dir(d) {
					if ok, _ := filepath.Match(pattern, d); ok {
						out = append(out, d)
					}
				}
			}
			return out, nil
		},
		Exists: func(p string) bool { return set[p] },
		Arch:   "x86_64",
	}
}

func paths(cs []Candidate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Path
	}
	return out
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

func TestCandidatesOrder(t *testing.T) {
	pipLib := "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib"
	venvLib := "/home/u/venv/lib/python3.11/site-packages/nvidia/cudnn/lib"
	env := fakeEnv(map[string]string{
		OverrideEnv:   "/my/libs:/other",
		"CUDA_HOME":   "/cuda-12.8",
		"VIRTUAL_ENV": "/home/u/venv",
		"HOME":        "/home/u",
	}, pipLib+"/libcudnn.so.9", venvLib+"/libcudnn.so.9")
	got := paths(Candidates(SpecDNN, env))
	want := []string{
		"/my/libs/libcudnn.so.9",
		"/other/libcudnn.so.9",
		"libcudnn.so.9",
		"/cuda-12.8/lib64/libcudnn.so.9",
		"/usr/local/cuda/lib64/libcudnn.so.9",
		venvLib + "/libcudnn.so.9",
		pipLib + "/libcudnn.so.9",
	}
	last := -1
	for _, w := range want {
		i := indexOf(got, w)
		if i < 0 {
			t.Fatalf("candidate %s missing from %v", w, got)
		}
		if i <= last {
			t.Errorf("candidate %s at %d, want after %d in %v", w, i, last, got)
		}
		last = i
	}
}

func TestCandidatesSonamePreference(t *testing.T) {
	got := paths(Candidates(SpecRuntime, fakeEnv(nil)))
	i13, i12 := indexOf(got, "libcudart.so.13"), indexOf(got, "libcudart.so.12")
	if i13 < 0 || i12 < 0 || i13 > i12 {
		t.Errorf("loader candidates %v: want libcudart.so.13 before .so.12", got)
	}
}

func TestCandidatesSystemLibsSkipToolkitAndPip(t *testing.T) {
	env := fakeEnv(map[string]string{"CUDA_HOME": "/cuda"}, "/opt/x/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so.13")
	for _, c := range Candidates(SpecNVML, env) {
		if strings.HasPrefix(c.Path, "/cuda") || strings.Contains(c.Path, "site-packages") {
			t.Errorf("driver library candidate %s: NVML comes with the driver, not a toolkit or wheel", c.Path)
		}
	}
	if got := paths(Candidates(SpecNVML, env)); indexOf(got, "/usr/local/nvidia/lib64/libnvidia-ml.so.1") < 0 {
		t.Errorf("NVML candidates %v lack the container toolkit directory", got)
	}
}

func TestCandidatesPipGlob(t *testing.T) {
	lib := "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib"
	env := fakeEnv(nil, lib+"/libcublas.so.13")
	cs := Candidates(SpecBLAS, env)
	i := indexOf(paths(cs), lib+"/libcublas.so.13")
	if i < 0 {
		t.Fatalf("pip wheel directory not searched: %v", paths(cs))
	}
	if !strings.Contains(cs[i].Source, "pip wheel") {
		t.Errorf("source %q, want it to say pip wheel", cs[i].Source)
	}
}

func TestOpenRecordsAttempts(t *testing.T) {
	// Discovery against the real loader, with a library every Linux has.
	spec := LibSpec{Name: "libm", Sonames: []string{"libm.so.6"}, Fix: "none"}
	env := OSEnv()
	dir := t.TempDir()
	t.Setenv(OverrideEnv, dir)
	l := open(spec, env)
	if l.info.Err != nil {
		t.Skipf("libm not loadable here: %v", l.info.Err)
	}
	if len(l.info.Attempts) < 2 || l.info.Attempts[0].Err != errNotFound || l.info.Attempts[0].Path != filepath.Join(dir, "libm.so.6") {
		t.Errorf("attempts %+v: want the override directory tried first and recorded as not found", l.info.Attempts)
	}
	if !filepath.IsAbs(l.info.Path) || !strings.Contains(filepath.Base(l.info.Path), "libm") {
		t.Errorf("loaded path %q: want the resolved file", l.info.Path)
	}

	missing := open(LibSpec{Name: "nothing", Sonames: []string{"libgoinfer-does-not-exist.so.1"}, Fix: "install nothing"}, env)
	if missing.info.Err == nil || !strings.Contains(missing.info.Err.Error(), "libgoinfer-does-not-exist.so.1") {
		t.Errorf("missing library error %v: want it to name the file", missing.info.Err)
	}
}

func TestErrorMapping(t *testing.T) {
	namer := func(c int) (string, string) {
		return map[int]string{2000: "CUDNN_STATUS_BAD_PARAM", 4004: "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED", 3002: "CUDNN_STATUS_NOT_SUPPORTED_SHAPE"}[c], "detail"
	}
	cases := []struct {
		lib      string
		code     int
		namer    statusNamer
		text     string
		oom, uns bool
	}{
		{LibDNN, 2000, namer, "cudnnConvolutionForward: CUDNN_STATUS_BAD_PARAM (detail)", false, false},
		{LibDNN, 4004, namer, "cudnnConvolutionForward: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED (detail)", true, false},
		{LibDNN, 3002, namer, "cudnnConvolutionForward: CUDNN_STATUS_NOT_SUPPORTED_SHAPE (detail)", false, true},
		{LibRuntime, 2, func(int) (string, string) { return "cudaErrorMemoryAllocation", "out of memory" }, "cudnnConvolutionForward: cudaErrorMemoryAllocation (out of memory)", true, false},
		{LibBLAS, 15, nil, "cudnnConvolutionForward: cublas status 15", false, true},
	}
	for _, c := range cases {
		err := fmt.Errorf("layer1: %w", newError(c.lib, "cudnnConvolutionForward", c.code, c.namer))
		if !strings.HasSuffix(err.Error(), c.text) {
			t.Errorf("%s %d: %q, want suffix %q", c.lib, c.code, err, c.text)
		}
		if errors.Is(err, ErrOutOfMemory) != c.oom {
			t.Errorf("%s %d: errors.Is(ErrOutOfMemory) = %v", c.lib, c.code, !c.oom)
		}
		if errors.Is(err, ErrNotSupported) != c.uns {
			t.Errorf("%s %d: errors.Is(ErrNotSupported) = %v", c.lib, c.code, !c.uns)
		}
	}
	if !errors.Is(newError(LibRuntime, "cudaGetDeviceCount", 100, nil), ErrNoDevice) {
		t.Error("cudaErrorNoDevice does not match ErrNoDevice")
	}
}

func TestKernelArgsDoNotAllocate(t *testing.T) {
	a := new(KernelArgs)
	allocs := testing.AllocsPerRun(100, func() {
		a.Reset().Ptr(1).Int(2).Int64(3)
	})
	if allocs != 0 {
		t.Errorf("filling kernel args allocates %v times", allocs)
	}
	if a.n != 3 || a.vals[1] != 2 {
		t.Errorf("args %v", a.vals[:a.n])
	}
}

func TestSyscallNAllocations(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs glibc")
	}
	libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW)
	if err != nil {
		t.Skipf("libc: %v", err)
	}
	abs, err := purego.Dlsym(libc, "abs")
	if err != nil {
		t.Skipf("abs: %v", err)
	}
	var r uintptr
	allocs := testing.AllocsPerRun(100, func() {
		r, _, _ = purego.SyscallN(abs, uintptr(uint32(0xFFFFFFF9)))
	})
	if int32(r) != 7 {
		t.Errorf("abs(-7) = %d", int32(r))
	}
	// The hot-path calls (launches, copies, graph launches) go through
	// SyscallN, whose go:uintptrescapes argument slice is one small heap
	// object per call; reflect-based bindings cost several. Keep it at one.
	if allocs > 1 {
		t.Errorf("purego.SyscallN allocates %v times per call, want at most 1", allocs)
	}
}

func TestFormat(t *testing.T) {
	if got := FormatCUDAVersion(13000); got != "13.0" {
		t.Errorf("FormatCUDAVersion(13000) = %s", got)
	}
	if got := FormatCUDAVersion(12080); got != "12.8" {
		t.Errorf("FormatCUDAVersion(12080) = %s", got)
	}
	if got := FormatBytes(3 << 29); got != "1.50 GiB" {
		t.Errorf("FormatBytes = %s", got)
	}
}

func TestUsableWithoutGPU(t *testing.T) {
	if os.Getenv("GOINFER_EXPECT_GPU") != "" {
		t.Skip("GPU machine")
	}
	err := Usable()
	if err == nil {
		t.Skip("a GPU and its libraries are here")
	}
	if !strings.Contains(err.Error(), "doctor") || !strings.Contains(err.Error(), "GPU") {
		t.Errorf("Usable error %q does not say what is missing and how to fix it", err)
	}
}

func TestFileVersion(t *testing.T) {
	pip := "/v/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9"
	header := "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 19\n#define CUDNN_PATCHLEVEL 0\n"
	env := fakeEnv(nil, pip, "/w/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9",
		"/w/lib/python3.12/site-packages/nvidia_cudnn_cu12-9.8.0.87.dist-info")
	env.ReadFile = func(p string) ([]byte, error) {
		if p == "/v/lib/python3.12/site-packages/nvidia/cudnn/include/cudnn_version.h" {
			return []byte(header), nil
		}
		return nil, os.ErrNotExist
	}
	for _, c := range []struct {
		path string
		want [3]int
	}{
		{"/usr/lib/x86_64-linux-gnu/libcudnn.so.9.14.0", [3]int{9, 14, 0}},
		{pip, [3]int{9, 19, 0}},
		{"/w/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9", [3]int{9, 8, 0}},
		{"/x/libcudnn.so.9", [3]int{}},
	} {
		if got := fileVersion(c.path, env); got != c.want {
			t.Errorf("fileVersion(%s) = %v, want %v", c.path, got, c.want)
		}
	}
	if !versionLess([3]int{9, 14, 0}, [3]int{9, 19, 0}) || versionLess([3]int{9, 19, 0}, [3]int{9, 8, 9}) {
		t.Error("versionLess orders versions wrongly")
	}
}

func TestLoaderPath(t *testing.T) {
	env := fakeEnv(map[string]string{"LD_LIBRARY_PATH": "/a:/b"}, "/b/libx.so.1", "/usr/lib/x86_64-linux-gnu/liby.so.1", "/c/libz.so.1")
	env.LdCache = func(so string) []string {
		if so == "libz.so.1" {
			return []string{"/c/libz.so.1"}
		}
		return nil
	}
	for so, want := range map[string]string{"libx.so.1": "/b/libx.so.1", "liby.so.1": "/usr/lib/x86_64-linux-gnu/liby.so.1", "libz.so.1": "/c/libz.so.1", "libw.so.1": ""} {
		if got := loaderPath(so, env); got != want {
			t.Errorf("loaderPath(%s) = %q, want %q", so, got, want)
		}
	}
}
