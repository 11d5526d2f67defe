package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"goinfer/internal/tensor"
)

// headerContentLength is the binary tensor data extension's header.
const headerContentLength = "Inference-Header-Content-Length"

var (
	ctBinary = []string{"application/octet-stream"}
	ctJSON   = []string{"application/json"}
)

// httpTransport speaks the REST protocol with binary tensors.
type httpTransport struct {
	base string
	hc   *http.Client
	h1   *h1Client // inference requests, unless net/http was asked for
	// jsonImages sends images as base64 in JSON (Options.JSONImages).
	jsonImages bool
	hdrs       sync.Pool // *[]byte for request JSON headers
}

func newHTTPTransport(base string, opts Options) *httpTransport {
	tr := &http.Transport{
		// Benchmarks talk to the server directly, never through a proxy.
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        2 * opts.MaxInflight,
		MaxIdleConnsPerHost: opts.MaxInflight, // keep a connection per request in flight
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		WriteBufferSize:     64 << 10,
		ReadBufferSize:      64 << 10,
	}
	t := &httpTransport{base: base, hc: &http.Client{Transport: tr}, jsonImages: opts.JSONImages}
	if u, err := url.Parse(base); err == nil && u.Scheme == "http" && opts.HTTPClient != HTTPNetHTTP {
		t.h1 = newH1Client(u.Host, opts.MaxInflight)
		t.h1.busyPoll, t.h1.socketBuffer = opts.BusyPoll, opts.SocketBuffer
	}
	return t
}

func (t *httpTransport) close() error {
	t.hc.CloseIdleConnections()
	if t.h1 != nil {
		return t.h1.close()
	}
	return nil
}

// getJSON fetches a JSON document; a non-200 answer is a ServerError.
func (t *httpTransport) getJSON(ctx context.Context, method, path string, v any) error {
	return t.doJSON(ctx, method, path, nil, v)
}

// doJSON sends body (none if nil) as JSON and decodes the answer into v
// (discards it if v is nil); a non-200 answer is a ServerError.
func (t *httpTransport) doJSON(ctx context.Context, method, path string, body []byte, v any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, t.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header["Content-Type"] = ctJSON
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return httpError(resp)
	}
	if v == nil {
		// Drained, so that the connection is reused.
		_, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 16<<20))
		return err
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(v); err != nil {
		return fmt.Errorf("%s %s: bad JSON: %w", method, path, err)
	}
	return nil
}

// httpError reads a KServe error answer.
func httpError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	return serverErrorFrom(resp.StatusCode, resp.Header.Get("Retry-After") != "", b)
}

// serverErrorFrom is the ServerError of an HTTP answer with status code
// status and body b; a 503 with Retry-After is a full queue.
func serverErrorFrom(status int, retryAfter bool, b []byte) error {
	var e struct {
		Error string `json:"error"`
	}
	msg := string(bytes.TrimSpace(b))
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	code := codes.Unknown
	switch status {
	case http.StatusBadRequest:
		code = codes.InvalidArgument
	case http.StatusNotFound:
		code = codes.NotFound
	case http.StatusServiceUnavailable:
		code = codes.Unavailable
		if retryAfter {
			code = codes.ResourceExhausted
		}
	case http.StatusRequestEntityTooLarge:
		code = codes.InvalidArgument
	case http.StatusGatewayTimeout:
		code = codes.DeadlineExceeded
	case http.StatusInternalServerError:
		code = codes.Internal
	}
	return &ServerError{HTTPStatus: status, Code: code, Message: msg}
}

func (t *httpTransport) resolveModel(ctx context.Context) (string, error) {
	var idx []struct {
		Name  string `json:"name"`
		State string `json:"state"`
	}
	if err := t.getJSON(ctx, "POST", "/v2/repository/index", &idx); err != nil {
		return "", err
	}
	var ready []string
	for _, m := range idx {
		if m.State == "READY" || len(idx) == 1 {
			ready = append(ready, m.Name)
		}
	}
	if len(ready) != 1 {
		return "", fmt.Errorf("the server lists %d models (%v); choose one", len(idx), idx)
	}
	return ready[0], nil
}

type jsonTensorMeta struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

