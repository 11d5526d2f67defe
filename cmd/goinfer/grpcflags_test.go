package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"goinfer/internal/server"
	"goinfer/internal/server/servertest"
)

func TestGRPCFlagsRejectBadValues(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--grpc_window_bytes", "1000"}, "--grpc_window_bytes 1000: want 0 or 65536 to 2147483647"},
		{[]string{"--grpc_window_bytes", "4294967296"}, "--grpc_window_bytes 4294967296"},
		{[]string{"--grpc_window_bytes", "-1"}, "--grpc_window_bytes -1"},
		{[]string{"--grpc_read_buffer_bytes", "-1"}, "--grpc_read_buffer_bytes -1: must not be negative"},
		{[]string{"--grpc_write_buffer_bytes", "-5"}, "--grpc_write_buffer_bytes -5: must not be negative"},
		{[]string{"--grpc_transport", "quic"}, `--grpc_transport "quic": want grpcgo or h2grpc`},
		{[]string{"--http_client", "curl"}, `--http_client "curl": want lean or nethttp`},
	} {
		r := runBenchArgs(context.Background(), tt.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("bench %v: exit %d, stderr:\n%s\nwant exit 2 and %q", tt.args, r.code, r.stderr, tt.want)
		}
		if strings.HasPrefix(tt.args[0], "--http") {
			continue // bench only
		}
		var stderr bytes.Buffer
		err := runServe(context.Background(), tt.args, &bytes.Buffer{}, &stderr)
		if !errors.Is(err, errUsage) || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("serve %v: %v, stderr:\n%s\nwant a usage error naming %q", tt.args, err, stderr.String(), tt.want)
		}
	}
}

func TestGRPCFlagsMapToOptions(t *testing.T) {
	for _, tt := range []struct {
		g               grpcFlags
		window          int32
		readBuf, wrtBuf int
	}{
		{grpcFlags{window: defaultGRPCWindow, readBuffer: defaultGRPCBuffer, writeBuffer: defaultGRPCBuffer}, 16 << 20, 1 << 20, 1 << 20},
		{grpcFlags{window: 0, readBuffer: 0, writeBuffer: 0}, -1, -1, -1},
		{grpcFlags{window: minGRPCWindow, readBuffer: 4096, writeBuffer: 8192}, 64 << 10, 4096, 8192},
	} {
		if w, r, wr := tt.g.windowOption(), tt.g.readBufferOption(), tt.g.writeBufferOption(); w != tt.window || r != tt.readBuf || wr != tt.wrtBuf {
			t.Errorf("%+v: options window %d, read %d, write %d; want %d, %d, %d", tt.g, w, r, wr, tt.window, tt.readBuf, tt.wrtBuf)
		}
	}
}

// TestBenchRemoteGRPCTransportFlags runs bench --url grpc:// with each
// setting of the transport flags against servers with the matching ones:
// gRPC-Go's own windows and no buffers at both ends, and windows smaller
// than one request, so that flow control must hand out credit mid-message.
func TestBenchRemoteGRPCTransportFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*server.Config)
		args []string
	}{
		{"grpc-defaults-no-buffers", func(c *server.Config) { c.GRPCWindow, c.GRPCReadBuffer, c.GRPCWriteBuffer = -1, -1, -1 },
			[]string{"--grpc_window_bytes", "0", "--grpc_read_buffer_bytes", "0", "--grpc_write_buffer_bytes", "0"}},
		{"small-window", func(c *server.Config) { c.GRPCWindow = 64 << 10 },
			[]string{"--grpc_window_bytes", "65536", "--grpc_write_buffer_bytes", "32768"}},
		{"h2grpc-both", func(c *server.Config) { c.GRPCTransport = server.GRPCTransportH2 },
			[]string{"--grpc_transport", "h2grpc"}},
		{"h2grpc-server-grpcgo-client", func(c *server.Config) { c.GRPCTransport = server.GRPCTransportH2 }, nil},
		{"grpcgo-server-h2grpc-client", nil, []string{"--grpc_transport", "h2grpc"}},
		{"h2grpc-small-window", func(c *server.Config) { c.GRPCTransport, c.GRPCWindow = server.GRPCTransportH2, 64<<10 },
			[]string{"--grpc_transport", "h2grpc", "--grpc_window_bytes", "65536"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := servertest.Start(t, servertest.Options{Size: 224, Server: tc.cfg})
			args := append([]string{"--url", "grpc://" + s.GRPCAddr, "--num_iters", "4", "--batch_size", "2",
				"--concurrency", "2", "--results_dir", t.TempDir()}, tc.args...)
			r := runBenchArgs(context.Background(), args...)
			if r.code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			if strings.Contains(r.stdout, "other errors") {
				t.Errorf("requests failed:\n%s", r.stdout)
			}
		})
	}
}

// TestBenchRemoteHTTPClients runs bench --url http:// with each HTTP
// client.
func TestBenchRemoteHTTPClients(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	for _, hc := range []string{"lean", "nethttp"} {
		t.Run(hc, func(t *testing.T) {
			r := runBenchArgs(context.Background(), "--url", "http://"+s.HTTPAddr, "--http_client", hc, "--num_iters", "6",
				"--batch_size", "2", "--concurrency", "2", "--results_dir", t.TempDir())
			if r.code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			if strings.Contains(r.stdout, "other errors") {
				t.Errorf("requests failed:\n%s", r.stdout)
			}
		})
	}
}
