// Command protocheck sends the same random FP32 images, one request at a
// time, to goinfer servers through every client path named and checks that
// all of them get the same logits: a change to a transport, or to the
// device path a request takes on an idle server, must not change answers.
//
//	go run ./tools/protocheck [-image_size 224] [-n 8] [-tol 1e-3] URL...
//
// Each http:// URL is tried with the lean and the net/http client, each
// grpc:// URL with the h2grpc and the gRPC-Go transports. The first path's
// logits are the reference; it exits 1 if any path differs by more than
// tol, relative to the largest reference logit.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"

	"goinfer/internal/client"
	"goinfer/internal/tensor"
)

func main() {
	size := flag.Int("image_size", 224, "image height and width")
	n := flag.Int("n", 8, "images, each in its own request")
	tol := flag.Float64("tol", 1e-3, "largest relative difference allowed")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "protocheck: name at least one server URL (http://host:port or grpc://host:port)")
		os.Exit(2)
	}
	if err := run(flag.Args(), *size, *n, *tol); err != nil {
		fmt.Fprintln(os.Stderr, "protocheck:", err)
		os.Exit(1)
	}
}

type path struct {
	name string
	url  string
	opts client.Options
}

func paths(urls []string) []path {
	var ps []path
	for _, u := range urls {
		if strings.HasPrefix(u, "grpc://") {
			for _, t := range []string{client.GRPCH2, client.GRPCGo} {
				ps = append(ps, path{u + " " + t, u, client.Options{GRPCTransport: t}})
			}
			continue
		}
		for _, h := range []string{client.HTTPLean, client.HTTPNetHTTP} {
			ps = append(ps, path{u + " " + h, u, client.Options{HTTPClient: h}})
		}
	}
	return ps
}

func run(urls []string, size, n int, tol float64) error {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(12, 1))
	imgs := make([]*tensor.Tensor, n)
	for i := range imgs {
		t := tensor.New(tensor.Float32, 1, 3, size, size)
		x := tensor.BytesF32(t.Data)
		for j := range x {
			x[j] = float32(r.NormFloat64())
		}
		imgs[i] = t
	}
	var ref [][]float32
	failed := false
	for _, p := range paths(urls) {
		c, err := client.DialOptions(ctx, p.url, p.opts)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		worst := 0.0
		for i, img := range imgs {
			got, err := c.Infer(ctx, img, nil)
			if err != nil {
				c.Close()
				return fmt.Errorf("%s: image %d: %w", p.name, i, err)
			}
			if ref == nil || len(ref) <= i {
				ref = append(ref, append([]float32(nil), got...))
				continue
			}
			worst = max(worst, relDiff(got, ref[i]))
		}
		c.Close()
		verdict := "OK"
		if worst > tol {
			verdict, failed = "DIFFERS", true
		}
		fmt.Printf("%-40s worst relative difference %.2e over %d images (%s)\n", p.name, worst, n, verdict)
	}
	if failed {
		return fmt.Errorf("some paths' logits differ by more than %g", tol)
	}
	return nil
}

// relDiff is max|a-b| / max|b|; a length mismatch counts as a full
// difference.
func relDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d, m float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
		m = max(m, math.Abs(float64(b[i])))
	}
	if m == 0 {
		return d
	}
	return d / m
}