func (t *httpTransport) metadata(ctx context.Context, model string) (Metadata, error) {
	var md Metadata
	var sm struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	if err := t.getJSON(ctx, "GET", "/v2", &sm); err != nil {
		return md, err
	}
	md.Server, md.ServerVersion = sm.Name, sm.Version
	var mm struct {
		Name     string           `json:"name"`
		Versions []string         `json:"versions"`
		Platform string           `json:"platform"`
		Inputs   []jsonTensorMeta `json:"inputs"`
		Outputs  []jsonTensorMeta `json:"outputs"`
	}
	if err := t.getJSON(ctx, "GET", "/v2/models/"+url.PathEscape(model), &mm); err != nil {
		return md, err
	}
	in, img, err := pickInputs(model, len(mm.Inputs), len(mm.Outputs), func(i int) string { return mm.Inputs[i].Datatype })
	if err != nil {
		return md, err
	}
	metadataFrom(&md, mm.Name, mm.Platform, mm.Versions, mm.Inputs[in].Name, mm.Inputs[in].Datatype, mm.Inputs[in].Shape, mm.Outputs[0].Name, mm.Outputs[0].Shape)
	if img >= 0 {
		md.ImageInput = mm.Inputs[img].Name
	}
	for _, o := range mm.Outputs {
		md.Outputs = append(md.Outputs, o.Name)
	}
	return md, nil
}

