package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"goinfer/internal/server"
	"goinfer/internal/server/servertest"
	"goinfer/internal/shm"
)

func TestBenchSharedMemoryUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--shared_memory", "system"}, "--shared_memory system needs --url"},
		{[]string{"--shared_memory", "posix", "--url", "grpc://127.0.0.1:1"}, `--shared_memory "posix": want none or system`},
		{[]string{"--shared_memory", ""}, `--shared_memory "": want none or system`},
	} {
		r := runBenchArgs(context.Background(), tt.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("bench %v: exit %d, stderr:\n%s\nwant exit 2 and %q", tt.args, r.code, r.stderr, tt.want)
		}
	}
}

// TestBenchRemoteSharedMemory runs bench --url --shared_memory system
// against a real server on loopback: the run succeeds, its summary and CSV
// row say shared memory was used, the client copied no input (they were
// generated in shared memory), and no object is left in /dev/shm.
func TestBenchRemoteSharedMemory(t *testing.T) {
	if !shm.Supported() {
		t.Skip("system shared memory needs Linux")
	}
	s := servertest.Start(t, servertest.Options{Server: func(c *server.Config) { c.AllowSharedMemory = true }})
	for _, tc := range []struct{ url, engine string }{
		{"grpc://" + s.GRPCAddr, "remote-grpc+shm"},
		{"http://" + s.HTTPAddr, "remote-http+shm"},
	} {
		t.Run(tc.engine, func(t *testing.T) {
			dir := t.TempDir()
			r := runBenchArgs(context.Background(), "--url", tc.url, "--shared_memory", "system", "--num_iters", "6",
				"--batch_size", "2", "--concurrency", "2", "--results_dir", dir)
			if r.code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stdout, tc.engine+" engine on "+tc.url) || !strings.Contains(r.stderr, "through system shared memory") {
				t.Errorf("the output does not say shared memory was used:\n%s\n%s", r.stdout, r.stderr)
			}
			// 6 timed requests and the warmup.
			if want := "Inputs copied into shared memory by the client: 0 of 7 requests"; !strings.Contains(r.stdout, want) {
				t.Errorf("stdout does not say %q:\n%s", want, r.stdout)
			}
			rows := readRows(t, filepath.Join(dir, "output.csv"))
			if len(rows) != 1 || rows[0].Engine != tc.engine || rows[0].ImageSize != 16 || rows[0].BatchSize != 2 {
				t.Fatalf("rows %+v; want one with engine %s", rows, tc.engine)
			}
			left, err := filepath.Glob(fmt.Sprintf("/dev/shm/goinfer-%d-*", os.Getpid()))
			if err != nil || len(left) > 0 {
				t.Errorf("shared memory objects left after bench: %v %v", left, err)
			}
		})
	}
}

// TestBenchRemoteSharedMemoryRefused runs bench --shared_memory system
// against a server that does not allow shared memory: generating the
// request tensors in shared memory fails with the server's reason, and
// nothing is left in /dev/shm.
func TestBenchRemoteSharedMemoryRefused(t *testing.T) {
	if !shm.Supported() {
		t.Skip("system shared memory needs Linux")
	}
	s := servertest.Start(t, servertest.Options{})
	r := runBenchArgs(context.Background(), "--url", "grpc://"+s.GRPCAddr, "--shared_memory", "system", "--num_iters", "3",
		"--results_dir", t.TempDir())
	if r.code == 0 || !strings.Contains(r.stderr, "--allow_shared_memory") {
		t.Errorf("exit %d, stderr:\n%s\nwant a failure naming --allow_shared_memory", r.code, r.stderr)
	}
	left, err := filepath.Glob(fmt.Sprintf("/dev/shm/goinfer-%d-*", os.Getpid()))
	if err != nil || len(left) > 0 {
		t.Errorf("shared memory objects left after the failed bench: %v %v", left, err)
	}
}
