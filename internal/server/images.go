package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"goinfer/internal/kservepb"
	"goinfer/internal/preprocess"
	"goinfer/internal/server/batcher"
	"goinfer/internal/tensor"
)

// ImageInputName is the model's image input: BYTES elements, each an
// encoded image (JPEG or PNG), one per image, of any size. Requests send
// either it or the model's tensor input. Its shape is [N] (metadata
// says [-1]); [N, 1] is accepted too, as some clients shape one string per
// row.
const ImageInputName = "image"

// AltImageInputName names the image input of a model whose own tensor
// input is already called ImageInputName (as many ONNX exports' is).
const AltImageInputName = "image_bytes"

// imageInputName is the name of st's image input: ImageInputName, unless
// the model's tensor input has that name.
func (st *modelState) imageInputName() string {
	if st.input.name == ImageInputName {
		return AltImageInputName
	}
	return ImageInputName
}

// isImageInput reports whether a request's input name is the image input,
// or would be if the model served one (so that the request gets an error
// saying the model takes no encoded images).
func (st *modelState) isImageInput(name string) bool {
	return name == st.imageInputName() && name != st.input.name
}

// DefaultMaxImages is Config.MaxImages' default.
const DefaultMaxImages = 256

// Images lets requests send encoded images through ImageInputName. The
// images go to the lane of the preprocessing's crop size.
type Images struct {
	// Preprocessor decodes and preprocesses the images on the host, into
	// request tensors. Nil: the lane's backend decodes them in its
	// pipeline (its batcher has Config.Encoded), with Spec.
	Preprocessor preprocess.Preprocessor
	// Spec is the backend decoders' preprocessing, when Preprocessor is
	// nil.
	Spec preprocess.Spec
}

// imageState is the image input of a served model.
type imageState struct {
	pre  preprocess.Preprocessor // nil: the backend decodes
	spec preprocess.Spec
	lane *batcher.Batcher
	meta tensorMeta
}

// setImages checks the model's image input and finds its lane.
func (st *modelState) setImages(m *Model) error {
	if m.Images == nil {
		return nil
	}
	if c, _, _, ok := m.Info.ImageInput(); !ok || c != 3 {
		return fmt.Errorf("server: the image input needs a model of RGB images [N, 3, H, W]; this one takes %s", m.Info.Input())
	}
	spec := m.Images.Spec
	if m.Images.Preprocessor != nil {
		spec = m.Images.Preprocessor.Spec()
	}
	lane := st.lanes[[2]int{spec.Height, spec.Width}]
	switch {
	case lane == nil:
		return fmt.Errorf("server: images are preprocessed to %dx%d, which is not a served size (%s)", spec.Height, spec.Width, st.sizes())
	case m.Images.Preprocessor == nil && !lane.Config().Encoded:
		return errors.New("server: Images has no Preprocessor, and the lane's backend decodes no images")
	}
	st.images = &imageState{pre: m.Images.Preprocessor, spec: spec, lane: lane,
		meta: tensorMeta{name: st.imageInputName(), datatype: "BYTES", shape: []int64{-1}}}
	return nil
}

// imageCount checks an image input's header and returns its image count.
func (s *Server) imageCount(st *modelState, datatype string, shape []int64) (int, error) {
	if st.images == nil {
		return 0, errorf(kindInvalid, "inputs[0].name %q: this model takes no encoded images (serve it with image decoding on); send the tensor input %q", st.imageInputName(), st.input.name)
	}
	if datatype != "BYTES" {
		return 0, errorf(kindInvalid, "inputs[0].datatype is %q; the %q input is BYTES (one encoded image per element)", datatype, st.imageInputName())
	}
	if len(shape) < 1 || len(shape) > 2 || len(shape) == 2 && shape[1] != 1 {
		return 0, errorf(kindInvalid, "inputs[0].shape %v: want [N] or [N, 1] for N encoded images", shape)
	}
	if shape[0] < 1 || shape[0] > int64(s.cfg.MaxImages) {
		return 0, errorf(kindInvalid, "inputs[0].shape %v: want 1 to %d images per request (--max_images)", shape, s.cfg.MaxImages)
	}
	return int(shape[0]), nil
}

