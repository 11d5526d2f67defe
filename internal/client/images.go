package client

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"goinfer/internal/kservepb"
)

// probabilitiesOutput is goinfer's softmax output; classification results
// on it carry probabilities.
const probabilitiesOutput = "probabilities"

// Class is one classification result: a class index, its score (a
// probability on goinfer servers, the output's value on others) and its
// label, if the server has one.
type Class struct {
	Score float32
	Index int
	Label string
}

// ImageResult is the answer to InferImages.
type ImageResult struct {
	// Classes holds, for each image, its best classes, best first.
	Classes [][]Class
	// QueueWait, Compute and BatchSize are how the server ran the
	// request (goinfer servers only).
	QueueWait, Compute time.Duration
	BatchSize          int
}

// imageRequest is an InferImages call, whatever the protocol.
type imageRequest struct {
	input, output string
	images        [][]byte
	k             int
}

// pickInputs finds a model's tensor input (the first that is not BYTES)
// and its image input (the first BYTES one, -1 if none).
func pickInputs(model string, inputs, outputs int, datatype func(i int) string) (tensorIn, imageIn int, err error) {
	tensorIn, imageIn = -1, -1
	for i := range inputs {
		switch {
		case datatype(i) == "BYTES":
			if imageIn < 0 {
				imageIn = i
			}
		case tensorIn < 0:
			tensorIn = i
		}
	}
	if tensorIn < 0 || outputs < 1 {
		return -1, -1, fmt.Errorf("model %q has %d inputs and %d outputs; want an image tensor input and a logits output", model, inputs, outputs)
	}
	return tensorIn, imageIn, nil
}

// InferImages sends encoded images (JPEG, PNG) through the model's image
// input, over HTTP with the binary tensor data extension or over gRPC in
// raw_input_contents (4-byte little-endian lengths, then the bytes), and
// returns the k best classes of each (the classification extension, on
// the probabilities output where the model has one).
func (c *Client) InferImages(ctx context.Context, images [][]byte, k int) (ImageResult, error) {
	var res ImageResult
	if len(images) == 0 {
		return res, errors.New("client: no images")
	}
	if k < 1 {
		return res, fmt.Errorf("client: top-%d classes asked for; want at least 1", k)
	}
	md := c.md.Load()
	if md == nil {
		m, err := c.Metadata(ctx)
		if err != nil {
			return res, err
		}
		md = &m
	}
	if md.ImageInput == "" {
		return res, fmt.Errorf("%s: model %q has no image input (a BYTES input); serve it with goinfer serve --images", c.url, c.model)
	}
	req := imageRequest{input: md.ImageInput, output: md.OutputName, images: images, k: k}
	for _, o := range md.Outputs {
		if o == probabilitiesOutput {
			req.output = o
		}
	}
	if c.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
	}
	var err error
	switch t := c.t.(type) {
	case *httpTransport:
		res, err = t.inferImages(ctx, c.model, req)
	case *grpcTransport:
		res, err = t.inferImages(ctx, c.model, req)
	default:
		err = fmt.Errorf("client: images over %T are not supported", c.t)
	}
	if err == nil && len(res.Classes) != len(images) {
		err = fmt.Errorf("response has classes for %d images; %d were sent", len(res.Classes), len(images))
	}
	c.count(len(images), result{queue: res.QueueWait, compute: res.Compute, batchSize: res.BatchSize}, err)
	return res, err
}

// bytesSize is the size of images as BYTES elements.
func bytesSize(images [][]byte) int {
	n := 0
	for _, im := range images {
		n += 4 + len(im)
	}
	return n
}

// maxClassBytes bounds the binary classifications of an answer.
const maxClassBytes = 64 << 20

