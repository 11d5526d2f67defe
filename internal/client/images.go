package client

import (
	"context"
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

func (t *httpTransport) inferImages(ctx context.Context, model string, r imageRequest) (ImageResult, error) {
	var res ImageResult
	in, _ := json.Marshal(r.input)
	out, _ := json.Marshal(r.output)
	h := fmt.Appendf(nil, `{"inputs":[{"name":%s,"datatype":"BYTES","shape":[%d],"parameters":{"binary_data_size":%d}}],`+
		`"outputs":[{"name":%s,"parameters":{"classification":%d,"binary_data":true}}]}`, in, len(r.images), bytesSize(r.images), out, r.k)
	// The images go to the socket from the caller's slices, each after
	// its length: nothing is copied into one body.
	parts := make(net.Buffers, 0, 1+2*len(r.images))
	prefixes := make([]byte, 4*len(r.images))
	parts = append(parts, h)
	for i, im := range r.images {
		p := prefixes[4*i : 4*i+4]
		binary.LittleEndian.PutUint32(p, uint32(len(im)))
		parts = append(parts, p, im)
	}
	req, err := http.NewRequestWithContext(ctx, "POST", t.base+"/v2/models/"+url.PathEscape(model)+"/infer", &parts)
	if err != nil {
		return res, err
	}
	req.ContentLength = int64(len(h) + bytesSize(r.images))
	req.Header["Content-Type"] = ctBinary
	req.Header[headerContentLength] = []string{strconv.Itoa(len(h))}
	resp, err := t.hc.Do(req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return res, httpError(resp)
	}
	jsonLen := resp.ContentLength
	if v := resp.Header.Get(headerContentLength); v != "" {
		if jsonLen, err = strconv.ParseInt(v, 10, 64); err != nil || jsonLen < 0 || jsonLen > 16<<20 {
			return res, fmt.Errorf("response %s %q is not a valid size", headerContentLength, v)
		}
	} else if jsonLen < 0 || jsonLen > 1<<30 {
		jsonLen = 1 << 30
	}
	var ir inferResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, jsonLen)).Decode(&ir); err != nil {
		return res, fmt.Errorf("response JSON: %w", err)
	}
	if len(ir.Outputs) != 1 || ir.Outputs[0].Datatype != "BYTES" || len(ir.Outputs[0].Shape) != 2 {
		return res, fmt.Errorf("response has %d outputs; want one BYTES [images, k] classification", len(ir.Outputs))
	}
	o := ir.Outputs[0]
	var entries []string
	if sz := o.Parameters.BinaryDataSize; sz != nil {
		if *sz < 0 || *sz > 64<<20 {
			return res, fmt.Errorf("response binary_data_size %d is not valid", *sz)
		}
		raw := make([]byte, *sz)
		if _, err := io.ReadFull(resp.Body, raw); err != nil {
			return res, fmt.Errorf("reading the response's classifications: %w", err)
		}
		if entries, err = splitEntries(raw); err != nil {
			return res, err
		}
	} else if err := json.Unmarshal(o.Data, &entries); err != nil {
		return res, fmt.Errorf("response data is not a list of classification strings: %w", err)
	}
	if res.Classes, err = parseClasses(entries, o.Shape); err != nil {
		return res, err
	}
	res.QueueWait, res.Compute, res.BatchSize = ir.serverParams()
	return res, nil
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
