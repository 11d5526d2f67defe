package cuda

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Attempt records one try at loading a library, for reports.
type Attempt struct {
	Candidate
	// Err is empty when the library loaded from here, "not found" when
	// there was no file, else the loader's message.
	Err string
	// Version is the probed version, when the candidate was probed.
	Version string
}

// LibInfo says where a library came from, or where it was looked for.
type LibInfo struct {
	Name     string // LibRuntime, LibDNN, ...
	Path     string // the file loaded, resolved; empty if missing
	Version  string // filled by the binding once loaded
	Attempts []Attempt
	Err      error  // why it is not usable
	Fix      string // how to install it, when missing
	// Parts are the other files loaded with it (cuDNN's sub-libraries,
	// cuBLASLt), resolved.
	Parts []string
}

// library is an open shared library.
type library struct {
	handle uintptr
	info   LibInfo
}

// errNotFound is the attempt message for a missing file.
const errNotFound = "not found"

// open loads the first candidate of spec that loads.
func open(spec LibSpec, env Env) *library {
	l := &library{info: LibInfo{Name: spec.Name, Fix: spec.Fix}}
	for _, c := range Candidates(spec, env) {
		if !c.Bare() && !env.Exists(c.Path) {
			l.info.Attempts = append(l.info.Attempts, Attempt{Candidate: c, Err: errNotFound})
			continue
		}
		h, err := purego.Dlopen(c.Path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			l.info.Attempts = append(l.info.Attempts, Attempt{Candidate: c, Err: dlMessage(err)})
			continue
		}
		l.handle = h
		l.info.Path = resolvedPath(h, c.Path)
		l.info.Attempts = append(l.info.Attempts, Attempt{Candidate: c})
		return l
	}
	l.info.Err = fmt.Errorf("%s not found (tried %s)", strings.Join(spec.Sonames, " or "), summarizeAttempts(l.info.Attempts))
	return l
}

// openNewest finds every candidate of spec that exists, reads each one's
// version from the files around it (a versioned file name, the headers or
// pip's metadata next to it; see fileVersion), keeps the newest, preloads
// its parts from the same directory and loads it. Versions are not probed by
// loading: two copies with one soname cannot both be loaded cleanly, and the
// first would shadow the second.
func openNewest(spec LibSpec, env Env, parts []string) *library {
	l := &library{info: LibInfo{Name: spec.Name, Fix: spec.Fix}}
	var best string
	var bestV [3]int
	var bestSrc string
	seen := map[string]bool{}
	for _, c := range Candidates(spec, env) {
		path := c.Path
		if c.Bare() {
			path = loaderPath(c.Path, env)
			if path == "" {
				l.info.Attempts = append(l.info.Attempts, Attempt{Candidate: c, Err: "not found by the dynamic loader"})
				continue
			}
		}
		if !env.Exists(path) {
			l.info.Attempts = append(l.info.Attempts, Attempt{Candidate: c, Err: errNotFound})
			continue
		}
		real := path
		if r, err := filepath.EvalSymlinks(path); err == nil {
			real = r
		}
		if seen[real] {
			continue
		}
		seen[real] = true
		v := fileVersion(real, env)
		l.info.Attempts = append(l.info.Attempts, Attempt{Candidate: Candidate{Path: real, Source: c.Source}, Err: "candidate", Version: versionString(v)})
		if best == "" || versionLess(bestV, v) {
			best, bestV, bestSrc = real, v, c.Source
		}
	}
	if best == "" {
		l.info.Err = fmt.Errorf("%s not found (tried %s)", strings.Join(spec.Sonames, " or "), summarizeAttempts(l.info.Attempts))
		return l
	}
	dir := filepath.Dir(best)
	for _, p := range parts {
		full := filepath.Join(dir, p)
		if !env.Exists(full) {
			continue
		}
		if h, err := purego.Dlopen(full, purego.RTLD_NOW|purego.RTLD_GLOBAL); err == nil {
			l.info.Parts = append(l.info.Parts, resolvedPath(h, full))
		}
	}
	h, err := purego.Dlopen(best, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		l.info.Err = fmt.Errorf("loading %s: %s", best, dlMessage(err))
		return l
	}
	l.handle = h
	l.info.Path = resolvedPath(h, best)
	l.info.Attempts = append(l.info.Attempts, Attempt{Candidate: Candidate{Path: best, Source: bestSrc + " (newest version found)"}})
	return l
}

// loaderPath finds the file the dynamic loader would open for a soname,
// without opening it: LD_LIBRARY_PATH, then the ld.so cache (ldconfig -p),
// then the default directories.
func loaderPath(soname string, env Env) string {
	for _, d := range filepath.SplitList(env.Getenv("LD_LIBRARY_PATH")) {
		if d != "" && env.Exists(filepath.Join(d, soname)) {
			return filepath.Join(d, soname)
		}
	}
	if env.LdCache != nil {
		for _, p := range env.LdCache(soname) {
			if env.Exists(p) {
				return p
			}
		}
	}
	for _, d := range []string{"/lib/" + env.Arch + "-linux-gnu", "/usr/lib/" + env.Arch + "-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"} {
		if env.Exists(filepath.Join(d, soname)) {
			return filepath.Join(d, soname)
		}
	}
	return ""
}

