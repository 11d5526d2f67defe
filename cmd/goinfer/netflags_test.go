package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"goinfer/internal/server"
	"goinfer/internal/server/servertest"
)

func TestNetFlagsRejectBadValues(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--busy_poll", "-1ms"}, "--busy_poll -1ms: must not be negative"},
		{[]string{"--socket_buffer_bytes", "-1"}, "--socket_buffer_bytes -1: must not be negative"},
	} {
		r := runBenchArgs(context.Background(), tt.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("bench %v: exit %d, stderr:\n%s\nwant exit 2 and %q", tt.args, r.code, r.stderr, tt.want)
		}
		var stderr bytes.Buffer
		err := runServe(context.Background(), tt.args, &bytes.Buffer{}, &stderr)
		if !errors.Is(err, errUsage) || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("serve %v: %v, stderr:\n%s\nwant a usage error naming %q", tt.args, err, stderr.String(), tt.want)
		}
	}
}

// TestBenchRemoteNetFlags runs bench --url with busy polling and socket
// buffers at both ends, and an execution trace of the client.
func TestBenchRemoteNetFlags(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Server: func(c *server.Config) {
		c.BusyPoll, c.SocketBuffer = 200*time.Microsecond, 1<<20
	}})
	for _, url := range []string{"http://" + s.HTTPAddr, "grpc://" + s.GRPCAddr} {
		dir := t.TempDir()
		tr := filepath.Join(dir, "client.trace")
		r := runBenchArgs(context.Background(), "--url", url, "--num_iters", "6", "--batch_size", "1", "--concurrency", "1",
			"--busy_poll", "1ms", "--socket_buffer_bytes", "1048576", "--exec_trace", tr, "--results_dir", dir)
		if r.code != 0 {
			t.Fatalf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", url, r.code, r.stdout, r.stderr)
		}
		if strings.Contains(r.stdout, "other errors") {
			t.Errorf("%s: requests failed:\n%s", url, r.stdout)
		}
		if http := strings.HasPrefix(url, "http"); strings.Contains(r.stdout, "Client time per request: sending") != http {
			t.Errorf("%s: client times printed: %v, want %v:\n%s", url, !http, http, r.stdout)
		}
		if fi, err := os.Stat(tr); err != nil || fi.Size() == 0 {
			t.Errorf("%s: no execution trace: %v", url, err)
		}
	}
}
