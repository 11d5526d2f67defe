package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"goinfer/internal/server/batcher"
	"goinfer/internal/tensor"
)

// HeaderContentLength is the binary tensor data extension's header: the
// size of the JSON part of a body whose tensors follow in binary.
const HeaderContentLength = "Inference-Header-Content-Length"

// Shared header values: net/http does not modify them, so one slice serves
// every response without allocating.
var (
	ctJSON    = []string{"application/json"}
	ctBinary  = []string{"application/octet-stream"}
	retry1s   = []string{"1"}
	connClose = []string{"close"}
)

// Handler returns the HTTP/REST API: KServe v2 endpoints and /metrics.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/health/live", s.handleLive)
	mux.HandleFunc("GET /v2/health/ready", s.handleReady)
	mux.HandleFunc("GET /v2", s.handleServerMetadata)
	mux.HandleFunc("GET /v2/models/{name}", s.handleModelMetadata)
	mux.HandleFunc("GET /v2/models/{name}/versions/{version}", s.handleModelMetadata)
	mux.HandleFunc("GET /v2/models/{name}/ready", s.handleModelReady)
	mux.HandleFunc("GET /v2/models/{name}/versions/{version}/ready", s.handleModelReady)
	mux.HandleFunc("POST /v2/models/{name}/infer", s.handleInfer)
	mux.HandleFunc("POST /v2/models/{name}/versions/{version}/infer", s.handleInfer)
	mux.HandleFunc("POST /v2/repository/index", s.handleRepositoryIndex)
	mux.HandleFunc("GET /debug/latency", s.handleBreakdown)
	mux.HandleFunc("GET /v2/systemsharedmemory/status", s.handleShmStatus)
	mux.HandleFunc("GET /v2/systemsharedmemory/region/{region}/status", s.handleShmStatus)
	mux.HandleFunc("POST /v2/systemsharedmemory/region/{region}/register", s.handleShmRegister)
	mux.HandleFunc("POST /v2/systemsharedmemory/unregister", s.handleShmUnregister)
	mux.HandleFunc("POST /v2/systemsharedmemory/region/{region}/unregister", s.handleShmUnregister)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errorf(kindNotFound, "no endpoint %s %s (see GET /v2 and /v2/models/%s)", r.Method, r.URL.Path, s.cfg.ModelName))
	})
	return s.recoverHTTP(mux)
}

