package imagegpu

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	cu "goinfer/internal/cuda"
	"goinfer/internal/imageproc"
	"goinfer/internal/tensor"
)

// gpuResizeCases add large downscales (wide filters) to the simulated
// cases.
var gpuResizeCases = append(resizeCases[:len(resizeCases):len(resizeCases)], []struct {
	w, h int
	spec Spec
}{
	{1999, 1003, ImageNet},
	{257, 1000, ImageNet},
	{4000, 3000, ImageNet},
	{640, 427, Spec{Resize: 232, CropW: 224, CropH: 224, Mean: [3]float32{0.5, 0.5, 0.5}, Std: [3]float32{0.5, 0.5, 0.5}, Bicubic: true}},
}...)

// runRaw is run returning the output's bytes, of either dtype.
func runRaw(t testing.TB, p *Preprocessor, libs *cu.Libs, images [][]byte, launch func(dst cu.DevPtr, s cu.Stream)) []byte {
	t.Helper()
	if launch == nil {
		launch = func(dst cu.DevPtr, s cu.Stream) {
			errs, err := p.Run(images, dst, s)
			if err != nil {
				t.Fatal(err)
			}
			for i, e := range errs {
				if e != nil {
					t.Fatalf("image %d: %v", i, e)
				}
			}
		}
	}
	return launchAndRead(t, libs, len(images)*3*p.opts.Spec.CropW*p.opts.Spec.CropH*p.opts.Out.Size(), launch)
}

// TestResizeBitExactOnGPU runs images of every resize case (host-decoded
// PNGs, so that only the kernel is tested) through the preprocess kernel,
// one batch per spec, and wants the CPU path's float32 and float16 input
// bit for bit.
func TestResizeBitExactOnGPU(t *testing.T) {
	libs := gpu(t)
	specs := map[Spec][][]byte{}
	var order []Spec
	for ci, tc := range gpuResizeCases {
		if _, ok := specs[tc.spec]; !ok {
			order = append(order, tc.spec)
		}
		specs[tc.spec] = append(specs[tc.spec], encodePNG(t, noise(tc.w, tc.h, uint64(ci))))
	}
	for _, spec := range order {
		images := specs[spec]
		for _, dt := range []tensor.DType{tensor.Float32, tensor.Float16} {
			t.Run(fmt.Sprintf("%d-%dx%d-bicubic%v-%s", spec.Resize, spec.CropW, spec.CropH, spec.Bicubic, dt), func(t *testing.T) {
				p, err := New(libs, Options{MaxBatch: len(images), Spec: spec, Out: dt})
				if err != nil {
					t.Fatal(err)
				}
				defer p.Close()
				got := runRaw(t, p, libs, images, nil)
				var want []byte
				if dt == tensor.Float32 {
					want = tensor.F32Bytes(cpuPath(t, spec, images))
				} else {
					want = cpuPathBytes(t, spec, images, tensor.Float16)
				}
				if !bytes.Equal(got, want) {
					n := 0
					for i := range got {
						if got[i] != want[i] {
							n++
						}
					}
					t.Errorf("%d of %d output bytes differ from the CPU path", n, len(want))
				}
			})
		}
	}
}

// TestYCbCrBitExactOnGPU puts YCbCr planes of every subsampling where
// nvJPEG writes its planar output and runs the batch's kernels: the input
// must be the CPU path's for imageproc's conversion of the same planes.
func TestYCbCrBitExactOnGPU(t *testing.T) {
	libs := gpu(t)
	p, err := New(libs, Options{MaxBatch: len(yccCases), Spec: ImageNet, Out: tensor.Float32})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var plans []plan
	var bufs [][]byte
	var pngs [][]byte
	var at int64
	for ci, tc := range yccCases {
		m := yccImage(tc.w, tc.h, tc.ratio, uint64(ci))
		pl, buf := yccPlan(m, tc.mode, at)
		at += int64(len(buf)+255) &^ 255
		plans, bufs = append(plans, pl), append(bufs, buf)
		pngs = append(pngs, encodePNG(t, imageproc.FromImage(m)))
	}
	got := runRaw(t, p, libs, pngs, func(dst cu.DevPtr, s cu.Stream) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := p.rt.SetDevice(p.opts.Device); err != nil {
			t.Fatal(err)
		}
		if err := p.growScratch(at); err != nil {
			t.Fatal(err)
		}
		for i, pl := range plans {
			if err := p.rt.MemcpyHtoD(p.scratch+cu.DevPtr(pl.off), bufs[i]); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.launch(plans, dst, s); err != nil {
			t.Fatal(err)
		}
	})
	want := tensor.F32Bytes(cpuPath(t, ImageNet, pngs))
	per := 3 * 224 * 224 * 4
	for i, tc := range yccCases {
		if !bytes.Equal(got[i*per:(i+1)*per], want[i*per:(i+1)*per]) {
			t.Errorf("%dx%d %v: the GPU conversion differs from imageproc's", tc.w, tc.h, tc.ratio)
		}
	}
}

// levels compares two preprocessed float32 batches in 8-bit levels of
// the first channel's std: the largest difference and the share of
// values that differ at all.
func levels(a, b []float32) (maxd float64, frac float64) {
	n := 0
	for i := range a {
		d := math.Abs(float64(a[i] - b[i]))
		maxd = max(maxd, d)
		if d > 1e-6 {
			n++
		}
	}
	return maxd * 255 * 0.229, float64(n) / float64(len(a))
}

