package server_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"image/jpeg"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"goinfer/internal/kservepb"
	"goinfer/internal/preprocess"
	"goinfer/internal/server"
	"goinfer/internal/server/servertest"
	"goinfer/internal/tensor"
)

// testPhotos are committed photographs of different sizes and kinds: a
// JPEG, a PNG, a grayscale JPEG, a progressive one.
func testPhotos(t *testing.T) [][]byte {
	t.Helper()
	var out [][]byte
	for _, f := range []string{"../../testdata/golden/image.jpg", "../../testdata/golden/image.png",
		"../../testdata/photos/camera_gray.jpg", "../../testdata/photos/rocket_progressive.jpg"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// bytesElems lays images out as a BYTES tensor's binary data.
func bytesElems(images [][]byte) []byte {
	var b []byte
	for _, im := range images {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(im)))
		b = append(b, im...)
	}
	return b
}

func imageInput(n int, params map[string]any) map[string]any {
	in := map[string]any{"name": "image", "datatype": "BYTES", "shape": []int{n}}
	if params != nil {
		in["parameters"] = params
	}
	return in
}

// preprocessed is the float32 tensor the server should make of images.
func preprocessed(t *testing.T, size int, images [][]byte) []byte {
	t.Helper()
	pre, err := preprocess.NewCPU(preprocess.ImageNet(size, size), preprocess.CPUOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, len(images)*3*size*size*4)
	for i, err := range pre.Preprocess(context.Background(), images, tensor.Float32, dst) {
		if err != nil {
			t.Fatalf("image %d: %v", i, err)
		}
	}
	return dst
}

// binaryFloats is a response's binary FP32 output.
func binaryFloats(t *testing.T, r httpResult) []float32 {
	t.Helper()
	jr, bin := splitResponse(t, r)
	if o := jr.Outputs[0]; o.Datatype != "FP32" {
		t.Fatalf("output %+v", o)
	}
	return tensor.BytesF32(bytes.Clone(bin))
}

func binaryStrings(t *testing.T, r httpResult) []string {
	t.Helper()
	_, bin := splitResponse(t, r)
	var got []string
	for len(bin) >= 4 {
		n := binary.LittleEndian.Uint32(bin)
		got = append(got, string(bin[4:4+n]))
		bin = bin[4+n:]
	}
	return got
}

func sameFloats(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	w64 := make([]float64, len(want))
	for i, v := range want {
		w64[i] = float64(v)
	}
	if e := servertest.RelErr(got, w64); e > 1e-5 {
		t.Fatalf("%s: differs from the tensor input's by %.2g (relative)", what, e)
	}
}

// classes strips the values off classification strings: "index:label".
func classes(entries []string) string {
	var out []string
	for _, e := range entries {
		_, rest, _ := strings.Cut(e, ":")
		out = append(out, rest)
	}
	return strings.Join(out, " ")
}

// TestImagesEndToEnd sends the same photographs (mixed sizes, JPEG and
// PNG) through every protocol path of the image input and checks logits
// and top-k classes against the tensor input fed with the same
// preprocessing.
func TestImagesEndToEnd(t *testing.T) {
	for _, inBackend := range []bool{false, true} {
		t.Run(decodeMode(inBackend), func(t *testing.T) { testImagesEndToEnd(t, inBackend) })
	}
}

// decodeMode names where a test server decodes images.
func decodeMode(inBackend bool) string {
	if inBackend {
		return "decoded in the backend"
	}
	return "decoded in the server"
}

