package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"goinfer/internal/server/servertest"
)

func TestBenchImagesUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--images", "x", "--url", "http://127.0.0.1:1", "--top_k", "0"}, "--top_k 0"},
		{[]string{"--images", "x", "--url", "http://127.0.0.1:1", "--shared_memory", "system"}, "exclusive"},
	} {
		r := runBenchArgs(context.Background(), tt.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("bench %v: exit %d, stderr:\n%s\nwant exit 2 and %q", tt.args, r.code, r.stderr, tt.want)
		}
	}
}

// TestBenchRemoteImages runs bench --url --images against a real server
// on loopback over both protocols: photographs in, top-k out, one CSV row.
func TestBenchRemoteImages(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Images: true})
	for _, tc := range []struct{ url, engine, httpClient string }{
		{"http://" + s.HTTPAddr, "remote-http+images", "lean"},
		{"http://" + s.HTTPAddr, "remote-http+images", "nethttp"},
		{"grpc://" + s.GRPCAddr, "remote-grpc+images", "lean"},
	} {
		t.Run(tc.engine+"/"+tc.httpClient, func(t *testing.T) {
			dir := t.TempDir()
			r := runBenchArgs(context.Background(), "--url", tc.url, "--http_client", tc.httpClient, "--images", "../../testdata/photos", "--num_iters", "5",
				"--batch_size", "3", "--concurrency", "2", "--top_k", "2", "--results_dir", dir)
			if r.code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stdout, tc.engine+" engine on "+tc.url) || !strings.Contains(r.stderr, `image input "image": 7 files`) {
				t.Errorf("the output does not describe an image run:\n%s\n%s", r.stdout, r.stderr)
			}
			rows := readRows(t, filepath.Join(dir, "output.csv"))
			if len(rows) != 1 || rows[0].Engine != tc.engine || rows[0].InputDType != "encoded" || rows[0].BatchSize != 3 || rows[0].Throughput <= 0 {
				t.Errorf("rows %+v", rows)
			}
		})
	}
	t.Run("no images in the directory", func(t *testing.T) {
		r := runBenchArgs(context.Background(), "--url", "http://"+s.HTTPAddr, "--images", t.TempDir())
		if r.code != 1 || !strings.Contains(r.stderr, "no .jpg, .jpeg or .png files") {
			t.Errorf("exit %d: %s", r.code, r.stderr)
		}
	})
	t.Run("server without the image input", func(t *testing.T) {
		plain := servertest.Start(t, servertest.Options{})
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "a.jpg"), []byte{0xff, 0xd8}, 0o644)
		r := runBenchArgs(context.Background(), "--url", "http://"+plain.HTTPAddr, "--images", dir)
		if r.code != 1 || !strings.Contains(r.stderr, "has no image input") {
			t.Errorf("exit %d: %s", r.code, r.stderr)
		}
	})
}

// TestBenchLocalImages runs bench --images in process on the cpu engine:
// photographs decoded in the pipeline's copy stage, a CSV row of the run;
// a file that is not an image fails the run.
func TestBenchLocalImages(t *testing.T) {
	ckpt := writeTinyCheckpoint(t)
	dir := t.TempDir()
	r := runBenchArgs(context.Background(), "--checkpoint", ckpt, "--engine", "cpu", "--image_size", "32", "--batch_size", "3",
		"--num_iters", "4", "--images", "../../testdata/photos", "--results_dir", dir, "--threads", "1")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "7 image files from ../../testdata/photos in 3 distinct batches of 3, decoded to 32x32 in the pipeline") {
		t.Errorf("stderr does not describe the images:\n%s", r.stderr)
	}
	rows := readRows(t, filepath.Join(dir, "output.csv"))
	if len(rows) != 1 || rows[0].Engine != "cpu" || rows[0].InputDType != "encoded" || rows[0].BatchSize != 3 || rows[0].Throughput <= 0 {
		t.Errorf("rows %+v", rows)
	}
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "a.jpg"), []byte("not a JPEG"), 0o644)
	r = runBenchArgs(context.Background(), "--checkpoint", ckpt, "--engine", "cpu", "--image_size", "32", "--batch_size", "1",
		"--num_iters", "2", "--images", bad, "--results_dir", dir, "--threads", "1")
	if r.code == 0 || !strings.Contains(r.stderr, "warmup request: unsupported image format") {
		t.Errorf("a bad image: exit %d\n%s", r.code, r.stderr)
	}
}