func (t *httpTransport) modelReady(ctx context.Context, model string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", t.base+"/v2/models/"+url.PathEscape(model)+"/ready", nil)
	if err != nil {
		return false, err
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		return false, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}

// twoPart is a request body of a JSON header and the tensor bytes, sent
// without copying them together.
type twoPart struct{ a, b []byte }

func (r *twoPart) Read(p []byte) (int, error) {
	if len(r.a) > 0 {
		n := copy(p, r.a)
		r.a = r.a[n:]
		return n, nil
	}
	if len(r.b) > 0 {
		n := copy(p, r.b)
		r.b = r.b[n:]
		return n, nil
	}
	return 0, io.EOF
}

// WriteTo lets io.Copy hand both parts to the connection's writer whole.
func (r *twoPart) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for _, p := range [][]byte{r.a, r.b} {
		n, err := w.Write(p)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	r.a, r.b = nil, nil
	return total, nil
}

// header returns a pooled buffer for a request's JSON header.
func (t *httpTransport) header() *[]byte {
	if hp, _ := t.hdrs.Get().(*[]byte); hp != nil {
		return hp
	}
	b := make([]byte, 0, 512)
	return &b
}

// appendInputHead appends the start of a request's JSON up to the opening
// brace of the input's parameters: {"inputs":[{"name":..,"datatype":..,
// "shape":[..],"parameters":{
func appendInputHead(h []byte, names *wireNames, dt string, shape []int) []byte {
	h = append(h, `{"inputs":[{"name":`...)
	h = append(h, names.inJSON...)
	h = append(h, `,"datatype":"`...)
	h = append(h, dt...)
	h = append(h, `","shape":[`...)
	for i, d := range shape {
		if i > 0 {
			h = append(h, ',')
		}
		h = strconv.AppendInt(h, int64(d), 10)
	}
	return append(h, `],"parameters":{`...)
}

// inferResponse is the JSON part of a response.
type inferResponse struct {
	Parameters map[string]json.RawMessage `json:"parameters"`
	Outputs    []struct {
		Name       string  `json:"name"`
		Datatype   string  `json:"datatype"`
		Shape      []int64 `json:"shape"`
		Parameters struct {
			BinaryDataSize *int64 `json:"binary_data_size"`
		} `json:"parameters"`
		Data json.RawMessage `json:"data"`
	} `json:"outputs"`
}

func (t *httpTransport) infer(ctx context.Context, c *Client, in *tensor.Tensor, out []float32) (result, error) {
	var r result
	dt, err := wireName(in.DType)
	if err != nil {
		return r, err
	}
	names := c.names()
	hp := t.header()
	defer t.hdrs.Put(hp)
	h := appendInputHead((*hp)[:0], names, dt, in.Shape)
	h = append(h, `"binary_data_size":`...)
	h = strconv.AppendInt(h, int64(len(in.Data)), 10)
	h = append(h, `}}],"outputs":[{"name":`...)
	h = append(h, names.outJSON...)
	h = append(h, `,"parameters":{"binary_data":true}}]}`...)
	*hp = h

	path := "/v2/models/" + url.PathEscape(c.model) + "/infer"
	var ir inferResponse
	if t.h1 != nil {
		ir, r.logits, err = t.h1.post(ctx, path, h, in.Data, out, false, &r.times)
	} else {
		ir, r.logits, err = t.inferNetHTTP(ctx, path, h, in.Data, out)
	}
	if err != nil {
		return r, err
	}
	r.queue, r.compute, r.batchSize = ir.serverParams()
	return r, nil
}

// inferNetHTTP is infer through net/http.
func (t *httpTransport) inferNetHTTP(ctx context.Context, path string, h, data []byte, out []float32) (inferResponse, []float32, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", t.base+path, &twoPart{h, data})
	if err != nil {
		return inferResponse{}, nil, err
	}
	// An unknown length makes the transport send the body with chunked
	// encoding through twoPart.WriteTo: each part in one write. A known
	// length would wrap the body in a LimitReader and copy it through a
	// 32 KiB buffer, a write syscall per 32 KiB.
	req.ContentLength = -1
	req.Header["Content-Type"] = ctBinary
	req.Header[headerContentLength] = []string{strconv.Itoa(len(h))}
	resp, err := t.hc.Do(req)
	if err != nil {
		return inferResponse{}, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return inferResponse{}, nil, httpError(resp)
	}
	jsonLen := int64(-1)
	if v := resp.Header.Get(headerContentLength); v != "" {
		if jsonLen, err = strconv.ParseInt(v, 10, 64); err != nil || jsonLen < 0 {
			return inferResponse{}, nil, fmt.Errorf("response %s %q is not a valid size", headerContentLength, v)
		}
	}
	return decodeInferBody(resp.Body, jsonLen, resp.ContentLength, out, false)
}

// errLogitsInMessage is decodeInferBody's answer, with inPlace, to a
// response that carries the logits.
var errLogitsInMessage = errors.New("response carries the logits in the message")

// decodeInferBody decodes the body of an inference answer: all JSON, or,
// when jsonLen >= 0 (the binary tensor data extension), a JSON part of
// jsonLen bytes and the binary logits after it. contentLength, when not
// negative, is the body's length, which the parts must fill exactly. The
// logits go into out when it has room for them. With inPlace the logits
// were written elsewhere (shared memory): the answer must be JSON alone,
// describing them. Memory is allocated as the body arrives, never from a
// size the server declares alone.
func decodeInferBody(body io.Reader, jsonLen, contentLength int64, out []float32, inPlace bool) (inferResponse, []float32, error) {
	var ir inferResponse
	js, err := readJSONPart(body, jsonLen, contentLength)
	if err != nil {
		return ir, nil, err
	}
	if err := json.Unmarshal(js, &ir); err != nil {
		return ir, nil, fmt.Errorf("response JSON: %w", err)
	}
	n, err := ir.outputLen()
	if err != nil {
		return ir, nil, err
	}
	o := ir.Outputs[0]
	if inPlace {
		if o.Parameters.BinaryDataSize != nil || len(o.Data) > 0 && string(o.Data) != "null" {
			return ir, nil, errLogitsInMessage
		}
		if contentLength >= 0 && int64(len(js)) != contentLength {
			return ir, nil, fmt.Errorf("response has %d bytes after its JSON", contentLength-int64(len(js)))
		}
		return ir, nil, nil
	}
	if o.Parameters.BinaryDataSize == nil {
		if contentLength >= 0 && int64(len(js)) != contentLength {
			return ir, nil, fmt.Errorf("response has %d bytes after its JSON, which announces no binary output", contentLength-int64(len(js)))
		}
		var v []float32
		if err := json.Unmarshal(o.Data, &v); err != nil || len(v) != n {
			return ir, nil, fmt.Errorf("response data: %d values for shape %v (%v)", len(v), o.Shape, err)
		}
		logits := v
		if len(out) >= n {
			logits = out[:n]
			copy(logits, v)
		}
		return ir, logits, nil
	}
	if *o.Parameters.BinaryDataSize != int64(4*n) {
		return ir, nil, fmt.Errorf("response binary_data_size %d does not match shape %v", *o.Parameters.BinaryDataSize, o.Shape)
	}
	if contentLength >= 0 && jsonLen+int64(4*n) != contentLength {
		return ir, nil, fmt.Errorf("response Content-Length %d is not its %d-byte JSON part and %d bytes of logits", contentLength, jsonLen, 4*n)
	}
	logits, err := readFloats(body, n, out)
	if err != nil {
		return ir, nil, fmt.Errorf("reading the response's binary logits: %w", err)
	}
	return ir, logits, nil
}

// readJSONPart reads the JSON part of an answer's body: jsonLen bytes, or
// with jsonLen < 0 the whole body (contentLength bytes when not negative),
// up to maxResponseJSON.
func readJSONPart(body io.Reader, jsonLen, contentLength int64) ([]byte, error) {
	if jsonLen < 0 {
		jsonLen = contentLength
	}
	var js []byte
	var err error
	switch {
	case jsonLen > maxResponseJSON:
		return nil, fmt.Errorf("response JSON of %d bytes is over the limit of %d", jsonLen, maxResponseJSON)
	case contentLength >= 0 && jsonLen > contentLength:
		return nil, fmt.Errorf("response %s %d is over its Content-Length %d", headerContentLength, jsonLen, contentLength)
	case jsonLen < 0:
		if js, err = io.ReadAll(io.LimitReader(body, maxResponseJSON+1)); err != nil {
			return nil, fmt.Errorf("reading the response JSON: %w", err)
		}
		if len(js) > maxResponseJSON {
			return nil, fmt.Errorf("response JSON is over the limit of %d bytes", maxResponseJSON)
		}
	default:
		if js, err = io.ReadAll(io.LimitReader(body, jsonLen)); err != nil {
			return nil, fmt.Errorf("reading the response JSON: %w", err)
		}
		if int64(len(js)) != jsonLen {
			return nil, fmt.Errorf("response ended after %d bytes of its %d-byte JSON part: %w", len(js), jsonLen, io.ErrUnexpectedEOF)
		}
	}
	return js, nil
}

// readFloats reads n little-endian float32 values from r into out when it
// has room, or else into a slice grown as the bytes arrive.
func readFloats(r io.Reader, n int, out []float32) ([]float32, error) {
	if len(out) >= n {
		out = out[:n]
		_, err := io.ReadFull(r, tensor.F32Bytes(out))
		return out, err
	}
	v := make([]float32, 0, min(n, 16<<10))
	for len(v) < n {
		if len(v) == cap(v) {
			v = slices.Grow(v, min(n-len(v), cap(v)))
		}
		k := min(n, cap(v))
		if _, err := io.ReadFull(r, tensor.F32Bytes(v[len(v):k])); err != nil {
			return nil, err
		}
		v = v[:k]
	}
	return v, nil
}

// outputLen checks that the response has the one FP32 output expected and
// returns its number of values.
func (ir *inferResponse) outputLen() (int, error) {
	if len(ir.Outputs) != 1 || ir.Outputs[0].Datatype != "FP32" {
		return 0, fmt.Errorf("response has %d outputs; want one FP32 tensor", len(ir.Outputs))
	}
	n := 1
	for _, d := range ir.Outputs[0].Shape {
		n *= int(d)
	}
	if n <= 0 || n > 1<<28 {
		return 0, fmt.Errorf("response output shape %v is not valid", ir.Outputs[0].Shape)
	}
	return n, nil
}

func (ir *inferResponse) serverParams() (queue, compute time.Duration, batch int) {
	return serverParams(func(k string) (int64, bool) {
		raw, ok := ir.Parameters[k]
		if !ok {
			return 0, false
		}
		v, err := strconv.ParseInt(string(raw), 10, 64)
		return v, err == nil
	})
}

// inferSHM sends a plain JSON request whose tensors' parameters name where
// they are in shared memory; the answer is plain JSON too, the logits
// being in shared memory.
func (t *httpTransport) inferSHM(ctx context.Context, c *Client, in *tensor.Tensor, place shmIO) (result, int, error) {
	var r result
	dt, err := wireName(in.DType)
	if err != nil {
		return r, 0, err
	}
	names := c.names()
	hp := t.header()
	defer t.hdrs.Put(hp)
	h := appendInputHead((*hp)[:0], names, dt, in.Shape)
	h = appendSHMParams(h, place.in)
	h = append(h, `}}],"outputs":[{"name":`...)
	h = append(h, names.outJSON...)
	h = append(h, `,"parameters":{`...)
	h = appendSHMParams(h, place.out)
	h = append(h, `}}]}`...)
	*hp = h

	path := "/v2/models/" + url.PathEscape(c.model) + "/infer"
	var ir inferResponse
	if t.h1 != nil {
		ir, _, err = t.h1.post(ctx, path, h, nil, nil, true, nil)
	} else {
		ir, err = t.inferSHMNetHTTP(ctx, path, h)
	}
	if errors.Is(err, errLogitsInMessage) {
		return r, 0, fmt.Errorf("response carries the logits in the message; the server did not write them to shared memory region %q", place.out.region)
	}
	if err != nil {
		return r, 0, err
	}
	n, _ := ir.outputLen() // checked by decodeInferBody
	r.queue, r.compute, r.batchSize = ir.serverParams()
	return r, n, nil
}

// inferSHMNetHTTP is inferSHM through net/http.
func (t *httpTransport) inferSHMNetHTTP(ctx context.Context, path string, h []byte) (inferResponse, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", t.base+path, bytes.NewReader(h))
	if err != nil {
		return inferResponse{}, err
	}
	req.Header["Content-Type"] = ctJSON
	resp, err := t.hc.Do(req)
	if err != nil {
		return inferResponse{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return inferResponse{}, httpError(resp)
	}
	ir, _, err := decodeInferBody(resp.Body, -1, resp.ContentLength, nil, true)
	return ir, err
}

// appendSHMParams appends the JSON parameters (the fields, without the
// braces) naming where st is.
// Region names are goinfer_<pid>_<n>: nothing in them to escape.
func appendSHMParams(h []byte, st shmTensor) []byte {
	h = append(h, `"`+paramSHMRegion+`":"`...)
	h = append(h, st.region...)
	h = append(h, '"')
	if st.off != 0 {
		h = append(h, `,"`+paramSHMOffset+`":`...)
		h = strconv.AppendInt(h, st.off, 10)
	}
	h = append(h, `,"`+paramSHMByteSize+`":`...)
	return strconv.AppendInt(h, st.size, 10)
}

// shmRegisterBody is the register request's JSON.
type shmRegisterBody struct {
	Key      string `json:"key"`
	Offset   uint64 `json:"offset"`
	ByteSize uint64 `json:"byte_size"`
}

func (t *httpTransport) registerSHM(ctx context.Context, r SharedMemoryRegion) error {
	body, err := json.Marshal(shmRegisterBody{Key: r.Key, Offset: r.Offset, ByteSize: r.ByteSize})
	if err != nil {
		return err
	}
	return t.doJSON(ctx, "POST", "/v2/systemsharedmemory/region/"+url.PathEscape(r.Name)+"/register", body, nil)
}

func (t *httpTransport) unregisterSHM(ctx context.Context, name string) error {
	return t.doJSON(ctx, "POST", "/v2/systemsharedmemory/region/"+url.PathEscape(name)+"/unregister", nil, nil)
}

func (t *httpTransport) statusSHM(ctx context.Context) ([]SharedMemoryRegion, error) {
	var rs []struct {
		Name     string `json:"name"`
		Key      string `json:"key"`
		Offset   uint64 `json:"offset"`
		ByteSize uint64 `json:"byte_size"`
	}
	if err := t.getJSON(ctx, "GET", "/v2/systemsharedmemory/status", &rs); err != nil {
		return nil, err
	}
	out := make([]SharedMemoryRegion, len(rs))
	for i, r := range rs {
		out[i] = SharedMemoryRegion(r)
	}
	return out, nil
}

// serverParams reads goinfer's response parameters.
func serverParams(get func(string) (int64, bool)) (queue, compute time.Duration, batch int) {
	if v, ok := get("queue_time_us"); ok {
		queue = time.Duration(v) * time.Microsecond
	}
	if v, ok := get("compute_time_us"); ok {
		compute = time.Duration(v) * time.Microsecond
	}
	if v, ok := get("batch_size"); ok {
		batch = int(v)
	}
	return
}