func testImagesEndToEnd(t *testing.T, inBackend bool) {
	labels := []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"}
	s := servertest.Start(t, servertest.Options{Images: true, Labels: labels, DecodeInBackend: inBackend})
	photos := testPhotos(t)
	n := len(photos)
	x := preprocessed(t, 16, photos)
	logitsOut := []any{map[string]any{"name": "logits", "parameters": map[string]any{"binary_data": true}}}
	top3 := []any{map[string]any{"name": "probabilities", "parameters": map[string]any{"classification": 3, "binary_data": true}}}

	want := binaryFloats(t, inferBinary(t, s, map[string]any{"inputs": []any{binaryInput("FP32", []int{n, 3, 16, 16}, len(x))}, "outputs": logitsOut}, x))
	wantTop := binaryStrings(t, inferBinary(t, s, map[string]any{"inputs": []any{binaryInput("FP32", []int{n, 3, 16, 16}, len(x))}, "outputs": top3}, x))
	if len(wantTop) != 3*n {
		t.Fatalf("%d classification strings from the tensor input", len(wantTop))
	}
	elems := bytesElems(photos)
	b64 := make([]string, n)
	for i, p := range photos {
		b64[i] = base64.StdEncoding.EncodeToString(p)
	}
	url := "http://" + s.HTTPAddr + "/v2/models/tiny/infer"

	t.Run("HTTP JSON base64", func(t *testing.T) {
		in := imageInput(n, nil)
		in["data"] = b64
		body, _ := json.Marshal(map[string]any{"inputs": []any{in}, "outputs": logitsOut})
		sameFloats(t, "logits", binaryFloats(t, do(t, "POST", url, body, nil)), want)
		body, _ = json.Marshal(map[string]any{"inputs": []any{in}, "outputs": top3})
		if got := binaryStrings(t, do(t, "POST", url, body, nil)); classes(got) != classes(wantTop) {
			t.Errorf("top 3 %q, want %q", got, wantTop)
		}
	})
	t.Run("HTTP JSON base64 shape [N,1] and JSON output", func(t *testing.T) {
		in := map[string]any{"name": "image", "datatype": "BYTES", "shape": []int{n, 1}}
		rows := make([][]string, n)
		for i, s := range b64 {
			rows[i] = []string{strings.TrimRight(s, "=")} // padding optional
		}
		in["data"] = rows
		body, _ := json.Marshal(map[string]any{"inputs": []any{in}, "outputs": []any{map[string]any{"name": "probabilities", "parameters": map[string]any{"classification": 3}}}})
		jr, _ := splitResponse(t, do(t, "POST", url, body, nil))
		var got []string
		if err := json.Unmarshal(jr.Outputs[0].Data, &got); err != nil {
			t.Fatal(err)
		}
		if o := jr.Outputs[0]; o.Name != "probabilities" || o.Datatype != "BYTES" || fmt.Sprint(o.Shape) != fmt.Sprintf("[%d 3]", n) {
			t.Errorf("output %+v", o)
		}
		if classes(got) != classes(wantTop) {
			t.Errorf("top 3 %q, want %q", got, wantTop)
		}
	})
	t.Run("HTTP binary", func(t *testing.T) {
		in := imageInput(n, map[string]any{"binary_data_size": len(elems)})
		sameFloats(t, "logits", binaryFloats(t, inferBinary(t, s, map[string]any{"inputs": []any{in}, "outputs": logitsOut}, elems)), want)
		if got := binaryStrings(t, inferBinary(t, s, map[string]any{"inputs": []any{in}, "outputs": top3}, elems)); classes(got) != classes(wantTop) {
			t.Errorf("top 3 %q, want %q", got, wantTop)
		}
	})
	c := kservepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.GRPCAddr))
	grpcReq := func(raw bool, out *kservepb.ModelInferRequest_InferRequestedOutputTensor) *kservepb.ModelInferRequest {
		r := &kservepb.ModelInferRequest{ModelName: "tiny", Inputs: []*kservepb.ModelInferRequest_InferInputTensor{{
			Name: "image", Datatype: "BYTES", Shape: []int64{int64(n)}}}}
		if raw {
			r.RawInputContents = [][]byte{elems}
		} else {
			r.Inputs[0].Contents = &kservepb.InferTensorContents{BytesContents: photos}
		}
		if out != nil {
			r.Outputs = []*kservepb.ModelInferRequest_InferRequestedOutputTensor{out}
		}
		return r
	}
	for _, raw := range []bool{false, true} {
		name := "gRPC bytes_contents"
		if raw {
			name = "gRPC raw_input_contents"
		}
		t.Run(name, func(t *testing.T) {
			resp, err := c.ModelInfer(ctxT(t), grpcReq(raw, nil))
			if err != nil {
				t.Fatal(err)
			}
			sameFloats(t, "logits", rawLogits(t, resp), want)
			resp, err = c.ModelInfer(ctxT(t), grpcReq(raw, &kservepb.ModelInferRequest_InferRequestedOutputTensor{Name: "probabilities",
				Parameters: map[string]*kservepb.InferParameter{"classification": {ParameterChoice: &kservepb.InferParameter_Int64Param{Int64Param: 3}}}}))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for b := resp.RawOutputContents[0]; len(b) >= 4; {
				l := binary.LittleEndian.Uint32(b)
				got = append(got, string(b[4:4+l]))
				b = b[4+l:]
			}
			if classes(got) != classes(wantTop) {
				t.Errorf("top 3 %q, want %q", got, wantTop)
			}
		})
	}
	t.Run("metadata", func(t *testing.T) {
		r := do(t, "GET", "http://"+s.HTTPAddr+"/v2/models/tiny", nil, nil)
		if !strings.Contains(string(r.body), `{"name":"image","datatype":"BYTES","shape":[-1]}`) {
			t.Errorf("metadata %s lacks the image input", r.body)
		}
		md, err := c.ModelMetadata(ctxT(t), &kservepb.ModelMetadataRequest{Name: "tiny"})
		if err != nil {
			t.Fatal(err)
		}
		if len(md.Inputs) != 2 || md.Inputs[1].Name != "image" || md.Inputs[1].Datatype != "BYTES" {
			t.Errorf("gRPC metadata inputs %v", md.Inputs)
		}
	})
}

