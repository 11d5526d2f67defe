package cuda

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEmbeddedKernelsMatchSource checks that the embedded fatbin and PTX
// were built from tools/kernels/goinfer.cu as it is (kernels/sources.sha256
// records what tools/kernels/build.sh built them from): a kernel edited
// without rebuilding would otherwise ship the old code.
func TestEmbeddedKernelsMatchSource(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "..", "tools", "kernels", "goinfer.cu"))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(src)
	want := hex.EncodeToString(h[:])
	f, err := os.Open(filepath.Join("kernels", "sources.sha256"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if sum, name, ok := strings.Cut(sc.Text(), " "); ok {
			got[name] = sum
		}
	}
	for _, art := range []struct {
		name string
		data []byte
	}{{"goinfer.fatbin", kernelFatbin}, {"goinfer.ptx", kernelPTX}} {
		if len(art.data) == 0 {
			t.Errorf("%s is not embedded", art.name)
		}
		if got[art.name] != want {
			t.Errorf("kernels/%s was built from goinfer.cu %.12s, the source is now %.12s: run tools/kernels/build.sh (nvcc for the fatbin, clang for the PTX)",
				art.name, got[art.name], want)
		}
	}
}

// TestGraphKernelsMatchSource checks that the embedded graph PTX was built
// from tools/kernels/graph.cu as it is; the fatbin is loaded only when
// its recorded source matches the PTX's (graphImage).
func TestGraphKernelsMatchSource(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "..", "tools", "kernels", "graph.cu"))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(src)
	want := hex.EncodeToString(h[:])
	got := map[string]string{}
	for _, line := range strings.Split(graphSums, "\n") {
		if sum, name, ok := strings.Cut(line, " "); ok {
			got[name] = sum
		}
	}
	if got["graph.ptx"] != want || len(graphPTX) == 0 {
		t.Errorf("kernels/graph.ptx was built from graph.cu %.12s, the source is now %.12s: run tools/kernels/build.sh", got["graph.ptx"], want)
	}
	if got["graph.fatbin"] != want {
		t.Logf("kernels/graph.fatbin is from graph.cu %.12s, not the current source: the engine loads the PTX until nvcc rebuilds it", got["graph.fatbin"])
	}
}

// TestGraphFatbinDecompresses checks that the gzipped graph fatbin the
// engine embeds opens to a fatbin (its magic number), so that a damaged
// file shows here rather than as a silent fallback to the PTX on a GPU.
func TestGraphFatbinDecompresses(t *testing.T) {
	if len(graphFatbinGz) == 0 {
		t.Skip("built with -tags nographfatbin: no embedded graph fatbin to check")
	}
	fat, err := graphFatbin()
	if err != nil {
		t.Fatal(err)
	}
	if len(fat) < 4 || binary.LittleEndian.Uint32(fat) != 0xBA55ED50 {
		t.Fatalf("kernels/graph.fatbin.gz holds %d bytes that do not start with a fatbin's magic number", len(fat))
	}
}
