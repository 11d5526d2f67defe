package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"goinfer/internal/backend"
	"goinfer/internal/client"
	"goinfer/internal/engine"
	"goinfer/internal/loadgen"
	"goinfer/internal/trace"
)

// remoteTarget is a running goinfer (or any KServe v2) server reached over
// HTTP or gRPC: bench drives it with the same workloads and metrics as the
// in-process pipeline. Load and compile time are the server's business and
// stay unknown here; the warmup is one round trip to a loaded model.
type remoteTarget struct {
	c   *client.Client
	md  client.Metadata
	url string
}

func (t *remoteTarget) Submit(r backend.Request) error { return t.c.Submit(r) }

func (t *remoteTarget) describe() (engine.Info, time.Duration, time.Duration, int, int64) {
	scheme, _, _ := strings.Cut(t.url, "://")
	info := engine.Info{
		Engine: "remote-" + scheme, Device: t.url, Arch: t.md.Model,
		Classes: t.md.Classes, InputDType: t.md.InputDType,
	}
	return info, 0, 0, 1, 0
}

// addTrace has nothing to add: the server's stages are its own.
func (t *remoteTarget) addTrace(*trace.Trace, []backend.Response) {}

func (t *remoteTarget) close(context.Context) error { return t.c.Close() }

// runRemoteBench is `bench --url`: the load generator against a server.
func runRemoteBench(ctx context.Context, o *benchOptions, stdout, stderr io.Writer) error {
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	conns := o.connections
	if conns <= 0 {
		// Every connection has one reader and one writer goroutine on
		// each side: spread large tensors over several.
		// Flood mode keeps many in flight too.
		inflight := o.concurrency
		if inflight == 0 {
			inflight = 64
		}
		conns = min(16, max(1, inflight/4))
	}
	c, err := client.DialOptions(dctx, o.url, client.Options{MaxInflight: max(256, o.concurrency), Conns: conns})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "waiting for %s to be ready\n", o.url)
	md, err := c.WaitReady(dctx, 100*time.Millisecond)
	if err != nil {
		c.Close()
		return err
	}
	if len(md.InputShape) == 4 && md.InputShape[2] > 0 && md.InputShape[3] > 0 {
		h, w := int(md.InputShape[2]), int(md.InputShape[3])
		switch {
		case h != w:
			c.Close()
			return fmt.Errorf("%s takes %dx%d images; bench sends square ones", md.Model, h, w)
		case !o.set["image_size"]:
			o.imageSize = h
		case o.imageSize != h:
			c.Close()
			return fmt.Errorf("--image_size %d: %s at %s takes %dx%d images", o.imageSize, md.Model, o.url, h, w)
		}
	}
	dtype, _ := parseInputDType(o.inputDType)
	fmt.Fprintf(stderr, "model %s (%d classes) at %s\n", md.Model, md.Classes, o.url)
	prog := newProgress(stderr)
	shape := loadgen.Shape{BatchSize: o.batchSize, Channels: 3, Height: o.imageSize, Width: o.imageSize, DType: dtype, Seed: o.mf.seed}
	prog.line("generating the request tensors: %d x %s[%d 3 %d %d] (%s each)", o.numIters+1, dtype, o.batchSize, o.imageSize, o.imageSize, mibString(shape.Bytes()))
	inputs, err := loadgen.Generate(ctx, shape, o.numIters+1)
	if err != nil {
		c.Close()
		return err
	}
	t := &remoteTarget{c: c, md: md, url: o.url}
	lcfg := o.loadConfig()
	// The server usually runs on this host: sample its GPU as bench does.
	probe, window, closeProbe := gpuSource("cuda", []int{o.mf.device}, io.Discard)
	defer closeProbe()
	lcfg.Probe, lcfg.UtilWindow = probe, window
	defer printClientStats(stdout, c)
	return benchTarget(ctx, t, inputs, lcfg, o, source{Path: o.url}, stdout, stderr, prog)
}

// printClientStats adds what only a server can say: how it batched the
// requests and how many it refused.
func printClientStats(w io.Writer, c *client.Client) {
	s := c.Stats()
	if len(s.ServerBatches) > 0 {
		sizes := make([]int, 0, len(s.ServerBatches))
		for b := range s.ServerBatches {
			sizes = append(sizes, b)
		}
		sort.Ints(sizes)
		parts := make([]string, len(sizes))
		for i, b := range sizes {
			parts[i] = fmt.Sprintf("%d:%d", b, s.ServerBatches[b])
		}
		fmt.Fprintf(w, "Server batch size: mean %.1f (size:requests %s)\n", s.MeanServerBatch(), strings.Join(parts, " "))
	}
	if s.Requests > s.Errors {
		ok := time.Duration(s.Requests - s.Errors)
		fmt.Fprintf(w, "Server time per request: queue %.3f ms, compute %.3f ms\n",
			float64(s.ServerQueue/ok)/1e6, float64(s.ServerCompute/ok)/1e6)
	}
	if s.Errors > 0 {
		fmt.Fprintf(w, "Refused by the server (queue full): %d; other errors: %d\n", s.Refused, s.Errors-s.Refused)
	}
}