func (t *httpTransport) inferImages(ctx context.Context, model string, r imageRequest) (ImageResult, error) {
	var res ImageResult
	in, _ := json.Marshal(r.input)
	out, _ := json.Marshal(r.output)
	var h []byte
	var parts [][]byte
	if t.jsonImages {
		h = fmt.Appendf(nil, `{"inputs":[{"name":%s,"datatype":"BYTES","shape":[%d],"data":[`, in, len(r.images))
		for i, im := range r.images {
			if i > 0 {
				h = append(h, ',')
			}
			h = append(h, '"')
			h = base64.StdEncoding.AppendEncode(h, im)
			h = append(h, '"')
		}
		h = fmt.Appendf(h, `]}],"outputs":[{"name":%s,"parameters":{"classification":%d}}]}`, out, r.k)
	} else {
		h = fmt.Appendf(nil, `{"inputs":[{"name":%s,"datatype":"BYTES","shape":[%d],"parameters":{"binary_data_size":%d}}],`+
			`"outputs":[{"name":%s,"parameters":{"classification":%d,"binary_data":true}}]}`, in, len(r.images), bytesSize(r.images), out, r.k)
		// The images go to the socket from the caller's slices, each
		// after its length: nothing is copied into one body.
		parts = make([][]byte, 0, 2*len(r.images))
		prefixes := make([]byte, 4*len(r.images))
		for i, im := range r.images {
			p := prefixes[4*i : 4*i+4]
			binary.LittleEndian.PutUint32(p, uint32(len(im)))
			parts = append(parts, p, im)
		}
	}
	path := "/v2/models/" + url.PathEscape(model) + "/infer"
	var ir inferResponse
	var entries []string
	var err error
	if t.h1 != nil {
		err = t.h1.exchange(ctx, path, h, parts, !t.jsonImages, nil, func(body io.Reader, jsonLen, contentLength int64) error {
			var err error
			ir, entries, err = decodeClassBody(body, jsonLen, contentLength)
			return err
		})
	} else {
		ir, entries, err = t.inferImagesNetHTTP(ctx, path, h, parts)
	}
	if err != nil {
		return res, err
	}
	if res.Classes, err = parseClasses(entries, ir.Outputs[0].Shape); err != nil {
		return res, err
	}
	res.QueueWait, res.Compute, res.BatchSize = ir.serverParams()
	return res, nil
}

// inferImagesNetHTTP is inferImages' request through net/http: the JSON
// h, then, when parts is not nil, the binary parts after it.
func (t *httpTransport) inferImagesNetHTTP(ctx context.Context, path string, h []byte, parts [][]byte) (inferResponse, []string, error) {
	body := append(net.Buffers{h}, parts...)
	size := 0
	for _, b := range body {
		size += len(b)
	}
	req, err := http.NewRequestWithContext(ctx, "POST", t.base+path, &body)
	if err != nil {
		return inferResponse{}, nil, err
	}
	req.ContentLength = int64(size)
	if parts != nil {
		req.Header["Content-Type"] = ctBinary
		req.Header[headerContentLength] = []string{strconv.Itoa(len(h))}
	} else {
		req.Header["Content-Type"] = []string{"application/json"}
	}
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
	return decodeClassBody(resp.Body, jsonLen, resp.ContentLength)
}

// decodeClassBody decodes the body of an answer of classifications: one
// BYTES output [images, k] of "value:index[:label]" strings, in the JSON
// or, when jsonLen >= 0, after it in the binary data extension. It reads
// the body to its end; memory grows as the body arrives, never from a size
// the server declares alone.
func decodeClassBody(body io.Reader, jsonLen, contentLength int64) (inferResponse, []string, error) {
	var ir inferResponse
	js, err := readJSONPart(body, jsonLen, contentLength)
	if err != nil {
		return ir, nil, err
	}
	if err := json.Unmarshal(js, &ir); err != nil {
		return ir, nil, fmt.Errorf("response JSON: %w", err)
	}
	if len(ir.Outputs) != 1 || ir.Outputs[0].Datatype != "BYTES" || len(ir.Outputs[0].Shape) != 2 {
		return ir, nil, fmt.Errorf("response has %d outputs; want one BYTES [images, k] classification", len(ir.Outputs))
	}
	o := ir.Outputs[0]
	rest := int64(-1) // bytes after the JSON, when known
	if contentLength >= 0 {
		rest = contentLength - int64(len(js))
	}
	sz := o.Parameters.BinaryDataSize
	if sz == nil {
		if rest > 0 {
			return ir, nil, fmt.Errorf("response has %d bytes after its JSON, which announces no binary output", rest)
		}
		var entries []string
		if err := json.Unmarshal(o.Data, &entries); err != nil {
			return ir, nil, fmt.Errorf("response data is not a list of classification strings: %w", err)
		}
		return ir, entries, nil
	}
	switch {
	case *sz < 0 || *sz > maxClassBytes:
		return ir, nil, fmt.Errorf("response binary_data_size %d is not valid", *sz)
	case jsonLen < 0:
		return ir, nil, fmt.Errorf("response announces %d bytes of binary classifications without an %s header", *sz, headerContentLength)
	case rest >= 0 && rest != *sz:
		return ir, nil, fmt.Errorf("response Content-Length %d is not its %d-byte JSON part and %d bytes of classifications", contentLength, len(js), *sz)
	}
	raw, err := io.ReadAll(io.LimitReader(body, *sz))
	if err == nil && int64(len(raw)) != *sz {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return ir, nil, fmt.Errorf("reading the response's classifications: %w", err)
	}
	entries, err := splitEntries(raw)
	return ir, entries, err
}