// bomb is a valid small JPEG whose header claims w x h pixels.
func bomb(t *testing.T, w, h int) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, image.NewGray(image.Rect(0, 0, 8, 8)), nil); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	for i := 0; i+9 < len(b); i++ {
		if b[i] == 0xff && b[i+1] == 0xc0 {
			binary.BigEndian.PutUint16(b[i+5:], uint16(h))
			binary.BigEndian.PutUint16(b[i+7:], uint16(w))
			return b
		}
	}
	t.Fatal("no SOF0 marker")
	return nil
}

// TestImagesErrors checks that bad images and bad image requests are
// refused with a status and a message that names the problem, over HTTP
// and gRPC, and that the server keeps serving.
func TestImagesErrors(t *testing.T) {
	for _, inBackend := range []bool{false, true} {
		t.Run(decodeMode(inBackend), func(t *testing.T) { testImagesErrors(t, inBackend) })
	}
}

func testImagesErrors(t *testing.T, inBackend bool) {
	s := servertest.Start(t, servertest.Options{Images: true, MaxImagePixels: 4000 * 4000, DecodeInBackend: inBackend,
		Server: func(c *server.Config) { c.MaxRequestBytes = 1 << 20; c.MaxImages = 8 }})
	photos := testPhotos(t)
	good := photos[0]
	tests := []struct {
		name   string
		images [][]byte
		shape  []int
		size   int // binary_data_size; 0: that of the elements
		status int
		code   codes.Code
		msg    string
	}{
		{"garbage", [][]byte{good, []byte("not an image")}, nil, 0, 400, codes.InvalidArgument, "element 1: unsupported image format"},
		{"truncated", [][]byte{good[:len(good)/3]}, nil, 0, 400, codes.InvalidArgument, "element 0: corrupt JPEG"},
		{"empty element", [][]byte{good, good, {}}, nil, 0, 400, codes.InvalidArgument, "element 2: the image is empty"},
		{"decompression bomb", [][]byte{bomb(t, 16000, 16000)}, nil, 0, 400, codes.InvalidArgument, "16000x16000 pixels"},
		{"several bad", [][]byte{{}, []byte("x"), good}, nil, 0, 400, codes.InvalidArgument, "element 0: the image is empty (0 bytes) (and 1 more of the 3 images failed)"},
		{"too many images", [][]byte{good, good, good, good, good, good, good, good, good}, nil, 0, 400, codes.InvalidArgument, "want 1 to 8 images"},
		{"shape [N,2]", [][]byte{good, good}, []int{1, 2}, 0, 400, codes.InvalidArgument, "want [N] or [N, 1]"},
		{"count mismatch", [][]byte{good, good}, []int{3}, 0, 400, codes.InvalidArgument, "declares 3"},
	}
	url := "http://" + s.HTTPAddr + "/v2/models/tiny/infer"
	c := kservepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.GRPCAddr))
	for _, tt := range tests {
		shape := tt.shape
		if shape == nil {
			shape = []int{len(tt.images)}
		}
		elems := bytesElems(tt.images)
		t.Run("HTTP "+tt.name, func(t *testing.T) {
			in := imageInput(0, map[string]any{"binary_data_size": len(elems)})
			in["shape"] = shape
			r := inferBinary(t, s, map[string]any{"inputs": []any{in}}, elems)
			if r.status != tt.status || !strings.Contains(string(r.body), tt.msg) {
				t.Errorf("status %d: %s; want %d saying %q", r.status, r.body, tt.status, tt.msg)
			}
		})
		t.Run("gRPC "+tt.name, func(t *testing.T) {
			sh := make([]int64, len(shape))
			for i, d := range shape {
				sh[i] = int64(d)
			}
			_, err := c.ModelInfer(ctxT(t), &kservepb.ModelInferRequest{ModelName: "tiny", Inputs: []*kservepb.ModelInferRequest_InferInputTensor{{
				Name: "image", Datatype: "BYTES", Shape: sh, Contents: &kservepb.InferTensorContents{BytesContents: tt.images}}}})
			if st := status.Convert(err); st.Code() != tt.code || !strings.Contains(st.Message(), strings.TrimPrefix(tt.msg, "count ")) {
				t.Errorf("%v; want %v saying %q", err, tt.code, tt.msg)
			}
		})
	}
	others := []struct {
		name   string
		body   []byte
		hdr    map[string]string
		status int
		msg    string
	}{
		{"wrong datatype", mustJSON(map[string]any{"inputs": []any{map[string]any{"name": "image", "datatype": "UINT8", "shape": []int{1}, "data": []int{1}}}}), nil, 400, `the \"image\" input is BYTES`},
		{"no data", mustJSON(map[string]any{"inputs": []any{imageInput(1, nil)}}), nil, 400, "has no data"},
		{"bad base64", mustJSON(map[string]any{"inputs": []any{map[string]any{"name": "image", "datatype": "BYTES", "shape": []int{1}, "data": []string{"%%%"}}}}), nil, 400, "data[0] is not base64"},
		{"truncated element", append(mustJSON(map[string]any{"inputs": []any{imageInput(1, map[string]any{"binary_data_size": 20})}}), 0x40, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16), nil, 400, "says 64 bytes, but only 16 follow"},
		{"shared memory", mustJSON(map[string]any{"inputs": []any{imageInput(1, map[string]any{"shared_memory_region": "r", "shared_memory_byte_size": 10})}}), nil, 400, "shared memory is not supported"},
		{"over the body limit", mustJSON(map[string]any{"inputs": []any{map[string]any{"name": "image", "datatype": "BYTES", "shape": []int{1}, "data": []string{base64.StdEncoding.EncodeToString(make([]byte, 1<<20))}}}}), nil, 413, "over the limit"},
	}
	for _, tt := range others {
		t.Run("HTTP "+tt.name, func(t *testing.T) {
			hdr := tt.hdr
			if strings.Contains(tt.name, "truncated") {
				hdr = map[string]string{server.HeaderContentLength: fmt.Sprint(len(tt.body) - 20)}
			}
			r := do(t, "POST", url, tt.body, hdr)
			if r.status != tt.status || !strings.Contains(string(r.body), tt.msg) {
				t.Errorf("status %d: %s; want %d saying %q", r.status, r.body, tt.status, tt.msg)
			}
		})
	}
	t.Run("gRPC raw element past the end", func(t *testing.T) {
		_, err := c.ModelInfer(ctxT(t), &kservepb.ModelInferRequest{ModelName: "tiny", Inputs: []*kservepb.ModelInferRequest_InferInputTensor{{
			Name: "image", Datatype: "BYTES", Shape: []int64{1}}}, RawInputContents: [][]byte{{9, 0, 0, 0, 1}}})
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "raw_input_contents[0] element 0") {
			t.Errorf("%v", err)
		}
	})
	// Still serving after all that.
	in := imageInput(1, map[string]any{"binary_data_size": len(good) + 4})
	if r := inferBinary(t, s, map[string]any{"inputs": []any{in}}, bytesElems([][]byte{good})); r.status != 200 {
		t.Errorf("a good image after the bad ones: %d %s", r.status, r.body)
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// TestImagesNotServed checks a model without the image input: metadata
// does not list it, and requests for it are refused clearly.
func TestImagesNotServed(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	r := inferBinary(t, s, map[string]any{"inputs": []any{imageInput(1, map[string]any{"binary_data_size": 5})}}, []byte{1, 0, 0, 0, 1})
	if r.status != 400 || !strings.Contains(string(r.body), "takes no encoded images") {
		t.Errorf("status %d: %s", r.status, r.body)
	}
	if r := do(t, "GET", "http://"+s.HTTPAddr+"/v2/models/tiny", nil, nil); strings.Contains(string(r.body), "BYTES") {
		t.Errorf("metadata lists an image input: %s", r.body)
	}
}

// TestImagesMemoryBudget checks that the decoded tensor of an image
// request counts against --max_inflight_bytes: a request whose images
// would decode to more than the budget can hold is refused with 503, not
// decoded.
func TestImagesMemoryBudget(t *testing.T) {
	// 64 images of 3x16x16 FP32 decode to 192 KiB; the budget is 160 KiB.
	s := servertest.Start(t, servertest.Options{Images: true, MaxQueue: 64, Server: func(c *server.Config) {
		c.MaxRequestBytes, c.MaxInflightBytes = 120<<10, 160<<10
	}})
	small := bomb(t, 8, 8) // a valid 8x8 JPEG
	imgs := make([][]byte, 64)
	for i := range imgs {
		imgs[i] = small
	}
	elems := bytesElems(imgs)
	r := inferBinary(t, s, map[string]any{"inputs": []any{imageInput(len(imgs), map[string]any{"binary_data_size": len(elems)})}}, elems)
	if r.status != 503 || !strings.Contains(string(r.body), "max_inflight_bytes") {
		t.Errorf("status %d: %s; want 503 naming --max_inflight_bytes", r.status, r.body)
	}
	r = inferBinary(t, s, map[string]any{"inputs": []any{imageInput(2, map[string]any{"binary_data_size": 2 * (len(small) + 4)})}}, bytesElems(imgs[:2]))
	if r.status != 200 {
		t.Errorf("two small images: %d %s", r.status, r.body)
	}
}

// TestImagesMixedWithTensors sends image and tensor requests at once to a
// server whose backend decodes the images, so that the batcher has both
// kinds queued together: every request must get its own logits (a batch
// mixing the kinds would fail or answer garbage).
func TestImagesMixedWithTensors(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Images: true, DecodeInBackend: true, MaxBatch: 4, MaxDelay: 20 * time.Millisecond, MaxQueue: 64})
	photos := testPhotos(t)
	x := preprocessed(t, 16, photos)
	want := binaryFloats(t, inferBinary(t, s, map[string]any{"inputs": []any{binaryInput("FP32", []int{len(photos), 3, 16, 16}, len(x))},
		"outputs": []any{map[string]any{"name": "logits", "parameters": map[string]any{"binary_data": true}}}}, x))
	per := 3 * 16 * 16 * 4
	var wg sync.WaitGroup
	for round := range 3 {
		for i := range photos {
			wg.Go(func() {
				out := []any{map[string]any{"name": "logits", "parameters": map[string]any{"binary_data": true}}}
				var r httpResult
				if (i+round)%2 == 0 {
					elems := bytesElems(photos[i : i+1])
					r = inferBinary(t, s, map[string]any{"inputs": []any{imageInput(1, map[string]any{"binary_data_size": len(elems)})}, "outputs": out}, elems)
				} else {
					r = inferBinary(t, s, map[string]any{"inputs": []any{binaryInput("FP32", []int{1, 3, 16, 16}, per)}, "outputs": out}, x[i*per:(i+1)*per])
				}
				if r.status != 200 {
					t.Errorf("image %d: %d %s", i, r.status, r.body)
					return
				}
				_, bin := splitResponse(t, r)
				got := tensor.BytesF32(bytes.Clone(bin))
				for c, v := range got {
					if d := v - want[i*10+c]; d > 1e-4 || d < -1e-4 {
						t.Errorf("image %d (round %d): logit %d is %v, want %v", i, round, c, v, want[i*10+c])
						return
					}
				}
			})
		}
	}
	wg.Wait()
}

