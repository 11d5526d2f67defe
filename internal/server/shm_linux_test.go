package server_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"goinfer/internal/kservepb"
	"goinfer/internal/server/servertest"
	"goinfer/internal/shm"
)

// TestSharedMemoryRefusesNonObjects registers, over HTTP and gRPC, keys
// under which a client planted what is not a shared memory object: the
// server refuses each as a bad request, registers nothing, and the file a
// link led to keeps its bytes (the server neither read it into a model nor
// wrote logits into it).
func TestSharedMemoryRefusesNonObjects(t *testing.T) {
	if !shm.Supported() {
		t.Skip("system shared memory needs Linux")
	}
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skipf("no /dev/shm on this machine: %v", err)
	}
	s := servertest.Start(t, servertest.Options{Server: allowShm})
	c := kservepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.GRPCAddr))
	secret := make([]byte, shmSize)
	for i := range secret {
		secret[i] = byte(i*31 + 7)
	}
	for _, tc := range []struct {
		name, reason string
		// plant makes path and returns the file whose bytes must not
		// change, or "".
		plant func(t *testing.T, path string) string
	}{
		{"symlink", "symbolic link", func(t *testing.T, path string) string {
			target := t.TempDir() + "/target"
			if err := os.WriteFile(target, secret, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
			return target
		}},
		{"directory", "directory", func(t *testing.T, path string) string {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
			return ""
		}},
		{"FIFO", "FIFO", func(t *testing.T, path string) string {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Skipf("cannot make a FIFO in /dev/shm: %v", err)
			}
			return ""
		}},
		{"hard link", "hard link", func(t *testing.T, path string) string {
			other := path + "-other"
			if err := os.WriteFile(other, secret, 0o600); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(other) })
			if err := os.Link(other, path); err != nil {
				t.Skipf("cannot hard-link in /dev/shm: %v", err)
			}
			return other
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := fmt.Sprintf("/goinfer-srvtest-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
			path := "/dev/shm" + key
			os.RemoveAll(path)
			t.Cleanup(func() { os.RemoveAll(path) })
			target := tc.plant(t, path)

			res := postJSON(t, "http://"+s.HTTPAddr+"/v2/systemsharedmemory/region/evil/register", map[string]any{"key": key, "byte_size": shmInSize})
			if res.status != http.StatusBadRequest || !strings.Contains(string(res.body), "not a shared memory object") || !strings.Contains(string(res.body), tc.reason) {
				t.Errorf("HTTP register: %d %s; want 400 saying it is not a shared memory object (%s)", res.status, res.body, tc.reason)
			}
			_, err := c.SystemSharedMemoryRegister(ctxT(t), &kservepb.SystemSharedMemoryRegisterRequest{Name: "evil", Key: key, ByteSize: shmInSize})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "not a shared memory object") || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("gRPC register: %v; want INVALID_ARGUMENT saying it is not a shared memory object (%s)", err, tc.reason)
			}
			if st, err := c.SystemSharedMemoryStatus(ctxT(t), &kservepb.SystemSharedMemoryStatusRequest{}); err != nil || len(st.Regions) != 0 {
				t.Errorf("regions after refused registrations: %v (%v); want none", st.GetRegions(), err)
			}
			// Were the region registered, this request would read the
			// target into the model and write logits back into it.
			infer := postJSON(t, "http://"+s.HTTPAddr+"/v2/models/tiny/infer", map[string]any{
				"inputs":  []any{map[string]any{"name": "input", "datatype": "FP32", "shape": []int{shmImages, 3, 16, 16}, "parameters": shmParams("evil", 0, shmInSize)}},
				"outputs": []any{map[string]any{"name": "logits", "parameters": shmParams("evil", 0, shmImages*40)}}})
			if infer.status != http.StatusBadRequest {
				t.Errorf("infer through the refused region: %d %s; want 400", infer.status, infer.body)
			}
			if target != "" {
				if b, err := os.ReadFile(target); err != nil || !bytes.Equal(b, secret) {
					t.Errorf("the file the key led to changed (%v)", err)
				}
			}
		})
	}
}