func (t *grpcTransport) inferImages(ctx context.Context, model string, r imageRequest) (ImageResult, error) {
	var res ImageResult
	raw := make([]byte, 0, bytesSize(r.images))
	for _, im := range r.images {
		raw = binary.LittleEndian.AppendUint32(raw, uint32(len(im)))
		raw = append(raw, im...)
	}
	resp, err := t.client().ModelInfer(ctx, &kservepb.ModelInferRequest{
		ModelName: model,
		Inputs:    []*kservepb.ModelInferRequest_InferInputTensor{{Name: r.input, Datatype: "BYTES", Shape: []int64{int64(len(r.images))}}},
		Outputs: []*kservepb.ModelInferRequest_InferRequestedOutputTensor{{Name: r.output, Parameters: map[string]*kservepb.InferParameter{
			"classification": {ParameterChoice: &kservepb.InferParameter_Int64Param{Int64Param: int64(r.k)}}}}},
		RawInputContents: [][]byte{raw},
	})
	if err != nil {
		return res, grpcErr(err)
	}
	if len(resp.Outputs) != 1 || resp.Outputs[0].Datatype != "BYTES" {
		return res, fmt.Errorf("response has %d outputs; want one BYTES classification", len(resp.Outputs))
	}
	var entries []string
	switch {
	case len(resp.RawOutputContents) == 1:
		if entries, err = splitEntries(resp.RawOutputContents[0]); err != nil {
			return res, err
		}
	default:
		for _, b := range resp.Outputs[0].GetContents().GetBytesContents() {
			entries = append(entries, string(b))
		}
	}
	if res.Classes, err = parseClasses(entries, resp.Outputs[0].Shape); err != nil {
		return res, err
	}
	res.QueueWait, res.Compute, res.BatchSize = grpcServerParams(resp)
	return res, nil
}

// splitEntries splits BYTES elements in the binary layout.
func splitEntries(raw []byte) ([]string, error) {
	var out []string
	for len(raw) > 0 {
		if len(raw) < 4 {
			return nil, errors.New("response BYTES data ends inside a length prefix")
		}
		n := binary.LittleEndian.Uint32(raw)
		if uint64(n) > uint64(len(raw)-4) {
			return nil, fmt.Errorf("response BYTES element of %d bytes overruns the data", n)
		}
		out = append(out, string(raw[4:4+n]))
		raw = raw[4+n:]
	}
	return out, nil
}

// parseClasses reads classification strings "score:index[:label]" of an
// output of shape [images, k].
func parseClasses(entries []string, shape []int64) ([][]Class, error) {
	if len(shape) != 2 || shape[0] < 0 || shape[1] < 0 || int64(len(entries)) != shape[0]*shape[1] {
		return nil, fmt.Errorf("response has %d classification strings for shape %v", len(entries), shape)
	}
	k := int(shape[1])
	out := make([][]Class, shape[0])
	for i := range out {
		out[i] = make([]Class, k)
		for j := range k {
			e := entries[i*k+j]
			score, rest, ok1 := strings.Cut(e, ":")
			idx, label, _ := strings.Cut(rest, ":")
			v, err1 := strconv.ParseFloat(score, 32)
			c, err2 := strconv.Atoi(idx)
			if !ok1 || err1 != nil || err2 != nil {
				return nil, fmt.Errorf("response classification %q is not value:index[:label]", e)
			}
			out[i][j] = Class{Score: float32(v), Index: c, Label: label}
		}
	}
	return out, nil
}