// runImages runs a request's images through the image lane: decoded here
// into a request tensor, or handed encoded to the lane's backend, which
// decodes them in its pipeline. It leaves the output p asks for in logits
// (n x classes).
func (s *Server) runImages(ctx context.Context, st *modelState, images [][]byte, out outputSpec, logits []float32) (plan, batcher.Result, error) {
	var res batcher.Result
	spec := st.images.spec
	dt := st.model.Info.Input().DType
	n := len(images)
	p := plan{lane: st.images.lane, dtype: dt, n: n, bytes: n * 3 * spec.Height * spec.Width * dt.Size(), out: out}
	if err := p.lane.Admit(n); err != nil {
		return p, res, err // before spending decode time on it
	}
	if st.images.pre == nil {
		// The backend decodes on its copy stream.
		bin := batcher.Input{DType: dt, N: n, Encoded: images}
		p.ranking(&bin)
		res, err := p.lane.Infer(ctx, bin, logits)
		var ie *batcher.ImageError
		if errors.As(err, &ie) {
			msg := fmt.Sprintf("inputs[0] element %d: %v", ie.Index, ie.Err)
			if ie.Failed > 1 {
				msg += fmt.Sprintf(" (and %d more of the %d images failed)", ie.Failed-1, n)
			}
			return p, res, errorf(kindInvalid, "%s", msg)
		}
		if err != nil {
			return p, res, err
		}
		p.postprocess(logits, st.model.Info.OutputElems())
		return p, res, nil
	}
	// The decoded tensor is several times the encoded bytes the request
	// holds already: it takes its own share of the in-flight budget.
	held := lease{b: s.budget}
	defer held.release()
	if !held.ensure(int64(p.bytes)) {
		return p, res, errMemoryFull(int64(p.bytes))
	}
	buf := s.reqs.Get(p.bytes)
	defer s.reqs.Put(buf)
	if err := imageErrors(ctx, st.images.pre.Preprocess(ctx, images, dt, *buf)); err != nil {
		return p, res, err
	}
	bin := batcher.Input{DType: dt, N: n, Data: *buf, Pinned: s.reqs.Pinned(*buf)}
	p.ranking(&bin)
	res, err := p.lane.Infer(ctx, bin, logits)
	if err != nil {
		return p, res, err
	}
	p.postprocess(logits, st.model.Info.OutputElems())
	return p, res, nil
}

// imageErrors turns per-image failures into the request's error: the
// first failed element by index and why, and how many others failed.
func imageErrors(ctx context.Context, errs []error) error {
	first, failed := -1, 0
	for i, err := range errs {
		if err != nil {
			if first < 0 {
				first = i
			}
			failed++
		}
	}
	if first < 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	msg := fmt.Sprintf("inputs[0] element %d: %v", first, errs[first])
	if failed > 1 {
		msg += fmt.Sprintf(" (and %d more of the %d images failed)", failed-1, len(errs))
	}
	return errorf(kindInvalid, "%s", msg)
}

