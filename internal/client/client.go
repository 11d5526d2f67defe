// Package client talks to a running KServe v2 server (goinfer serve, or any
// server of the protocol such as Triton) over HTTP or gRPC, and implements
// backend.Submitter so that `goinfer bench --url` drives a remote server
// with the same load generator as the in-process backend.
//
// Requests travel in the protocol's binary forms: over HTTP, the binary
// tensor data extension (a small JSON header, then the raw tensor, and the
// logits back the same way); over gRPC, raw_input_contents and
// raw_output_contents. Neither copies the input tensor before it reaches
// the socket. Over http://, inference requests go through a small
// HTTP/1.1 client of this package (Options.HTTPClient) that writes each
// request with one system call on a persistent connection.
//
// With Options.SharedMemory, tensors skip the socket altogether: the client
// and a server on the same host share POSIX shared memory objects (Triton's
// system shared memory extension), and requests only name the regions the
// input and the logits are in. An input generated in memory from
// Client.AllocShared is not even copied: the server reads it in place.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"goinfer/internal/backend"
	"goinfer/internal/shm"
	"goinfer/internal/tensor"
)

// Options tune a Client. Zero values take the defaults noted.
type Options struct {
	// Model is the model to use. Empty: the model named in the URL
	// (http://host:port/v2/models/NAME, grpc://host:port/NAME or
	// ?model=NAME), else the one the server serves.
	Model string
	// MaxInflight bounds the requests Submit keeps in flight (default 256);
	// Submit blocks while that many are outstanding.
	MaxInflight int
	// Conns is the number of gRPC connections requests are spread over
	// (default 4), so that one TCP stream does not cap throughput.
	Conns int
	// Timeout bounds each request (0: none beyond the request's Ctx).
	Timeout time.Duration
	// GRPCReadBuffer and GRPCWriteBuffer size the buffers between gRPC's
	// HTTP/2 framer and the socket, in bytes (default 1 MiB); negative:
	// none, the framer reads and writes the socket directly.
	GRPCReadBuffer, GRPCWriteBuffer int
	// GRPCWindow is the HTTP/2 flow-control window, in bytes, the client
	// grants each stream and each connection (default 16 MiB); negative:
	// gRPC-Go's own 64 KiB, grown by its bandwidth estimator.
	GRPCWindow int32
	// GRPCTransport picks what carries gRPC inference calls: GRPCGo
	// (default) or GRPCH2 (internal/h2grpc, for latency; other calls stay
	// on gRPC-Go).
	GRPCTransport string
	// BusyPoll makes the reads of inference connections (the lean HTTP
	// client's and gRPC's) poll the socket for up to this long before
	// sleeping in the network poller (see package busypoll): an answer
	// that arrives within it is read without waking a sleeping thread,
	// while the waiting request keeps a core busy (0: off).
	BusyPoll time.Duration
	// SocketBuffer, when > 0, sets the kernel send and receive buffers of
	// those connections, in bytes.
	SocketBuffer int
	// HTTPClient is the client inference requests go through over
	// http://: HTTPLean (default) or HTTPNetHTTP. Other requests, and
	// all of https://, use net/http.
	HTTPClient string
	// JSONImages makes InferImages over HTTP send the images as base64
	// strings in the request's JSON, the form of the KServe v2 protocol
	// that needs no extension, and get the classifications back in JSON,
	// instead of both in the binary data extension. gRPC ignores it.
	JSONImages bool
	// SharedMemory passes the input tensor and the logits through system
	// shared memory (Linux only; the server must be on this host and
	// allow it, as `goinfer serve --allow_shared_memory` does) instead of
	// in the messages. Each request in flight holds one shared memory
	// object, registered with the server as a region, reused by later
	// requests; the input is copied into it unless it already lies in a
	// buffer from AllocShared. Close unregisters and removes them all.
	SharedMemory bool
}

// Metadata describes the served model, as its metadata endpoint says.
type Metadata struct {
	Server, ServerVersion string
	Model, Version        string
	Platform              string
	InputName             string
	InputDType            tensor.DType
	// InputShape is [-1, C, H, W]; -1 marks any size.
	InputShape []int64
	OutputName string
	Classes    int
	// ImageInput is the model's input of encoded images (BYTES), "" if
	// it has none.
	ImageInput string
	// Outputs names all of the model's outputs, OutputName first.
	Outputs []string
}

// ServerError is an error the server answered with.
type ServerError struct {
	HTTPStatus int        // 0 for gRPC
	Code       codes.Code // the gRPC code, or the one matching HTTPStatus
	Message    string
}

func (e *ServerError) Error() string {
	if e.HTTPStatus != 0 {
		return fmt.Sprintf("server answered %d: %s", e.HTTPStatus, e.Message)
	}
	return fmt.Sprintf("server answered %s: %s", e.Code, e.Message)
}

