package server_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"goinfer/internal/server/servertest"
)

// TestREADMEExamples runs the shell examples (```sh blocks) of this
// package's README.md and of the project's top-level README.md, as written,
// against a test server that serves "resnet18" on 250x250 images with 1000
// classes (a narrow network with the same interface), with only the
// addresses changed.
func TestREADMEExamples(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		testREADME(t, "README.md", 6, []string{
			`"extensions":["binary_tensor_data","classification","model_repository","system_shared_memory"]`,
			`"parameters":{"shared_memory_region":"example","shared_memory_byte_size":4000}`,
			`"shape":[-1,3,250,250]`,
			`"datatype":"BYTES","shape":[1,3]`,
			"Inference-Header-Content-Length:",
			"goinfer_requests_total",
		})
	})
	t.Run("project", func(t *testing.T) {
		testREADME(t, filepath.Join("..", "..", "README.md"), 3, []string{
			`"shape":[-1,3,250,250]`,
			"Inference-Header-Content-Length:",
		})
	})
}

func testREADME(t *testing.T, path string, minBlocks int, wants []string) {
	for _, tool := range []string{"bash", "curl", "awk", "base64"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not on PATH: the README examples need it", tool)
		}
	}
	_, err := exec.LookPath("grpcurl")
	haveGrpcurl := err == nil
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, part := range strings.Split(string(readme), "```sh\n")[1:] {
		code, _, ok := strings.Cut(part, "```")
		if !ok {
			t.Fatalf("%s has an unterminated sh block", path)
		}
		blocks = append(blocks, code)
	}
	if len(blocks) < minBlocks {
		t.Fatalf("found %d sh blocks in %s, want at least %d", len(blocks), path, minBlocks)
	}
	s := servertest.Start(t, servertest.Options{Name: "resnet18", Size: 250, Classes: 1000, Server: allowShm})
	dir := t.TempDir()
	var all strings.Builder
	for i, b := range blocks {
		if strings.Contains(b, "grpcurl") && !haveGrpcurl {
			t.Logf("block %d skipped: grpcurl is not on PATH", i)
			continue
		}
		script := strings.NewReplacer("localhost:8000", s.HTTPAddr, "localhost:8001", s.GRPCAddr).Replace(b)
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("README block %d failed: %v\n%s\n--- output:\n%s", i, err, b, out)
		}
		all.Write(out)
	}
	out := all.String()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("README output lacks %q:\n%.2000s", want, out)
		}
	}
	if haveGrpcurl && !strings.Contains(out, "inference.GRPCInferenceService") {
		t.Errorf("grpcurl list did not show the service:\n%.2000s", out)
	}
	resp, err := os.ReadFile(filepath.Join(dir, "response.bin"))
	if err != nil || len(resp) < 4000 || !strings.Contains(string(resp), `"binary_data_size":4000`) {
		t.Errorf("binary response: %d bytes, %v", len(resp), err)
	}
}