// TestImagesSplitAcrossBatches sends more images than a batch holds to a
// server whose backend decodes them, with bad images in different
// batches: the error names the first bad image by its index in the
// request and counts the others.
func TestImagesSplitAcrossBatches(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Images: true, DecodeInBackend: true, MaxBatch: 4})
	good := testPhotos(t)[0]
	for _, tc := range []struct {
		bad  []int
		want string
	}{
		{[]int{5}, "inputs[0] element 5: unsupported image format"},
		{[]int{5, 1}, "inputs[0] element 1: unsupported image format: want PNG or JPEG (and 1 more of the 7 images failed)"},
		{nil, ""},
	} {
		imgs := make([][]byte, 7)
		for i := range imgs {
			imgs[i] = good
		}
		for _, i := range tc.bad {
			imgs[i] = []byte("GIF89a")
		}
		elems := bytesElems(imgs)
		r := inferBinary(t, s, map[string]any{"inputs": []any{imageInput(len(imgs), map[string]any{"binary_data_size": len(elems)})}}, elems)
		switch {
		case tc.want == "" && r.status != 200:
			t.Errorf("7 good images: %d %s", r.status, r.body)
		case tc.want != "" && (r.status != 400 || !strings.Contains(string(r.body), tc.want)):
			t.Errorf("bad images %v: %d %s; want 400 saying %q", tc.bad, r.status, r.body, tc.want)
		}
	}
}