// Is makes a refusal for a full queue (HTTP 503 with Retry-After, gRPC
// RESOURCE_EXHAUSTED) match backend.ErrQueueFull.
func (e *ServerError) Is(target error) bool {
	return target == backend.ErrQueueFull && e.Code == codes.ResourceExhausted
}

// Stats count what a Client did, and what the server said about how it
// ran the requests (goinfer reports it in response parameters).
type Stats struct {
	Requests int64 // answered
	Errors   int64 // answered with an error
	Refused  int64 // errors that were full-queue refusals
	Images   int64 // images answered with logits
	// ServerBatches maps the batch size the server ran a request in to the
	// number of requests that ran in such a batch (goinfer servers only).
	ServerBatches map[int]int64
	// ServerQueue and ServerCompute sum the server-side queue and device
	// times of the answered requests.
	ServerQueue, ServerCompute time.Duration
	// Send and Wait sum, over answered requests, the time the lean HTTP
	// client took to hand each request to its socket and then waited for
	// the answer's first byte (zero for other transports).
	Send, Wait time.Duration
	// InputCopies counts the requests (with Options.SharedMemory) whose
	// input the client copied into a shared memory slot, not lying in a
	// buffer from AllocShared.
	InputCopies int64
}

// MeanServerBatch is the mean server batch size over requests that
// reported one, 0 if none did.
func (s Stats) MeanServerBatch() float64 {
	var n, sum int64
	for b, c := range s.ServerBatches {
		n += c
		sum += int64(b) * c
	}
	if n == 0 {
		return 0
	}
	return float64(sum) / float64(n)
}

// transport is one protocol's implementation.
type transport interface {
	resolveModel(ctx context.Context) (string, error)
	metadata(ctx context.Context, model string) (Metadata, error)
	modelReady(ctx context.Context, model string) (bool, error)
	infer(ctx context.Context, c *Client, in *tensor.Tensor, out []float32) (result, error)
	// inferSHM runs a request whose input is in shared memory where place
	// says and whose logits the server writes there; it returns the
	// number of float32 values the response says were written.
	inferSHM(ctx context.Context, c *Client, in *tensor.Tensor, place shmIO) (result, int, error)
	registerSHM(ctx context.Context, r SharedMemoryRegion) error
	unregisterSHM(ctx context.Context, name string) error
	statusSHM(ctx context.Context) ([]SharedMemoryRegion, error)
	close() error
}

// result is one answered request.
type result struct {
	logits    []float32
	queue     time.Duration
	compute   time.Duration
	batchSize int
	times     sendTimes // the lean HTTP client's
}

// Client is a connection to one model on one server. It is safe for
// concurrent use.
type Client struct {
	opts  Options
	url   string
	model string
	t     transport
	md    atomic.Pointer[Metadata]
	wn    atomic.Pointer[wireNames]
	shm   *shmPool // nil unless Options.SharedMemory

	sem      chan struct{}
	closed   chan struct{} // closed when Close begins: wakes blocked Submits
	closeMu  sync.RWMutex  // orders Submit's wg.Add before Close's Wait
	isClosed bool
	once     sync.Once
	wg       sync.WaitGroup

	requests, errs, refused, images atomic.Int64
	queueNS, computeNS              atomic.Int64
	sendNS, waitNS                  atomic.Int64
	inputCopies                     atomic.Int64
	mu                              sync.Mutex
	batches                         map[int]int64
}

// Dial connects to the server at rawURL (http://, https:// or grpc://) with
// default options.
func Dial(ctx context.Context, rawURL string) (*Client, error) {
	return DialOptions(ctx, rawURL, Options{})
}

