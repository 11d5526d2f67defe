package preprocess

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"goinfer/internal/imageproc"
	"goinfer/internal/tensor"
)

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BombJPEG is a valid small JPEG whose frame header claims w x h pixels.
func bombJPEG(t testing.TB, w, h int) []byte {
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

func TestNewCPUSpecs(t *testing.T) {
	nearest := ImageNet(224, 224)
	nearest.Interpolation = Nearest
	if _, err := NewCPU(nearest, CPUOptions{}); err == nil || !strings.Contains(err.Error(), "nearest") {
		t.Errorf("nearest: %v", err)
	}
	if _, err := NewCPU(Spec{Resize: 8, Height: 8, Width: 8, Interpolation: Bilinear, Std: [3]float32{1, 0, 1}}, CPUOptions{}); err == nil {
		t.Error("a spec with a zero std was accepted")
	}
}

// TestMatchesImageproc checks each dtype against predict's path
// (imageproc.Preprocess, Normalize) on the committed photos, PNG included.
func TestMatchesImageproc(t *testing.T) {
	files := []string{"../../testdata/golden/image.jpg", "../../testdata/golden/image.png",
		"../../testdata/photos/camera_gray.jpg", "../../testdata/photos/coffee_alpha.png", "../../testdata/photos/rocket_progressive.jpg",
		"../../testdata/photos/chelsea_cmyk.jpg"}
	var images [][]byte
	var wantU8 [][]uint8
	for _, f := range files {
		b := readFile(t, f)
		images = append(images, b)
		m, err := imageproc.DecodeBytes(b, imageproc.MaxPixels)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		wantU8 = append(wantU8, imageproc.Preprocess(m))
	}
	p, err := NewCPU(ImageNet(224, 224), CPUOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const elems = 3 * 224 * 224
	for _, dt := range []tensor.DType{tensor.Float32, tensor.Float16, tensor.Uint8} {
		t.Run(dt.String(), func(t *testing.T) {
			dst := make([]byte, len(images)*elems*dt.Size())
			for i, err := range p.Preprocess(context.Background(), images, dt, dst) {
				if err != nil {
					t.Fatalf("image %d: %v", i, err)
				}
			}
			for i, u8 := range wantU8 {
				got := dst[i*elems*dt.Size() : (i+1)*elems*dt.Size()]
				var want []byte
				switch dt {
				case tensor.Uint8:
					want = u8
				case tensor.Float32:
					want = tensor.F32Bytes(imageproc.Normalize(u8))
				case tensor.Float16:
					for _, v := range imageproc.Normalize(u8) {
						want = binary.LittleEndian.AppendUint16(want, tensor.Float32ToF16(v))
					}
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s differs from imageproc's preprocessing", files[i])
				}
			}
		})
	}
}

// TestCropAfterResize checks the crop of an image resized down and
// up before cropping.
func TestCropAfterResize(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 40, 30))
	for y := range 30 {
		for x := range 40 {
			img.Set(x, y, color.RGBA{uint8(6 * x), uint8(8 * y), 77, 255})
		}
	}
	var buf bytes.Buffer
	png.Encode(&buf, img)
	for _, resize := range []int{20, 36} {
		p, err := NewCPU(Spec{Resize: resize, Height: 12, Width: 12, Interpolation: Bilinear, Std: [3]float32{1, 1, 1}}, CPUOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dst := make([]byte, 3*12*12)
		if errs := p.Preprocess(context.Background(), [][]byte{buf.Bytes()}, tensor.Uint8, dst); errs[0] != nil {
			t.Fatal(errs[0])
		}
		m, _ := imageproc.DecodeBytes(buf.Bytes(), 1<<20)
		if resize > 0 {
			m = m.Resize(imageproc.ResizedSize(40, 30, resize))
		}
		if want := m.CenterCrop(12, 12).CHW(); !bytes.Equal(dst, want) {
			t.Errorf("resize %d: the 12x12 crop differs from imageproc's", resize)
		}
	}
}

func TestErrors(t *testing.T) {
	good := readFile(t, "../../testdata/golden/image.jpg")
	p, err := NewCPU(ImageNet(16, 16), CPUOptions{MaxPixels: 4000 * 4000})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		img  []byte
		want string
	}{
		{"empty", nil, "empty"},
		{"garbage", []byte("hello, world"), "unsupported image format"},
		{"truncated JPEG", good[:len(good)/2], "corrupt JPEG"},
		{"truncated PNG header", []byte("\x89PNG\r\n\x1a\n\x00"), "corrupt PNG"},
		{"16000x16000 JPEG header", bombJPEG(t, 16000, 16000), "more pixels than allowed"},
		{"zero width", bombJPEG(t, 0, 16), "JPEG"},
	}
	images := [][]byte{good}
	for _, tt := range tests {
		images = append(images, tt.img)
	}
	dst := make([]byte, len(images)*3*16*16*4)
	errs := p.Preprocess(context.Background(), images, tensor.Float32, dst)
	if errs[0] != nil {
		t.Errorf("the good image failed: %v", errs[0])
	}
	for i, tt := range tests {
		if err := errs[i+1]; err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want one saying %q", tt.name, err, tt.want)
		}
	}
	if !errors.Is(errs[5], ErrTooManyPixels) {
		t.Errorf("the bomb's error %v is not ErrTooManyPixels", errs[5])
	}
	// The good image's slot is written even though others failed.
	if slices.Equal(dst[:3*16*16*4], make([]byte, 3*16*16*4)) {
		t.Error("the good image's slot is empty")
	}
}

