package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"goinfer/internal/backend"
	"goinfer/internal/client"
	"goinfer/internal/engine"
	"goinfer/internal/loadgen"
	"goinfer/internal/tensor"
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
	shm bool // tensors through system shared memory
	// inputs are the request tensors, in the client's shared memory
	// when shm is set.
	inputs *loadgen.Inputs
}

func (t *remoteTarget) Submit(r backend.Request) error { return t.c.Submit(r) }

func (t *remoteTarget) describe() (engine.Info, time.Duration, time.Duration, int, int64) {
	scheme, _, _ := strings.Cut(t.url, "://")
	if t.shm {
		// The engine column tells shared memory runs from socket ones.
		scheme += "+shm"
	}
	info := engine.Info{Engine: "remote-" + scheme, Device: t.url, Arch: t.md.Model}
	in := engine.TensorSpec{Name: t.md.InputName, DType: t.md.InputDType}
	for _, d := range t.md.InputShape[min(1, len(t.md.InputShape)):] {
		in.Shape = append(in.Shape, int(d)) // -1 where the server takes any size
	}
	info.Inputs = []engine.TensorSpec{in}
	info.Outputs = []engine.TensorSpec{{Name: t.md.OutputName, DType: tensor.Float32, Shape: []int{t.md.Classes}}}
	return info, 0, 0, 1, 0
}

// addTrace has nothing to add: the server's stages are its own.
func (t *remoteTarget) addTrace(*trace.Trace, []backend.Response) {}

// close waits for the requests in flight, then frees the client's shared
// memory, the request tensors' included (Client.Close frees the buffers
// from AllocShared, unregistering them while the connections are still
// open); Inputs.Close then has nothing left to free.
func (t *remoteTarget) close(context.Context) error {
	return errors.Join(t.c.Close(), t.inputs.Close())
}

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
	useSHM := o.sharedMem == "system"
	c, err := client.DialOptions(dctx, o.url, client.Options{
		MaxInflight: max(256, o.concurrency), Conns: conns, SharedMemory: useSHM,
		GRPCWindow: o.grpc.windowOption(), GRPCReadBuffer: o.grpc.readBufferOption(), GRPCWriteBuffer: o.grpc.writeBufferOption(),
		GRPCTransport: o.grpc.transport,
		HTTPClient:    o.httpClient, BusyPoll: o.net.busyPoll, SocketBuffer: o.net.socketBuffer,
	})
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
	via := ""
	if useSHM {
		via = ", tensors through system shared memory"
	}
	fmt.Fprintf(stderr, "model %s (%d classes) at %s%s\n", md.Model, md.Classes, o.url, via)
	prog := newProgress(stderr)
	shape := loadgen.Shape{BatchSize: o.batchSize, Channels: 3, Height: o.imageSize, Width: o.imageSize, DType: dtype, Seed: o.mf.seed}
	where := ""
	if useSHM {
		// The tensors are generated straight into shared memory that the
		// server reads in place, so requests copy nothing on this side,
		// as perf_analyzer's --shared-memory system. Each distinct tensor
		// is an object in /dev/shm and a region registered with the
		// server, so only a few: the server DMAs every request's bytes
		// from its region whatever they hold, and cycling through a few
		// changes no measurement (no cache is warm for them either way).
		shape.Alloc = c.AllocShared
		shape.Distinct = min(16, o.numIters+1)
		where = fmt.Sprintf(", %d distinct in shared memory", shape.Distinct)
	}
	prog.line("generating the request tensors: %d x %s[%d 3 %d %d] (%s each%s)", o.numIters+1, dtype, o.batchSize, o.imageSize, o.imageSize, mibString(shape.Bytes()), where)
	inputs, err := loadgen.Generate(ctx, shape, o.numIters+1)
	if err != nil {
		// Generate has freed what it allocated.
		c.Close()
		return err
	}
	t := &remoteTarget{c: c, md: md, url: o.url, shm: useSHM, inputs: inputs}
	lcfg := o.loadConfig()
	// The server usually runs on this host: sample its GPU as bench does.
	probe, window, closeProbe := gpuSource("cuda", []int{o.mf.device}, io.Discard)
	defer closeProbe()
	lcfg.Probe, lcfg.UtilWindow = probe, window
	defer printClientStats(stdout, c, useSHM)
	return benchTarget(ctx, t, inputs, lcfg, o, source{Path: o.url}, stdout, stderr, prog)
}

// printClientStats adds what only a server can say: how it batched the
// requests and how many it refused; and, with shared memory, whether the
// inputs were read in place.
func printClientStats(w io.Writer, c *client.Client, shm bool) {
	s := c.Stats()
	if shm {
		fmt.Fprintf(w, "Inputs copied into shared memory by the client: %d of %d requests (the rest read in place)\n", s.InputCopies, s.Requests)
	}
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
		if s.Send > 0 {
			fmt.Fprintf(w, "Client time per request: sending %.3f ms, then waiting for the answer %.3f ms\n",
				float64(s.Send/ok)/1e6, float64(s.Wait/ok)/1e6)
		}
	}
	if s.Errors > 0 {
		fmt.Fprintf(w, "Refused by the server (queue full): %d; other errors: %d\n", s.Refused, s.Errors-s.Refused)
	}
}