// DialOptions connects to the server at rawURL and resolves the model. It
// does not wait for the model to be ready; see WaitReady.
func DialOptions(ctx context.Context, rawURL string, opts Options) (*Client, error) {
	if opts.MaxInflight <= 0 {
		opts.MaxInflight = 256
	}
	if opts.Conns <= 0 {
		opts.Conns = 4
	}
	if opts.HTTPClient == "" {
		opts.HTTPClient = HTTPLean
	}
	if opts.HTTPClient != HTTPLean && opts.HTTPClient != HTTPNetHTTP {
		return nil, fmt.Errorf("client: HTTP client %q: want %s or %s", opts.HTTPClient, HTTPLean, HTTPNetHTTP)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("--url %q: %w", rawURL, err)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("--url %q has no host:port (want http://HOST:PORT or grpc://HOST:PORT)", rawURL)
	}
	model := opts.Model
	if model == "" {
		model = u.Query().Get("model")
	}
	path := strings.Trim(u.Path, "/")
	if opts.SharedMemory && !shm.Supported() {
		return nil, fmt.Errorf("client: shared memory: %w", shm.ErrUnsupported)
	}
	c := &Client{opts: opts, url: rawURL, sem: make(chan struct{}, opts.MaxInflight), closed: make(chan struct{}), batches: map[int]int64{}}
	switch u.Scheme {
	case "http", "https":
		if rest, ok := strings.CutPrefix(path, "v2/models/"); ok && model == "" {
			model, _, _ = strings.Cut(rest, "/")
		}
		c.t = newHTTPTransport(u.Scheme+"://"+u.Host, opts)
	case "grpc":
		if model == "" && path != "" {
			model = path
		}
		if c.t, err = newGRPCTransport(u.Host, opts); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("--url %q: scheme %q is not supported (want http, https or grpc)", rawURL, u.Scheme)
	}
	if model == "" {
		if model, err = c.t.resolveModel(ctx); err != nil {
			c.t.close()
			return nil, fmt.Errorf("%s: finding the model (name it in the URL: %s): %w", rawURL, modelURLHint(u.Scheme), err)
		}
	}
	c.model = model
	if opts.SharedMemory {
		c.shm = newSHMPool(c.t)
	}
	return c, nil
}

func modelURLHint(scheme string) string {
	if scheme == "grpc" {
		return "grpc://HOST:PORT/MODEL"
	}
	return scheme + "://HOST:PORT/v2/models/MODEL"
}

// Model is the name of the model the client uses.
func (c *Client) Model() string { return c.model }

// Metadata fetches the model's metadata.
func (c *Client) Metadata(ctx context.Context) (Metadata, error) {
	md, err := c.t.metadata(ctx, c.model)
	if err != nil {
		return Metadata{}, fmt.Errorf("%s: model %q metadata: %w", c.url, c.model, err)
	}
	if md.InputName == "" || md.OutputName == "" {
		return Metadata{}, fmt.Errorf("%s: model %q metadata has no input or output", c.url, c.model)
	}
	c.md.Store(&md)
	c.wn.Store(newWireNames(md.InputName, md.OutputName))
	return md, nil
}

// WaitReady polls the server every poll interval until the model is ready
// or ctx ends, then returns its metadata.
func (c *Client) WaitReady(ctx context.Context, poll time.Duration) (Metadata, error) {
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		ok, err := c.t.modelReady(ctx, c.model)
		if ok {
			return c.Metadata(ctx)
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return Metadata{}, fmt.Errorf("%s: waiting for model %q: %w (last error: %v)", c.url, c.model, ctx.Err(), err)
			}
			return Metadata{}, fmt.Errorf("%s: waiting for model %q to be ready: %w", c.url, c.model, ctx.Err())
		case <-t.C:
		}
	}
}

// wireNames are the model's tensor names, also as JSON string literals.
type wireNames struct {
	in, out         string
	inJSON, outJSON []byte
}

func newWireNames(in, out string) *wireNames {
	inJSON, _ := json.Marshal(in)
	outJSON, _ := json.Marshal(out)
	return &wireNames{in: in, out: out, inJSON: inJSON, outJSON: outJSON}
}

// defaultNames are goinfer's tensor names, used until metadata is fetched.
var defaultNames = newWireNames("input", "logits")

// names returns the tensor names to use: the metadata's once fetched,
// goinfer's otherwise.
func (c *Client) names() *wireNames {
	if n := c.wn.Load(); n != nil {
		return n
	}
	return defaultNames
}

// Infer runs one request synchronously: in is [n, C, H, W]; the logits go
// into out when it has room for them (and are returned).
func (c *Client) Infer(ctx context.Context, in *tensor.Tensor, out []float32) ([]float32, error) {
	r, err := c.infer(ctx, in, out)
	return r.logits, err
}

func (c *Client) infer(ctx context.Context, in *tensor.Tensor, out []float32) (result, error) {
	if in == nil || len(in.Shape) != 4 {
		return result{}, errors.New("client: input must be a [n, C, H, W] tensor")
	}
	if err := in.Validate(); err != nil {
		return result{}, fmt.Errorf("client: input: %w", err)
	}
	if c.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
	}
	var r result
	var err error
	if c.shm != nil {
		r, err = c.inferSHM(ctx, in, out)
	} else {
		r, err = c.t.infer(ctx, c, in, out)
	}
	c.count(in.Shape[0], r, err)
	return r, err
}

func (c *Client) count(n int, r result, err error) {
	c.requests.Add(1)
	if err != nil {
		c.errs.Add(1)
		if errors.Is(err, backend.ErrQueueFull) {
			c.refused.Add(1)
		}
		return
	}
	c.images.Add(int64(n))
	c.queueNS.Add(int64(r.queue))
	c.computeNS.Add(int64(r.compute))
	c.sendNS.Add(int64(r.times.send))
	c.waitNS.Add(int64(r.times.wait))
	if r.batchSize > 0 {
		c.mu.Lock()
		c.batches[r.batchSize]++
		c.mu.Unlock()
	}
}

