package preprocess

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"goinfer/internal/tensor"
)

// parityDir holds torchvision's preprocessing of the committed photos
// (tools/images/parity.py).
const parityDir = "../../testdata/parity/"

// parityFixture is parity.py's output: the photos, and the pixels
// torchvision's Resize(256) and CenterCrop(224) made of each (uint8 HWC).
type parityFixture struct {
	Files  []string `json:"files"`
	pixels *tensor.Tensor
}

func loadParity(t *testing.T) parityFixture {
	t.Helper()
	var f parityFixture
	if err := json.Unmarshal(readFile(t, parityDir+"parity.json"), &f); err != nil {
		t.Fatal(err)
	}
	var err error
	if f.pixels, err = tensor.LoadNPY(parityDir + "parity_pixels.npy"); err != nil {
		t.Fatal(err)
	}
	if f.pixels.DType != tensor.Uint8 || len(f.pixels.Shape) != 4 || f.pixels.Shape[0] != len(f.Files) {
		t.Fatalf("parity_pixels.npy is %s%v for %d files", f.pixels.DType, f.pixels.Shape, len(f.Files))
	}
	return f
}

// torchvisionTensor is ToTensor and Normalize of HWC pixels, in float32
// as torchvision computes them: CHW, (p/255 - mean)/std.
func torchvisionTensor(hwc []uint8, h, w int) []float32 {
	out := make([]float32, 3*h*w)
	for c := range 3 {
		for i := range h * w {
			out[c*h*w+i] = (float32(hwc[3*i+c])/255 - ImageNetMean[c]) / ImageNetStd[c]
		}
	}
	return out
}

// TestTorchvisionParity runs the CPU path (internal/jpeg, image/png, PIL's
// resize) on the committed photos and compares the network input with
// torchvision's. internal/jpeg rounds as libjpeg-turbo (PIL's decoder)
// does, so every pixel must match: max|got-ref|/max|ref| <= 1e-5 (the
// float32 normalisation alone) and 0 levels.
func TestTorchvisionParity(t *testing.T) {
	f := loadParity(t)
	pre, err := NewCPU(ImageNet(224, 224), CPUOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3 * 224 * 224
	for i, file := range f.Files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			img, err := os.ReadFile(filepath.Join("../..", file))
			if err != nil {
				t.Fatal(err)
			}
			got := make([]float32, n)
			if errs := pre.Preprocess(context.Background(), [][]byte{img}, tensor.Float32, tensor.F32Bytes(got)); errs[0] != nil {
				t.Fatal(errs[0])
			}
			want := torchvisionTensor(f.pixels.Data[i*n:(i+1)*n], 224, 224)
			var maxd, maxr float64
			levels, off := 0, 0
			for j := range got {
				maxd = max(maxd, math.Abs(float64(got[j]-want[j])))
				maxr = max(maxr, math.Abs(float64(want[j])))
			}
			hwc := f.pixels.Data[i*n : (i+1)*n]
			for j := range n {
				c, p := j/(224*224), j%(224*224)
				g := math.Round(float64((got[j]*ImageNetStd[c] + ImageNetMean[c]) * 255))
				d := int(math.Abs(g - float64(hwc[3*p+c])))
				levels = max(levels, d)
				if d != 0 {
					off++
				}
			}
			rel := maxd / maxr
			t.Logf("%s: max|got-ref|/max|ref| = %.3g; pixels: max %d levels, %d of %d values differ", file, rel, levels, off, n)
			if rel > 1e-5 || levels > 0 {
				t.Errorf("max|got-ref|/max|ref| = %.3g (want <= 1e-5), %d levels (want 0)", rel, levels)
			}
		})
	}
}
