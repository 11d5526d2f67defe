package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestVerifyHubHash(t *testing.T) {
	dir := t.TempDir()
	content := []byte("pretend weights")
	h := sha(content)
	wrong := "0123456789abcdef"
	tests := []struct {
		name    string
		wantErr bool
	}{
		{"resnet18-" + h[:8] + ".pth", false},
		{"resnet18-" + h[:12] + ".safetensors", false},
		{"resnet18-" + h + ".pt", false},
		{"plain.pth", false},
		{"resnet18-abc.pth", false},      // fewer than 8 hex digits: not a hash
		{"resnet18-zzzzzzzz.pth", false}, // not hex
		{"resnet18-" + wrong[:8] + ".pth", true},
		{"resnet18-" + wrong + ".pth", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, tt.name)
			if err := os.WriteFile(p, content, 0o644); err != nil {
				t.Fatal(err)
			}
			err := VerifyHubHash(p)
			if !tt.wantErr {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrHashMismatch) {
				t.Fatalf("got %v, want ErrHashMismatch", err)
			}
			exp := strings.TrimSuffix(strings.TrimPrefix(tt.name, "resnet18-"), ".pth")
			if msg := err.Error(); !strings.Contains(msg, exp) || !strings.Contains(msg, h[:len(exp)]) {
				t.Errorf("error %q should name the expected %s and the actual %s", msg, exp, h[:len(exp)])
			}
		})
	}
	if err := VerifyHubHash(filepath.Join(dir, "gone-0123456789.pth")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestLoadChecksHubHash(t *testing.T) {
	dir := t.TempDir()
	raw, err := os.ReadFile(golden + "resnet18_w8.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "w8-"+sha(raw)[:8]+".safetensors")
	bad := filepath.Join(dir, "w8-00000000.safetensors")
	for _, p := range []string{good, bad} {
		if err := os.WriteFile(p, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustLoad(t, good)
	if _, err := Load(bad); !errors.Is(err, ErrHashMismatch) {
		t.Errorf("Load of a file whose name's hash is wrong: %v", err)
	}
}

// entries lists dir, to check that failed downloads leave nothing.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func TestDownload(t *testing.T) {
	body := bytes.Repeat([]byte("goinfer weights "), 50000) // 800 kB
	h := sha(body)
	mux := http.NewServeMux()
	mux.HandleFunc("/models/", func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.Contains(r.URL.Path, "missing"):
			http.NotFound(w, r)
		case strings.Contains(r.URL.Path, "stall"):
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
			w.Write(body[:len(body)/2])
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
			w.Write(body)
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	t.Run("good", func(t *testing.T) {
		dir := t.TempDir()
		var progress bytes.Buffer
		got, err := Download(context.Background(), srv.URL+"/models/net-"+h[:8]+".pth", dir, &progress)
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(dir, "net-"+h[:8]+".pth"); got != want {
			t.Errorf("path %s, want %s", got, want)
		}
		b, err := os.ReadFile(got)
		if err != nil || !bytes.Equal(b, body) {
			t.Fatalf("downloaded file differs (%v)", err)
		}
		if lines := strings.Count(progress.String(), "\n"); lines < 3 || !strings.Contains(progress.String(), "100%") {
			t.Errorf("progress output:\n%s", progress.String())
		}
		if es := entries(t, dir); len(es) != 1 {
			t.Errorf("dir holds %v, want just the file", es)
		}
	})
	fails := []struct {
		name, path string
		cancel     bool
		want       string
	}{
		{"hash mismatch", "/models/net-deadbeef.pth", false, "sha256"},
		{"http error", "/models/missing-" + h[:8] + ".pth", false, "404"},
		{"cancelled", "/models/stall-" + h[:8] + ".pth", true, "context canceled"},
	}
	for _, tt := range fails {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var progress = &cancelOnWrite{}
			if tt.cancel {
				progress.cancel = cancel
			}
			_, err := Download(ctx, srv.URL+tt.path, dir, progress)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			if tt.name == "hash mismatch" && !errors.Is(err, ErrHashMismatch) {
				t.Errorf("error %v is not ErrHashMismatch", err)
			}
			if es := entries(t, dir); len(es) != 0 {
				t.Errorf("a failed download left %v", es)
			}
		})
	}
}

// cancelOnWrite cancels a download once its first progress line arrives,
// i.e. in the middle of the body.
type cancelOnWrite struct{ cancel func() }

func (c *cancelOnWrite) Write(b []byte) (int, error) {
	if c.cancel != nil {
		c.cancel()
	}
	return len(b), nil
}