// Submit sends req asynchronously and answers on req.Reply, as the
// in-process backend does. It blocks while Options.MaxInflight requests
// are outstanding, until req.Ctx ends or the client is closed.
func (c *Client) Submit(req backend.Request) error {
	if req.Reply == nil {
		return fmt.Errorf("client: request %d has no Reply channel", req.ID)
	}
	if req.Input == nil {
		return fmt.Errorf("client: request %d has no input", req.ID)
	}
	if len(req.Parts) > 0 {
		return fmt.Errorf("client: request %d comes in Parts; a remote server takes the tensor whole, in Input.Data", req.ID)
	}
	ctx := req.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closed:
		return backend.ErrClosed
	}
	c.closeMu.RLock()
	if c.isClosed {
		c.closeMu.RUnlock()
		<-c.sem
		return backend.ErrClosed
	}
	c.wg.Add(1)
	c.closeMu.RUnlock()
	go func() {
		defer c.wg.Done()
		r, err := c.infer(ctx, req.Input, req.Output)
		<-c.sem
		n := req.Input.Shape[0]
		resp := backend.Response{ID: req.ID, SentAt: req.SentAt, DoneAt: time.Now(), Err: err}
		if err == nil {
			resp.Logits, resp.N, resp.Classes = r.logits, n, len(r.logits)/max(n, 1)
			// The server's own stage times, as the in-process backend
			// reports its stages.
			resp.QueueWait, resp.Compute = r.queue, r.compute
		}
		req.Reply <- resp
	}()
	return nil
}

// Stats returns the counts so far.
func (c *Client) Stats() Stats {
	s := Stats{
		Requests: c.requests.Load(), Errors: c.errs.Load(), Refused: c.refused.Load(), Images: c.images.Load(),
		ServerQueue: time.Duration(c.queueNS.Load()), ServerCompute: time.Duration(c.computeNS.Load()),
		Send: time.Duration(c.sendNS.Load()), Wait: time.Duration(c.waitNS.Load()),
		ServerBatches: map[int]int64{}, InputCopies: c.inputCopies.Load(),
	}
	c.mu.Lock()
	for k, v := range c.batches {
		s.ServerBatches[k] = v
	}
	c.mu.Unlock()
	return s
}

// Close waits for the requests in flight to be answered and closes the
// connections. With Options.SharedMemory it first unregisters the client's
// regions (best effort, each call bounded by a short timeout) and removes
// its shared memory objects, the buffers from AllocShared not yet freed
// included. Submit fails with backend.ErrClosed
// afterwards.
func (c *Client) Close() error {
	var err error
	c.once.Do(func() {
		close(c.closed)
		c.closeMu.Lock()
		c.isClosed = true
		c.closeMu.Unlock()
		c.wg.Wait()
		var shmErr error
		if c.shm != nil {
			shmErr = c.shm.close()
		}
		err = errors.Join(shmErr, c.t.close())
	})
	return err
}

// wireName is the KServe datatype name of a dtype.
func wireName(dt tensor.DType) (string, error) {
	switch dt {
	case tensor.Float32:
		return "FP32", nil
	case tensor.Float16:
		return "FP16", nil
	case tensor.Uint8:
		return "UINT8", nil
	case tensor.BFloat16:
		return "BF16", nil
	}
	return "", fmt.Errorf("client: input dtype %s cannot be sent (want float32, float16 or uint8)", dt)
}

// parseDType reads a KServe datatype name.
func parseDType(s string) tensor.DType {
	switch s {
	case "FP32":
		return tensor.Float32
	case "FP16":
		return tensor.Float16
	case "BF16":
		return tensor.BFloat16
	case "UINT8":
		return tensor.Uint8
	case "INT8":
		return tensor.Int8
	case "INT32":
		return tensor.Int32
	case "INT64":
		return tensor.Int64
	case "FP64":
		return tensor.Float64
	case "BOOL":
		return tensor.Bool
	}
	return tensor.Invalid
}

// metadataFrom fills the model part of Metadata.
func metadataFrom(md *Metadata, name, platform string, versions []string, inName, inType string, inShape []int64, outName string, outShape []int64) {
	md.Model, md.Platform = name, platform
	if len(versions) > 0 {
		md.Version = versions[0]
	}
	md.InputName, md.InputDType, md.InputShape = inName, parseDType(inType), inShape
	md.OutputName = outName
	if len(outShape) > 0 {
		md.Classes = int(outShape[len(outShape)-1])
	}
}