// recoverHTTP turns a panic in a handler into a logged 500, so that one bad
// request cannot take the server down.
func (s *Server) recoverHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			// Whatever the answer, the client should leave this
			// connection: it is about to be closed.
			w.Header()["Connection"] = connClose
		}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("panic in HTTP handler", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				writeError(w, errorf(kindInternal, "internal error: %v", v))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// writeError answers with the protocol's error body {"error": "..."}.
func writeError(w http.ResponseWriter, err error) {
	k, msg := classify(err)
	h := w.Header()
	h["Content-Type"] = ctJSON
	switch k {
	case kindQueueFull:
		h["Retry-After"] = retry1s
	case kindMemoryFull:
		// The body was not read: the connection cannot carry another
		// request, and the client should try again later.
		h["Retry-After"] = retry1s
		h["Connection"] = connClose
	case kindBodyTimeout:
		h["Connection"] = connClose
	case kindShuttingDown:
		// Also where the drain began after the request came in, past
		// recoverHTTP's look: the connection is about to be closed.
		h["Connection"] = connClose
	}
	w.WriteHeader(k.httpStatus())
	// Not HTML-escaped: messages such as "want an offset >= 0" stay
	// readable in curl's output.
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(struct {
		Error string `json:"error"`
	}{msg})
}

func writeJSON(w http.ResponseWriter, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header()["Content-Type"] = ctJSON
	w.Write(body)
}

// Health answers follow the protocol: 200 with an empty body for true, a
// 4xx for false (400, as Triton answers).
func (s *Server) handleLive(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if !s.ready() {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleModelReady(w http.ResponseWriter, r *http.Request) {
	st, err := s.lookup(r.PathValue("name"), r.PathValue("version"))
	if err != nil {
		writeError(w, err)
		return
	}
	if st == nil || s.draining.Load() {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// ServerMetadata is the body of GET /v2.
type ServerMetadata struct {
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Extensions []string `json:"extensions"`
}

func (s *Server) handleServerMetadata(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, ServerMetadata{Name: s.cfg.ServerName, Version: s.cfg.ServerVersion, Extensions: s.extensions()})
}

// TensorMetadata describes a model input or output.
type TensorMetadata struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// ModelMetadata is the body of GET /v2/models/{name}.
type ModelMetadata struct {
	Name     string           `json:"name"`
	Versions []string         `json:"versions"`
	Platform string           `json:"platform"`
	Inputs   []TensorMetadata `json:"inputs"`
	Outputs  []TensorMetadata `json:"outputs"`
}

func (s *Server) modelMetadata(st *modelState) ModelMetadata {
	return ModelMetadata{
		Name:     s.cfg.ModelName,
		Versions: []string{s.cfg.ModelVersion},
		Platform: st.model.Platform,
		Inputs:   st.inputsMetadata(),
		Outputs:  st.outputsMetadata(),
	}
}

func (s *Server) handleModelMetadata(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	st, err := s.lookup(name, r.PathValue("version"))
	if err == nil && st == nil {
		_, err = s.serving(name, "") // says "loading" or why it failed
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, s.modelMetadata(st))
}

// RepositoryEntry is one element of POST /v2/repository/index (the model
// repository extension), which lets clients find the model's name.
type RepositoryEntry struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
}

func (s *Server) handleRepositoryIndex(w http.ResponseWriter, r *http.Request) {
	e := RepositoryEntry{Name: s.cfg.ModelName, Version: s.cfg.ModelVersion, State: "READY"}
	switch {
	case s.draining.Load():
		e.State, e.Reason = "UNAVAILABLE", "shutting down"
	case s.state.Load() != nil:
	case s.loadErr.Load() != nil:
		e.State, e.Reason = "UNAVAILABLE", (*s.loadErr.Load()).Error()
	default:
		e.State, e.Reason = "LOADING", "loading and compiling"
	}
	writeJSON(w, []RepositoryEntry{e})
}

// handleInfer serves POST /v2/models/{name}[/versions/{v}]/infer.
func (s *Server) handleInfer(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	s.active.Add(1)
	defer s.active.Add(-1)
	g := s.metrics.inflightGauge("http")
	g.Inc()
	defer g.Dec()
	ctx := r.Context()
	if s.cfg.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.RequestTimeout)
		defer cancel()
	}
	var ph httpPhases
	if s.breakdown != nil {
		ph.st = new(stamps)
		ph.st[stepArrived] = start
	}
	res, err := s.inferHTTP(ctx, w, r, &ph)
	if err != nil {
		k, msg := classify(err)
		s.logFailure("http", k, msg)
		writeError(w, err)
		s.metrics.observeRequest("http", k, false, time.Since(start), 0)
		return
	}
	end := time.Now()
	if !ph.in.IsZero() {
		s.metrics.observeHTTPPhases(start, ph.in, ph.out, end)
	}
	s.metrics.observeRequest("http", 0, true, end.Sub(start), res.QueueWait)
	if ph.st != nil && !ph.in.IsZero() {
		ph.st[stepEncoded] = end
		s.breakdown.record("http", ph.st)
	}
}

// httpPhases marks when an HTTP inference request's input was received and
// when the batcher answered it (zero on paths that do not record them).
// With the latency breakdown on, st holds its steps.
type httpPhases struct {
	in, out time.Time
	st      *stamps
}

// logFailure logs failed requests: server-side failures as errors, the
// rest at debug level so that an overload does not flood the log.
func (s *Server) logFailure(protocol string, k kind, msg string) {
	level := slog.LevelDebug
	if k == kindInternal {
		level = slog.LevelError
	}
	s.log.Log(context.Background(), level, "request failed", "protocol", protocol, "status", k.statusLabel(), "err", msg)
}

// inferHTTP decodes, runs and answers one request. On error nothing has
// been written.
func (s *Server) inferHTTP(ctx context.Context, w http.ResponseWriter, r *http.Request, ph *httpPhases) (batcher.Result, error) {
	var res batcher.Result
	st, err := s.serving(r.PathValue("name"), r.PathValue("version"))
	if err != nil {
		return res, err
	}
	if s.saturated() {
		return res, batcher.ErrQueueFull // before reading the body
	}
	limit := s.cfg.MaxRequestBytes
	if r.ContentLength > limit {
		return res, errorf(kindTooLarge, "request body of %d bytes is over the limit of %d (--max_request_bytes)", r.ContentLength, limit)
	}

	// The JSON part: all of the body, or its first
	// Inference-Header-Content-Length bytes.
	hdrLen := int64(-1)
	if v := r.Header.Get(HeaderContentLength); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil || n < 0:
			return res, errorf(kindInvalid, "%s header %q is not a byte count", HeaderContentLength, v)
		case n > limit:
			return res, errorf(kindTooLarge, "%s header says %d bytes, over the limit of %d", HeaderContentLength, n, limit)
		case r.ContentLength >= 0 && n > r.ContentLength:
			return res, errorf(kindInvalid, "%s header says %d bytes, but the body has only %d", HeaderContentLength, n, r.ContentLength)
		}
		hdrLen = n
	}
	// The body's bytes are taken from the server's budget before any is
	// read: what the request declares, or, for a chunked body, what
	// arrives.
	held := lease{b: s.budget}
	defer held.release()
	declared := r.ContentLength
	if declared < 0 {
		declared = max(hdrLen, 0)
	}
	if !held.ensure(declared) {
		return res, errMemoryFull(declared)
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	hdrBuf, err := s.readJSONPart(body, hdrLen, r.ContentLength, &held)
	if err != nil {
		return res, err
	}
	defer s.bufs.put(hdrBuf)
	req, err := decodeHeader(*hdrBuf)
	if err != nil {
		return res, err
	}
	if ph.st != nil {
		ph.st[stepHeader] = time.Now()
	}
	if len(req.Inputs) != 1 {
		return res, errorf(kindInvalid, "request has %d inputs; the model takes one, %q", len(req.Inputs), st.input.name)
	}
	in := req.Inputs[0]
	binaryOut, err := paramBool(req.Parameters, "binary_data_output", "request")
	if err != nil {
		return res, err
	}
	outs := make([]outputSpec, len(req.Outputs))
	for i, o := range req.Outputs {
		field := "outputs[0]" // the usual single output, without formatting
		if i > 0 {
			field = fmt.Sprintf("outputs[%d]", i)
		}
		outs[i].name = o.Name
		if outs[i].binary, err = paramBool(o.Parameters, "binary_data", field); err != nil {
			return res, err
		}
		if _, set := o.Parameters["binary_data"]; !set {
			outs[i].binary = binaryOut
		}
		k, _, err := paramInt(o.Parameters, "classification", field)
		if err != nil {
			return res, err
		}
		if k < 0 || k > maxDim {
			return res, errorf(kindInvalid, "%s.parameters.classification is %d; want a positive count", field, k)
		}
		outs[i].classification = int(k)
	}
	if st.isImageInput(in.Name) {
		return s.inferImagesHTTP(ctx, w, body, hdrLen, st, req, outs, binaryOut)
	}
	p, err := st.plan(inputSpec{name: in.Name, datatype: in.Datatype, shape: in.Shape}, outs)
	if err != nil {
		return res, err
	}
	if len(outs) == 0 {
		p.out.binary = binaryOut
	}

	inRef, inShm, err := httpShmParams(in.Parameters, "inputs[0]")
	if err != nil {
		return res, err
	}
	var outRef shmRef
	var outShm bool
	if len(req.Outputs) == 1 {
		if outRef, outShm, err = httpShmParams(req.Outputs[0].Parameters, "outputs[0]"); err != nil {
			return res, err
		}
	}
	classes := st.model.Info.OutputElems()
	use := shmUse{reg: &s.shm, pool: &s.reqs}
	defer use.done()
	if outShm {
		if err := use.holdOutput(outRef, p.outBytes(classes)); err != nil {
			return res, err
		}
	}

	// The input data: JSON numbers, the binary section, or shared memory.
	binSize, hasBin, err := paramInt(in.Parameters, "binary_data_size", "inputs[0]")
	if err != nil {
		return res, err
	}
	hasJSON := len(in.Data) > 0 && string(in.Data) != "null"
	var data *[]byte
	inPinned := false
	switch {
	case inShm && (hasJSON || hasBin):
		return res, errorf(kindInvalid, "inputs[0] is in shared memory (parameters.%s) but the request also carries its data", paramShmRegion)
	case inShm:
		if hdrLen >= 0 {
			if err := expectEOF(body, 0); err != nil {
				return res, err
			}
		}
		if err := p.lane.Admit(p.n); err != nil {
			return res, err
		}
		view, pinned, err := use.input(inRef, p.bytes, st.registerHost(p.dtype))
		if err != nil {
			return res, err
		}
		data, inPinned = &view, pinned
	case hasJSON && hasBin:
		return res, errorf(kindInvalid, "inputs[0] has both data and parameters.binary_data_size; send one")
	case hasJSON:
		// Check the declared shape against the data actually sent before
		// allocating for it: every value takes at least two bytes ("0,").
		if want := p.bytes / p.dtype.Size(); len(in.Data) < 2*want-1 {
			return res, errorf(kindInvalid, "inputs[0].data has %d bytes, too few for the %d values %s%v needs", len(in.Data), want, in.Datatype, in.Shape)
		}
		if !held.ensure(held.held + int64(p.bytes)) {
			return res, errMemoryFull(held.held + int64(p.bytes))
		}
		if err := p.lane.Admit(p.n); err != nil {
			return res, err
		}
		data = s.reqs.Get(p.bytes)
		defer s.reqs.Put(data)
		if err := parseData(in.Data, p.dtype, *data); err != nil {
			return res, err
		}
		if hdrLen >= 0 {
			if err := expectEOF(body, 0); err != nil {
				return res, err
			}
		}
	case hasBin:
		if hdrLen < 0 {
			return res, errorf(kindInvalid, "inputs[0].parameters.binary_data_size is set, but the request has no %s header", HeaderContentLength)
		}
		if binSize != int64(p.bytes) {
			return res, errorf(kindInvalid, "inputs[0].parameters.binary_data_size is %d; %s%v needs %d bytes", binSize, in.Datatype, in.Shape, p.bytes)
		}
		if cl := r.ContentLength; cl >= 0 && hdrLen+int64(p.bytes) > cl {
			return res, errorf(kindInvalid, "binary data truncated: inputs[0] declares %d bytes after the %d-byte JSON header, but Content-Length is %d", p.bytes, hdrLen, cl)
		}
		if !held.ensure(hdrLen + int64(p.bytes)) { // chunked bodies
			return res, errMemoryFull(hdrLen + int64(p.bytes))
		}
		// Refuse before reading megabytes we would have to drop.
		if err := p.lane.Admit(p.n); err != nil {
			return res, err
		}
		b, got, err := readFullIncremental(body, p.bytes, s.reqs.Get, s.reqs.Put)
		if err != nil {
			return res, readError(err, fmt.Sprintf("binary data truncated: inputs[0] declares %d bytes, the body holds %d after the JSON header", p.bytes, got))
		}
		data = b
		defer s.reqs.Put(data)
		if err := expectEOF(body, p.bytes); err != nil {
			return res, err
		}
	default:
		return res, errorf(kindInvalid, "inputs[0] has no data: send \"data\" or parameters.binary_data_size with the binary tensor after the JSON header")
	}

	// The body is in: --read_timeout must not cut the connection while the
	// request waits for its batch (net/http cancels the request's context
	// when a read deadline passes).
	if ph.st != nil {
		ph.st[stepInput] = time.Now()
	}
	http.NewResponseController(w).SetReadDeadline(time.Time{})
	outBuf := s.bufs.get(p.n * classes * 4)
	defer s.bufs.put(outBuf)
	logits := tensor.BytesF32(*outBuf)
	if !inShm {
		inPinned = s.reqs.Pinned(*data)
	}
	bin := batcher.Input{DType: p.dtype, N: p.n, Data: *data, Pinned: inPinned}
	p.ranking(&bin)
	ph.in = time.Now()
	res, err = p.lane.Infer(ctx, bin, logits)
	ph.out = time.Now()
	if ph.st != nil {
		ph.st[stepSubmit], ph.st[stepAnswered] = ph.in, ph.out
		ph.st.setResult(res)
	}
	if err != nil {
		return res, err
	}
	p.postprocess(logits, classes)
	if outShm {
		return res, s.writeShmResponse(w, st, req.ID, p, logits, res, &use)
	}
	s.writeInferResponse(w, st, req.ID, p, logits, res)
	if !inShm {
		// The answer's last bytes would otherwise wait in net/http's
		// buffer for the handler's clean-up and return. An input in
		// shared memory is unpinned by that clean-up, which must come
		// before the client can see the answer and reuse the region.
		http.NewResponseController(w).Flush()
	}
	return res, nil
}