// inferImagesHTTP serves an HTTP request whose input is ImageInputName:
// base64 strings in the JSON, or BYTES elements in the binary section.
// On error nothing has been written.
func (s *Server) inferImagesHTTP(ctx context.Context, w http.ResponseWriter, body io.Reader, hdrLen int64, st *modelState, req *jsonInferRequest, outs []outputSpec, binaryOut bool) (batcher.Result, error) {
	var res batcher.Result
	in := req.Inputs[0]
	n, err := s.imageCount(st, in.Datatype, in.Shape)
	if err != nil {
		return res, err
	}
	out, err := st.planOutput(outs)
	if err != nil {
		return res, err
	}
	if len(outs) == 0 {
		out.binary = binaryOut
	}
	if _, shm, err := httpShmParams(in.Parameters, "inputs[0]"); err != nil || shm {
		return res, shmRefused(err, "inputs[0]")
	}
	if len(req.Outputs) == 1 {
		if _, shm, err := httpShmParams(req.Outputs[0].Parameters, "outputs[0]"); err != nil || shm {
			return res, shmRefused(err, "outputs[0]")
		}
	}
	binSize, hasBin, err := paramInt(in.Parameters, "binary_data_size", "inputs[0]")
	if err != nil {
		return res, err
	}
	hasJSON := len(in.Data) > 0 && string(in.Data) != "null"
	var images [][]byte
	switch {
	case hasJSON && hasBin:
		return res, errorf(kindInvalid, "inputs[0] has both data and parameters.binary_data_size; send one")
	case hasJSON:
		if images, err = parseJSONImages(in.Data, n, "inputs[0]"); err != nil {
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
		// Each image carries at least its 4-byte length; the body's own
		// limit bounds the rest as it is read.
		if binSize < int64(4*n) || binSize > s.cfg.MaxRequestBytes {
			return res, errorf(kindInvalid, "inputs[0].parameters.binary_data_size is %d; %d BYTES elements need 4 to %d bytes", binSize, n, s.cfg.MaxRequestBytes)
		}
		if err := st.images.lane.Admit(n); err != nil {
			return res, err // before reading megabytes we would drop
		}
		raw := s.bufs.get(int(binSize))
		defer s.bufs.put(raw)
		if got, err := io.ReadFull(body, *raw); err != nil {
			return res, readError(err, fmt.Sprintf("binary data truncated: inputs[0] declares %d bytes, the body holds %d after the JSON header", binSize, got))
		}
		if err := expectEOF(body, int(binSize)); err != nil {
			return res, err
		}
		if images, err = splitBytesElems(*raw, n, "inputs[0]"); err != nil {
			return res, err
		}
	default:
		return res, errorf(kindInvalid, "inputs[0] has no data: send \"data\" (base64 strings) or parameters.binary_data_size with the BYTES elements after the JSON header")
	}
	classes := st.model.Info.OutputElems()
	outBuf := s.bufs.get(n * classes * 4)
	defer s.bufs.put(outBuf)
	logits := tensor.BytesF32(*outBuf)
	p, res, err := s.runImages(ctx, st, images, out, logits)
	if err != nil {
		return res, err
	}
	s.writeInferResponse(w, st, req.ID, p, logits, res)
	http.NewResponseController(w).Flush() // no shared memory to release first
	return res, nil
}

// shmRefused is the error for shared memory parameters on an image
// request (or the error reading them).
func shmRefused(err error, field string) error {
	if err != nil {
		return err
	}
	return errorf(kindInvalid, "%s: shared memory is not supported with the image input; send the images in the request", field)
}

// inferImages serves a gRPC request whose input is ImageInputName: its
// elements in contents.bytes_contents, or length-prefixed in
// raw_input_contents[0].
func (g *grpcService) inferImages(ctx context.Context, req *kservepb.ModelInferRequest, st *modelState, outs []outputSpec) (*kservepb.ModelInferResponse, batcher.Result, error) {
	s := g.s
	var res batcher.Result
	in := req.Inputs[0]
	n, err := s.imageCount(st, in.GetDatatype(), in.GetShape())
	if err != nil {
		return nil, res, err
	}
	out, err := st.planOutput(outs)
	if err != nil {
		return nil, res, err
	}
	if _, shm, err := grpcShmParams(in.GetParameters(), "inputs[0]"); err != nil || shm {
		return nil, res, shmRefused(err, "inputs[0]")
	}
	if len(req.Outputs) == 1 {
		if _, shm, err := grpcShmParams(req.Outputs[0].GetParameters(), "outputs[0]"); err != nil || shm {
			return nil, res, shmRefused(err, "outputs[0]")
		}
	}
	var images [][]byte
	c := in.GetContents()
	switch {
	case len(req.RawInputContents) > 0:
		if len(req.RawInputContents) != 1 {
			return nil, res, errorf(kindInvalid, "raw_input_contents has %d entries; want one per input (1)", len(req.RawInputContents))
		}
		if c != nil {
			return nil, res, errorf(kindInvalid, "inputs[0].contents must be empty when raw_input_contents is used")
		}
		if images, err = splitBytesElems(req.RawInputContents[0], n, "raw_input_contents[0]"); err != nil {
			return nil, res, err
		}
	default:
		images = c.GetBytesContents()
		if len(images) != n {
			return nil, res, errorf(kindInvalid, "inputs[0].contents.bytes_contents has %d images; inputs[0].shape %v declares %d", len(images), in.GetShape(), n)
		}
	}
	classes := st.model.Info.OutputElems()
	// The response is marshalled after this returns: its bytes cannot
	// come from a pool.
	raw := make([]byte, n*classes*4)
	logits := tensor.BytesF32(raw)
	p, res, err := s.runImages(ctx, st, images, out, logits)
	if err != nil {
		return nil, res, err
	}
	o := &kservepb.ModelInferResponse_InferOutputTensor{Name: p.out.name, Datatype: "FP32", Shape: st.output.batched(n)}
	if k := p.out.classification; k > 0 {
		o.Datatype, o.Shape = "BYTES", []int64{int64(n), int64(k)}
		var b []byte
		p.classify(st.model.Labels, func(e []byte) { b = appendBytesElem(b, e) })
		raw = b
	}
	return &kservepb.ModelInferResponse{
		ModelName:         s.cfg.ModelName,
		ModelVersion:      s.cfg.ModelVersion,
		Id:                req.GetId(),
		Parameters:        resultParams(res),
		Outputs:           []*kservepb.ModelInferResponse_InferOutputTensor{o},
		RawOutputContents: [][]byte{raw},
	}, res, nil
}
