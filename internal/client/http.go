package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
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
	hdrs sync.Pool // *[]byte for request JSON headers
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
	return &httpTransport{base: base, hc: &http.Client{Transport: tr}}
}

func (t *httpTransport) close() error {
	t.hc.CloseIdleConnections()
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
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Error string `json:"error"`
	}
	msg := string(bytes.TrimSpace(b))
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	code := codes.Unknown
	switch resp.StatusCode {
	case http.StatusBadRequest:
		code = codes.InvalidArgument
	case http.StatusNotFound:
		code = codes.NotFound
	case http.StatusServiceUnavailable:
		code = codes.Unavailable
		if resp.Header.Get("Retry-After") != "" {
			code = codes.ResourceExhausted
		}
	case http.StatusRequestEntityTooLarge:
		code = codes.InvalidArgument
	case http.StatusGatewayTimeout:
		code = codes.DeadlineExceeded
	case http.StatusInternalServerError:
		code = codes.Internal
	}
	return &ServerError{HTTPStatus: resp.StatusCode, Code: code, Message: msg}
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

	req, err := http.NewRequestWithContext(ctx, "POST", t.base+"/v2/models/"+url.PathEscape(c.model)+"/infer", &twoPart{h, in.Data})
	if err != nil {
		return r, err
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
		return r, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return r, httpError(resp)
	}
	jsonLen := resp.ContentLength
	if v := resp.Header.Get(headerContentLength); v != "" {
		if jsonLen, err = strconv.ParseInt(v, 10, 64); err != nil || jsonLen < 0 || jsonLen > 16<<20 {
			return r, fmt.Errorf("response %s %q is not a valid size", headerContentLength, v)
		}
	} else if jsonLen < 0 || jsonLen > 1<<30 {
		jsonLen = 1 << 30
	}
	var ir inferResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, jsonLen)).Decode(&ir); err != nil {
		return r, fmt.Errorf("response JSON: %w", err)
	}
	n, err := ir.outputLen()
	if err != nil {
		return r, err
	}
	o := ir.Outputs[0]
	logits := out
	if len(logits) < n {
		logits = make([]float32, n)
	}
	logits = logits[:n]
	if o.Parameters.BinaryDataSize != nil {
		if *o.Parameters.BinaryDataSize != int64(4*n) {
			return r, fmt.Errorf("response binary_data_size %d does not match shape %v", *o.Parameters.BinaryDataSize, o.Shape)
		}
		if _, err := io.ReadFull(resp.Body, tensor.F32Bytes(logits)); err != nil {
			return r, fmt.Errorf("reading the response's binary logits: %w", err)
		}
	} else {
		var v []float32
		if err := json.Unmarshal(o.Data, &v); err != nil || len(v) != n {
			return r, fmt.Errorf("response data: %d values for shape %v (%v)", len(v), o.Shape, err)
		}
		copy(logits, v)
	}
	r.logits = logits
	r.queue, r.compute, r.batchSize = ir.serverParams()
	return r, nil
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

	req, err := http.NewRequestWithContext(ctx, "POST", t.base+"/v2/models/"+url.PathEscape(c.model)+"/infer", bytes.NewReader(h))
	if err != nil {
		return r, 0, err
	}
	req.Header["Content-Type"] = ctJSON
	resp, err := t.hc.Do(req)
	if err != nil {
		return r, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return r, 0, httpError(resp)
	}
	var ir inferResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&ir); err != nil {
		return r, 0, fmt.Errorf("response JSON: %w", err)
	}
	n, err := ir.outputLen()
	if err != nil {
		return r, 0, err
	}
	if o := ir.Outputs[0]; o.Parameters.BinaryDataSize != nil || len(o.Data) > 0 && string(o.Data) != "null" {
		return r, 0, fmt.Errorf("response carries the logits in the message; the server did not write them to shared memory region %q", place.out.region)
	}
	r.queue, r.compute, r.batchSize = ir.serverParams()
	return r, n, nil
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