// writeShmResponse writes the output into its shared memory region and
// answers with a JSON body that describes it.
func (s *Server) writeShmResponse(w http.ResponseWriter, st *modelState, id string, p plan, logits []float32, res batcher.Result, use *shmUse) error {
	raw := tensor.F32Bytes(logits)
	datatype, shape := "FP32", st.output.batched(p.n)
	if k := p.out.classification; k > 0 {
		buf := s.bufs.get(0)
		defer s.bufs.put(buf)
		b := (*buf)[:0]
		p.classify(st.model.Labels, func(e []byte) { b = appendBytesElem(b, e) })
		*buf = b
		raw, datatype, shape = b, "BYTES", []int64{int64(p.n), int64(k)}
	}
	n, err := use.writeOutput(raw)
	if err != nil {
		return err
	}
	hdr := s.bufs.get(0)
	defer s.bufs.put(hdr)
	j := jsonResponse{buf: (*hdr)[:0]}
	j.begin(s.cfg.ModelName, s.cfg.ModelVersion, id, responseParams{
		queueMicros: res.QueueWait.Microseconds(), computeMicros: res.Compute.Microseconds(), batchSize: res.BatchSize,
	})
	j.output(p.out.name, datatype, shape)
	j.shm(use.outRef.region, n)
	j.end()
	h := w.Header()
	h["Content-Type"] = ctJSON
	h["Content-Length"] = []string{strconv.Itoa(len(j.buf))}
	w.Write(j.buf)
	*hdr = j.buf[:0]
	return nil
}