func TestBadCalls(t *testing.T) {
	p, _ := NewCPU(ImageNet(16, 16), CPUOptions{})
	img := readFile(t, "../../testdata/golden/image.jpg")
	if errs := p.Preprocess(context.Background(), [][]byte{img}, tensor.Int32, make([]byte, 3*16*16*4)); errs[0] == nil || !strings.Contains(errs[0].Error(), "int32") {
		t.Errorf("int32: %v", errs[0])
	}
	if errs := p.Preprocess(context.Background(), [][]byte{img, img}, tensor.Float32, make([]byte, 3*16*16*4)); errs[1] == nil || !strings.Contains(errs[1].Error(), "room") {
		t.Errorf("short dst: %v", errs[1])
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	one, _ := NewCPU(ImageNet(16, 16), CPUOptions{Workers: 1})
	one.sem <- struct{}{} // every worker busy: the call must give up
	errs := one.Preprocess(ctx, [][]byte{img, img}, tensor.Float32, make([]byte, 2*3*16*16*4))
	for i, err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("image %d: %v, want context.Canceled", i, err)
		}
	}
}

// TestConcurrent runs calls at once on a preprocessor with fewer workers
// than images (run with -race): every result must match the sequential one.
func TestConcurrent(t *testing.T) {
	img := readFile(t, "../../testdata/golden/image.png")
	p, _ := NewCPU(ImageNet(32, 32), CPUOptions{Workers: 2})
	want := make([]byte, 3*32*32*4)
	if errs := p.Preprocess(context.Background(), [][]byte{img}, tensor.Float32, want); errs[0] != nil {
		t.Fatal(errs[0])
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			dst := make([]byte, 3*len(want))
			for i, err := range p.Preprocess(context.Background(), [][]byte{img, img, img}, tensor.Float32, dst) {
				if err != nil || !bytes.Equal(dst[i*len(want):(i+1)*len(want)], want) {
					t.Errorf("image %d: %v or different bytes", i, err)
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkCPU decodes and preprocesses the committed JPEG photographs to
// ImageNet's 224x224 float32 input, a batch of them per call, on every
// core (b.N counts images).
func BenchmarkCPU(b *testing.B) {
	var images [][]byte
	for _, f := range []string{"astronaut.jpg", "coffee.jpg", "chelsea_444.jpg", "rocket_progressive.jpg"} {
		images = append(images, readFile(b, "../../testdata/photos/"+f))
	}
	p, err := NewCPU(ImageNet(224, 224), CPUOptions{})
	if err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, len(images)*3*224*224*4)
	b.ResetTimer()
	for i := 0; i < b.N; i += len(images) {
		for _, err := range p.Preprocess(context.Background(), images, tensor.Float32, dst) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// TestBicubic checks that a bicubic spec (EfficientNet's, ViT SWAG's)
// resizes with PIL's bicubic filter: the bytes of imageproc's
// ResizeWith(Bicubic) and CenterCrop, not the bilinear ones.
func TestBicubic(t *testing.T) {
	b := readFile(t, "../../testdata/golden/image.png")
	spec := ImageNet(64, 64)
	spec.Interpolation = Bicubic
	p, err := NewCPU(spec, CPUOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := imageproc.DecodeBytes(b, imageproc.MaxPixels)
	if err != nil {
		t.Fatal(err)
	}
	w, h := imageproc.ResizedSize(m.W, m.H, spec.Resize)
	want := m.ResizeWith(w, h, imageproc.Bicubic).CenterCrop(64, 64).CHW()
	bilinear := m.Resize(w, h).CenterCrop(64, 64).CHW()
	dst := make([]byte, 3*64*64)
	if err := p.Preprocess(context.Background(), [][]byte{b}, tensor.Uint8, dst)[0]; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, want) || bytes.Equal(dst, bilinear) {
		t.Error("a bicubic spec is not resized with the bicubic filter")
	}
}