// TestNvJPEGDecodes decodes the JPEG photographs (and -images DIR) with
// each nvJPEG backend, once to planar YCbCr converted by the kernel as
// libjpeg does and once to RGB converted by nvJPEG, and reports each
// against the CPU path (Go's IDCT, libjpeg's upsampling and conversion).
// With GOINFER_IDCT_DUMP=DIR it writes nvJPEG's luma planes there
// (NAME.WxH.BACKEND.y) for tools/images/idct_diff.py to compare with
// libjpeg's.
func TestNvJPEGDecodes(t *testing.T) {
	libs := gpu(t)
	named := map[string][]byte{}
	for name, b := range readPhotos(t) {
		if h, err := parseJPEGHeader(b); err == nil && h.components != 4 {
			named[name] = b
		}
	}
	if *benchImages != "" {
		files, _ := filepath.Glob(filepath.Join(*benchImages, "*.jpg"))
		if len(files) > 16 {
			files = files[:16]
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			named[filepath.Base(f)] = b
		}
	}
	var names []string
	for n := range named {
		names = append(names, n)
	}
	sort.Strings(names)
	images := make([][]byte, len(names))
	want := make([]float32, 0, len(names)*3*224*224)
	for i, n := range names {
		images[i] = named[n]
		want = append(want, cpuReference(t, images[i])...)
	}
	per := 3 * 224 * 224
	for _, hw := range []bool{true, false} {
		for _, noYCC := range []bool{false, true} {
			p, err := New(libs, Options{MaxBatch: len(images), Spec: ImageNet, Out: tensor.Float32, NoHardware: !hw, NoYCbCr: noYCC})
			if err != nil {
				t.Fatal(err)
			}
			backend := strings.Join(p.Backends(), "+")
			if hw && p.Backends()[0] != "hardware" {
				p.Close()
				t.Logf("no hardware JPEG decoder on this GPU")
				break
			}
			got, errs := run(t, p, libs, images)
			for i, n := range names {
				if errs[i] != nil {
					t.Errorf("%s %s: %v", backend, n, errs[i])
					continue
				}
				maxd, frac := levels(got[i*per:(i+1)*per], want[i*per:(i+1)*per])
				t.Logf("%-22s %-26s ycbcr=%-5v vs CPU path: max %.2f levels, %.1f%% of values differ", n, backend, !noYCC, maxd, 100*frac)
			}
			if !noYCC {
				dumpLuma(t, p, libs, names, images, backend)
			}
			p.Close()
		}
	}
}

// dumpLuma decodes each image to planar YCbCr with the Preprocessor's
// first backend that takes it, compares the luma plane with Go's
// decoder's and writes it to GOINFER_IDCT_DUMP.
func dumpLuma(t *testing.T, p *Preprocessor, libs *cu.Libs, names []string, images [][]byte, backend string) {
	dir := os.Getenv("GOINFER_IDCT_DUMP")
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := p.rt.SetDevice(p.opts.Device); err != nil {
		t.Fatal(err)
	}
	rt := libs.Runtime
	for i, img := range images {
		h, err := parseJPEGHeader(img)
		if err != nil || h.yccMode() == yccNone && h.components != 1 {
			continue
		}
		d := &p.dec[1]
		if p.dec[0].ok && h.hardwareOK() {
			d = &p.dec[0]
		}
		w, hh := h.width, h.height
		cw, ch := chromaSize(w, hh, h.yccMode())
		pitch, cpitch := (w+3)&^3, (cw+3)&^3
		size := int64(pitch*hh + 2*cpitch*ch)
		buf, err := rt.Malloc(size)
		if err != nil {
			t.Fatal(err)
		}
		var im cu.JPEGImage
		cb := buf + cu.DevPtr(pitch*hh)
		im.Channel = [cu.JPEGMaxComponent]cu.DevPtr{buf, cb, cb + cu.DevPtr(cpitch*ch)}
		im.Pitch = [cu.JPEGMaxComponent]uint64{uint64(pitch), uint64(cpitch), uint64(cpitch)}
		err = p.jpg.DecodeBatched(d.h, d.st, [][]byte{img}, []cu.JPEGImage{im}, cu.JPEGOutputYUV, 0)
		host := make([]byte, size)
		if err == nil {
			err = rt.DeviceSynchronize()
		}
		if err == nil {
			err = rt.MemcpyDtoH(host, buf)
		}
		rt.Free(buf)
		if err != nil {
			t.Logf("%s %s: planar YCbCr decode: %v", backend, names[i], err)
			continue
		}
		y := make([]byte, w*hh)
		for r := 0; r < hh; r++ {
			copy(y[r*w:], host[r*pitch:r*pitch+w])
		}
		if m, err := jpeg.Decode(bytes.NewReader(img)); err == nil {
			var gy []byte
			stride := 0
			switch m := m.(type) {
			case *image.YCbCr:
				gy, stride = m.Y, m.YStride
			case *image.Gray:
				gy, stride = m.Pix, m.Stride
			}
			if gy != nil {
				diff, maxd := 0, 0
				for r := 0; r < hh; r++ {
					for x := 0; x < w; x++ {
						dd := int(y[r*w+x]) - int(gy[r*stride+x])
						if dd != 0 {
							diff++
							maxd = max(maxd, dd, -dd)
						}
					}
				}
				t.Logf("%-22s %-26s luma vs Go's IDCT: %.2f%% of samples differ, at most by %d", names[i], d.backend, 100*float64(diff)/float64(w*hh), maxd)
			}
		}
		if dir != "" {
			name := fmt.Sprintf("%s.%dx%d.%s.y", names[i], w, hh, d.backend)
			if err := os.WriteFile(filepath.Join(dir, name), y, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