// handleShmStatus lists registered shared memory regions as a JSON array.
func (s *Server) handleShmStatus(w http.ResponseWriter, r *http.Request) {
	st, err := s.shm.status(r.PathValue("region"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, st)
}

// handleShmRegister registers a region: {"key": ..., "offset": ..., "byte_size": ...}.
func (s *Server) handleShmRegister(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Key      *string `json:"key"`
		Offset   uint64  `json:"offset"`
		ByteSize *uint64 `json:"byte_size"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, errorf(kindInvalid, "shared memory register request: malformed JSON: %v (want {\"key\": \"/name\", \"offset\": 0, \"byte_size\": N})", err))
		return
	}
	if req.Key == nil || req.ByteSize == nil {
		writeError(w, errorf(kindInvalid, "shared memory register request needs \"key\" and \"byte_size\""))
		return
	}
	if err := s.shm.register(r.PathValue("region"), *req.Key, req.Offset, *req.ByteSize); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, struct{}{})
}

// handleShmUnregister forgets one region, or all of them.
func (s *Server) handleShmUnregister(w http.ResponseWriter, r *http.Request) {
	if err := s.shm.unregister(r.PathValue("region")); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, struct{}{})
}

// readJSONPart reads the first hdrLen bytes of body, or all of it when
// hdrLen < 0, into a pooled buffer that grows as the bytes arrive. A
// chunked body's bytes are taken from the budget through held as it grows.
func (s *Server) readJSONPart(body io.Reader, hdrLen, contentLength int64, held *lease) (*[]byte, error) {
	if hdrLen >= 0 {
		b, got, err := readFullIncremental(body, int(hdrLen), s.bufs.get, s.bufs.put)
		if err != nil {
			return nil, readError(err, fmt.Sprintf("body ended after %d bytes, inside the %d-byte JSON header that %s announced", got, hdrLen, HeaderContentLength))
		}
		return b, nil
	}
	if contentLength >= 0 {
		b, got, err := readFullIncremental(body, int(contentLength), s.bufs.get, s.bufs.put)
		if err != nil {
			return nil, readError(err, fmt.Sprintf("body ended after %d of its %d bytes", got, contentLength))
		}
		return b, nil
	}
	// Chunked: grow a pooled buffer; MaxBytesReader bounds it.
	const first = 64 << 10
	if !held.ensure(first) {
		return nil, errMemoryFull(first)
	}
	b := s.bufs.get(first)
	n := 0
	for {
		if n == len(*b) {
			if !held.ensure(int64(2 * len(*b))) {
				s.bufs.put(b)
				return nil, errMemoryFull(int64(2 * len(*b)))
			}
			bigger := s.bufs.get(2 * len(*b))
			copy(*bigger, (*b)[:n])
			s.bufs.put(b)
			b = bigger
		}
		m, err := body.Read((*b)[n:])
		n += m
		if err == io.EOF {
			*b = (*b)[:n]
			return b, nil
		}
		if err != nil {
			s.bufs.put(b)
			return nil, readError(err, "reading the request body")
		}
	}
}

// readError classifies a body read failure: over the size limit is 413,
// a body that ends early is 400.
func readError(err error, what string) error {
	var mbe *http.MaxBytesError
	switch {
	case isTimeout(err):
		return errorf(kindBodyTimeout, "%s: the body did not arrive in time (--read_timeout)", what)
	case errors.As(err, &mbe):
		return errorf(kindTooLarge, "request body is over the limit of %d bytes (--max_request_bytes)", mbe.Limit)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return errorf(kindInvalid, "%s", what)
	}
	return errorf(kindInvalid, "%s: %v", what, err)
}

// expectEOF checks that the body has nothing after the data consumed.
func expectEOF(body io.Reader, consumed int) error {
	var one [1]byte
	n, err := io.ReadFull(body, one[:])
	if n == 0 && (err == io.EOF || err == io.ErrUnexpectedEOF) {
		return nil
	}
	if err != nil && n == 0 {
		return readError(err, "reading the request body")
	}
	extra := 1
	m, _ := io.Copy(io.Discard, io.LimitReader(body, 1<<20))
	extra += int(m)
	return errorf(kindInvalid, "request body has %d unexpected bytes after the %d bytes of binary input data the inputs declare", extra, consumed)
}

// writeInferResponse answers a successful request: JSON, or a JSON header
// followed by the binary output.
func (s *Server) writeInferResponse(w http.ResponseWriter, st *modelState, id string, p plan, logits []float32, res batcher.Result) {
	hdr := s.bufs.get(0)
	defer s.bufs.put(hdr)
	j := jsonResponse{buf: (*hdr)[:0]}
	j.begin(s.cfg.ModelName, s.cfg.ModelVersion, id, responseParams{
		queueMicros: res.QueueWait.Microseconds(), computeMicros: res.Compute.Microseconds(), batchSize: res.BatchSize,
	})
	var bin []byte
	var binBuf *[]byte
	if k := p.out.classification; k > 0 {
		j.output(p.out.name, "BYTES", []int64{int64(p.n), int64(k)})
		if p.out.binary {
			binBuf = s.bufs.get(0)
			b := (*binBuf)[:0]
			p.classify(st.model.Labels, func(e []byte) { b = appendBytesElem(b, e) })
			bin = b
			j.binary(len(bin))
		} else {
			j.strings(func(add func([]byte)) { p.classify(st.model.Labels, add) })
		}
	} else {
		j.output(p.out.name, "FP32", st.output.batched(p.n))
		if p.out.binary {
			bin = tensor.F32Bytes(logits)
			j.binary(len(bin))
		} else {
			j.floats(logits)
		}
	}
	j.end()
	h := w.Header()
	if bin != nil {
		h["Content-Type"] = ctBinary
		h[HeaderContentLength] = []string{strconv.Itoa(len(j.buf))}
	} else {
		h["Content-Type"] = ctJSON
	}
	h["Content-Length"] = []string{strconv.Itoa(len(j.buf) + len(bin))}
	w.Write(j.buf)
	if bin != nil {
		w.Write(bin)
	}
	*hdr = j.buf[:0] // keep the grown buffer for the next response
	if binBuf != nil {
		*binBuf = bin[:0]
		s.bufs.put(binBuf)
	}
}