// fileVersion reads a library's major.minor.patch without loading it: from
// a versioned file name (libcudnn.so.9.14.0), from cudnn_version.h in the
// include folder next to lib (toolkits and pip wheels ship it), or from a
// pip dist-info folder name (nvidia_cudnn_cu13-9.19.0.56.dist-info). It
// returns zeros when nothing says.
func fileVersion(path string, env Env) [3]int {
	base := filepath.Base(path)
	if i := strings.Index(base, ".so."); i >= 0 {
		if v, ok := parseVersion(base[i+4:]); ok && v[1]+v[2] > 0 {
			return v
		}
	}
	if env.ReadFile != nil {
		for _, h := range []string{"../include/cudnn_version.h", "../../include/cudnn_version.h", "../include/cudnn_version_v9.h"} {
			b, err := env.ReadFile(filepath.Join(filepath.Dir(path), h))
			if err != nil {
				continue
			}
			var v [3]int
			found := 0
			for _, line := range strings.Split(string(b), "\n") {
				f := strings.Fields(line)
				if len(f) != 3 || f[0] != "#define" {
					continue
				}
				n, err := strconv.Atoi(f[2])
				if err != nil {
					continue
				}
				switch f[1] {
				case "CUDNN_MAJOR":
					v[0], found = n, found+1
				case "CUDNN_MINOR":
					v[1], found = n, found+1
				case "CUDNN_PATCHLEVEL":
					v[2], found = n, found+1
				}
			}
			if found == 3 {
				return v
			}
		}
	}
	// site-packages/nvidia/cudnn/lib -> site-packages/nvidia_cudnn_cu*-X.Y.Z*.dist-info
	site := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(path))))
	if m, err := env.Glob(filepath.Join(site, "nvidia_cudnn_cu*-*.dist-info")); err == nil {
		for _, d := range m {
			name := filepath.Base(d)
			ver := strings.TrimSuffix(name[strings.IndexByte(name, '-')+1:], ".dist-info")
			if v, ok := parseVersion(ver); ok {
				return v
			}
		}
	}
	return [3]int{}
}

func parseVersion(s string) ([3]int, bool) {
	var v [3]int
	parts := strings.Split(s, ".")
	if len(parts) < 2 {
		return v, false
	}
	for i := 0; i < 3 && i < len(parts); i++ {
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

func versionLess(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

func versionString(v [3]int) string {
	if v == [3]int{} {
		return "unknown"
	}
	return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2])
}

func summarizeAttempts(as []Attempt) string {
	var parts []string
	for _, a := range as {
		if a.Err == errNotFound {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s: %s", a.Path, a.Err))
	}
	missing := 0
	for _, a := range as {
		if a.Err == errNotFound {
			missing++
		}
	}
	if missing > 0 {
		parts = append(parts, fmt.Sprintf("%d other places had no such file", missing))
	}
	return strings.Join(parts, "; ")
}

func dlMessage(err error) string {
	var de purego.Dlerror
	if errors.As(err, &de) {
		return de.Error()
	}
	return err.Error()
}

// bind resolves the named C functions of a library into Go function
// pointers (the fields a binding struct holds). A missing symbol is an error
// naming it: a library too old for goinfer.
func (l *library) bind(syms map[string]any) error {
	names := make([]string, 0, len(syms))
	for n := range syms {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		sym, err := purego.Dlsym(l.handle, name)
		if err != nil {
			return fmt.Errorf("%s: symbol %s missing (%s): the library is too old or not the one goinfer expects", l.info.Path, name, dlMessage(err))
		}
		if p, ok := syms[name].(*uintptr); ok {
			*p = sym
			continue
		}
		purego.RegisterFunc(syms[name], sym)
	}
	return nil
}

// sym returns a symbol's address, or 0 when the library lacks it.
func (l *library) sym(name string) uintptr {
	s, err := purego.Dlsym(l.handle, name)
	if err != nil {
		return 0
	}
	return s
}

// linkMap is the head of glibc's struct link_map.
type linkMap struct {
	addr uintptr
	name *byte
}

var (
	dlinfoOnce sync.Once
	dlinfoFn   func(handle uintptr, request int32, info **linkMap) int32
)

// resolvedPath returns the file a handle was loaded from (glibc's dlinfo),
// falling back to what was asked for.
func resolvedPath(h uintptr, asked string) string {
	dlinfoOnce.Do(func() {
		libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			return
		}
		if sym, err := purego.Dlsym(libc, "dlinfo"); err == nil {
			purego.RegisterFunc(&dlinfoFn, sym)
		}
	})
	if dlinfoFn == nil {
		return asked
	}
	var lm *linkMap
	const rtldDILinkmap = 2
	if dlinfoFn(h, rtldDILinkmap, &lm) != 0 || lm == nil || lm.name == nil {
		return asked
	}
	name := goString(lm.name, 4096)
	if name == "" {
		return asked
	}
	if p, err := filepath.EvalSymlinks(name); err == nil {
		return p
	}
	return name
}

// goString copies a NUL-terminated C string of at most max bytes.
func goString(p *byte, max int) string {
	if p == nil {
		return ""
	}
	var b []byte
	for i := 0; i < max; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// cBuf turns a NUL-terminated byte buffer filled by C into a string.
func cBuf(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
