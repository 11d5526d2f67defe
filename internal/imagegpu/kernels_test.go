package imagegpu

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEmbeddedKernelsMatchSource checks that the embedded PTX was built
// from tools/kernels/images.cu as it is (tools/kernels/build.sh records
// the source's hash in kernels/sources.sha256). A fatbin from an older
// source is only reported: loadModule takes the PTX until nvcc rebuilds
// it.
func TestEmbeddedKernelsMatchSource(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "tools", "kernels", "images.cu"))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(src)
	want := hex.EncodeToString(h[:])
	rec, err := os.ReadFile(filepath.Join("kernels", "sources.sha256"))
	if err != nil {
		t.Fatal(err)
	}
	built := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(rec)), "\n") {
		sum, name, _ := strings.Cut(line, " ")
		built[name] = sum
	}
	entries, err := kernelFiles.ReadDir("kernels")
	if err != nil {
		t.Fatal(err)
	}
	sawPTX := false
	for _, e := range entries {
		name := e.Name()
		if name == "sources.sha256" {
			continue
		}
		sawPTX = sawPTX || name == "images.ptx"
		if built[name] != want && name == "images.fatbin" {
			t.Logf("kernels/images.fatbin is from images.cu %.12s, not the current source: the PTX is loaded until nvcc rebuilds it", built[name])
			continue
		}
		if built[name] != want {
			t.Errorf("kernels/%s was built from images.cu %.12s, the source is now %.12s: run tools/kernels/build.sh (clang for the PTX, nvcc for the fatbin)", name, built[name], want)
		}
	}
	if !sawPTX {
		t.Error("images.ptx is not embedded")
	}
}
