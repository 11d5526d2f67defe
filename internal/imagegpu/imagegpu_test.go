package imagegpu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"image"
	"image/jpeg"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cu "goinfer/internal/cuda"
	"goinfer/internal/imageproc"
	"goinfer/internal/tensor"
)

var benchImages = flag.String("images", "", "`DIR` of JPEGs for BenchmarkDecodePreprocess (default: testdata/photos)")

// gpu returns the loaded libraries, or skips the test saying why.
func gpu(t testing.TB) *cu.Libs {
	t.Helper()
	libs, err := cu.Load()
	if err != nil || libs.Runtime == nil || libs.Driver == nil {
		t.Skipf("no usable GPU here (the GPU image path is tested on a GPU machine): %v", err)
	}
	if n, err := libs.Runtime.DeviceCount(); err != nil || n == 0 {
		t.Skipf("no CUDA device: %v", err)
	}
	if _, _, err := cu.OpenJPEG(); err != nil {
		t.Skipf("nvJPEG not found: %v", err)
	}
	return libs
}

func readPhotos(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob("../../testdata/photos/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no photos in testdata/photos (tools/images/make_photos.py writes them): %v", err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	return out
}

// cpuReference is the CPU path: PIL-faithful decode, Resize(256),
// CenterCrop(224), Normalize.
func cpuReference(t testing.TB, img []byte) []float32 {
	t.Helper()
	m, err := imageproc.Decode(bytes.NewReader(img))
	if err != nil {
		t.Fatal(err)
	}
	return imageproc.Normalize(imageproc.Preprocess(m))
}

func run(t testing.TB, p *Preprocessor, libs *cu.Libs, images [][]byte) ([]float32, []error) {
	t.Helper()
	var errs []error
	out := launchAndRead(t, libs, len(images)*3*p.opts.Spec.CropW*p.opts.Spec.CropH*4, func(dst cu.DevPtr, s cu.Stream) {
		var err error
		if errs, err = p.Run(images, dst, s); err != nil {
			t.Fatal(err)
		}
	})
	return tensor.BytesF32(out), errs
}

// launchAndRead runs launch on a fresh stream with a device buffer of size
// bytes, waits for the stream and returns the buffer's bytes.
func launchAndRead(t testing.TB, libs *cu.Libs, size int, launch func(dst cu.DevPtr, s cu.Stream)) []byte {
	t.Helper()
	rt := libs.Runtime
	dst, err := rt.Malloc(int64(size))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Free(dst)
	s, err := rt.StreamCreate()
	if err != nil {
		t.Fatal(err)
	}
	defer rt.StreamDestroy(s)
	launch(dst, s)
	if err := rt.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, size)
	if err := rt.MemcpyDtoH(out, dst); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestParityWithCPU decodes real photographs of every kind (baseline,
// 4:4:4, grayscale, progressive, CMYK, PNG with alpha) in one mixed batch,
// with a corrupt, a truncated, an empty and a decompression-bomb image
// among them, and compares each good image with the CPU path.
func TestParityWithCPU(t *testing.T) {
	libs := gpu(t)
	photos := readPhotos(t)
	var names []string
	var images [][]byte
	for name, b := range photos {
		names = append(names, name)
		images = append(images, b)
	}
	bad := map[string][]byte{
		"garbage":   []byte("this is not an image at all"),
		"truncated": photos["astronaut.jpg"][:len(photos["astronaut.jpg"])/3],
		"empty":     {},
		"bomb":      bombJPEG(t, 16000, 16000),
	}
	for name, b := range bad {
		names = append(names, name)
		images = append(images, b)
	}
	p, err := New(libs, Options{MaxBatch: len(images), Spec: ImageNet, Out: tensor.Float32})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	t.Logf("nvJPEG backends: %v", p.Backends())
	got, errs := run(t, p, libs, images)
	per := 3 * 224 * 224
	for i, name := range names {
		if _, isBad := bad[name]; isBad {
			// A truncated JPEG may still decode (as PIL's would, with a
			// gray tail): what matters is that it cannot fail the batch.
			if errs[i] == nil && name != "truncated" {
				t.Errorf("%s: decoded without error", name)
			}
			t.Logf("%s: %v", name, errs[i])
			continue
		}
		if errs[i] != nil {
			t.Errorf("%s: %v", name, errs[i])
			continue
		}
		want := cpuReference(t, images[i])
		var maxd, sum float64
		for k, w := range want {
			d := math.Abs(float64(got[i*per+k] - w))
			maxd = max(maxd, d)
			sum += d
		}
		mean := sum / float64(len(want))
		t.Logf("%-24s max|gpu-cpu| %.4f mean %.5f (normalised units; one 8-bit level is %.4f)", name, maxd, mean, 1/(255*0.225))
		// From the same pixels the kernels give the CPU path's input bit
		// for bit (TestResizeBitExactOnGPU, TestYCbCrBitExactOnGPU): what
		// remains is the IDCT, nvJPEG's against Go's, a level or two of a
		// few percent of the samples, which resizing and upsampling can
		// add up to a few levels.
		host := strings.HasSuffix(name, ".png") || strings.Contains(name, "cmyk")
		if mean > 0.003 || maxd > 4.5/(255*0.225) || host && maxd != 0 {
			t.Errorf("%s: GPU preprocessing differs from the CPU path: max %.4f mean %.5f", name, maxd, mean)
		}
	}
	if !strings.Contains(errs[len(photos)+indexOf(names[len(photos):], "bomb")].Error(), "pixels") {
		t.Errorf("bomb: error %v should say the pixel limit", errs[len(photos)+indexOf(names[len(photos):], "bomb")])
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// bombJPEG is a valid small JPEG whose frame header claims w x h pixels.
func bombJPEG(t testing.TB, w, h int) []byte {
	t.Helper()
	var buf bytes.Buffer
	img := image.NewGray(image.Rect(0, 0, 8, 8))
	if err := jpeg.Encode(&buf, img, nil); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	for i := 0; i+9 < len(b); i++ {
		if b[i] == 0xff && b[i+1] == 0xc0 { // SOF0: length(2) precision(1) height(2) width(2)
			binary.BigEndian.PutUint16(b[i+5:], uint16(h))
			binary.BigEndian.PutUint16(b[i+7:], uint16(w))
			return b
		}
	}
	t.Fatal("no SOF0 marker in the encoded JPEG")
	return nil
}

// TestFloat16MatchesFloat32 checks the fp16 output against the fp32 one.
func TestFloat16MatchesFloat32(t *testing.T) {
	libs := gpu(t)
	img := readPhotos(t)["coffee.jpg"]
	p32, err := New(libs, Options{MaxBatch: 1, Spec: ImageNet, Out: tensor.Float32})
	if err != nil {
		t.Fatal(err)
	}
	defer p32.Close()
	want, _ := run(t, p32, libs, [][]byte{img})
	p16, err := New(libs, Options{MaxBatch: 1, Spec: ImageNet, Out: tensor.Float16})
	if err != nil {
		t.Fatal(err)
	}
	defer p16.Close()
	rt := libs.Runtime
	dst, _ := rt.Malloc(3 * 224 * 224 * 2)
	defer rt.Free(dst)
	if _, err := p16.Run([][]byte{img}, dst, 0); err != nil {
		t.Fatal(err)
	}
	if err := rt.DeviceSynchronize(); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 3*224*224*2)
	if err := rt.MemcpyDtoH(raw, dst); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		h := tensor.F16ToFloat32(binary.LittleEndian.Uint16(raw[2*i:]))
		if d := math.Abs(float64(h - want[i])); d > 2e-3*math.Max(1, math.Abs(float64(want[i]))) {
			t.Fatalf("element %d: fp16 %v vs fp32 %v", i, h, want[i])
		}
	}
}

// BenchmarkDecodePreprocess measures JPEG bytes in host memory to a
// preprocessed fp16 batch on the GPU, synchronised per batch; JPEGs come
// from -images DIR (tools/images/make_photos.py --bench) or the fixtures.
func BenchmarkDecodePreprocess(b *testing.B) {
	libs := gpu(b)
	pool := benchPool(b)
	for _, batch := range []int{64, 256} {
		for _, hw := range []bool{true, false} {
			name := "batch" + strconv.Itoa(batch)
			if hw {
				name += "/hardware"
			} else {
				name += "/gpu"
			}
			b.Run(name, func(b *testing.B) {
				p, err := New(libs, Options{MaxBatch: batch, Spec: ImageNet, Out: tensor.Float16, NoHardware: !hw})
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close()
				if hw && p.Backends()[0] != "hardware" {
					b.Skip("no hardware JPEG decoder on this GPU")
				}
				images := make([][]byte, batch)
				var bytesIn int
				for i := range images {
					images[i] = pool[i%len(pool)]
					bytesIn += len(images[i])
				}
				rt := libs.Runtime
				dst, err := rt.Malloc(int64(batch * 3 * 224 * 224 * 2))
				if err != nil {
					b.Fatal(err)
				}
				defer rt.Free(dst)
				s, _ := rt.StreamCreate()
				defer rt.StreamDestroy(s)
				b.SetBytes(int64(bytesIn))
				b.ResetTimer()
				var host time.Duration
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					errs, err := p.Run(images, dst, s)
					host += time.Since(t0)
					if err != nil {
						b.Fatal(err)
					}
					for _, e := range errs {
						if e != nil {
							b.Fatal(e)
						}
					}
					if err := rt.StreamSynchronize(s); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "img/s")
				b.ReportMetric(host.Seconds()*1e3/float64(b.N), "host-ms/batch")
			})
		}
	}
}

// benchPool reads the benchmark's JPEGs: -images DIR, or the fixtures
// nvJPEG decodes.
func benchPool(b *testing.B) [][]byte {
	var files []string
	if *benchImages != "" {
		files, _ = filepath.Glob(filepath.Join(*benchImages, "*.jpg"))
	}
	var pool [][]byte
	if len(files) == 0 {
		for name, img := range readPhotos(b) {
			if strings.HasSuffix(name, ".jpg") && !strings.Contains(name, "cmyk") {
				pool = append(pool, img)
			}
		}
	}
	for _, f := range files {
		img, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		pool = append(pool, img)
	}
	return pool
}

// BenchmarkConcurrent runs several Preprocessors at once, each on its own
// goroutine and stream, as a pipeline's decode stage would: one batch's
// host work (parsing, nvJPEG's submission) overlaps another's decode. The
// variants split each batch between the hardware decoder and nvJPEG's GPU
// backend, copy the bitstreams to pinned memory, or set nvJPEG's batched
// state up for every batch.
func BenchmarkConcurrent(b *testing.B) {
	libs := gpu(b)
	pool := benchPool(b)
	const batch = 256
	images := make([][]byte, batch)
	for i := range images {
		images[i] = pool[i%len(pool)]
	}
	type variant struct {
		workers int
		share   float64
		pin     bool
		reinit  bool
	}
	var variants []variant
	for _, w := range []int{1, 2, 3, 4} {
		variants = append(variants, variant{workers: w})
	}
	variants = append(variants, variant{workers: 2, reinit: true}, variant{workers: 2, pin: true},
		variant{workers: 1, share: 0.1}, variant{workers: 2, share: 0.1})
	for _, v := range variants {
		name := fmt.Sprintf("workers%d/share%.2f", v.workers, v.share)
		for _, f := range []struct {
			on   bool
			name string
		}{{v.pin, "/pin"}, {v.reinit, "/reinit"}} {
			if f.on {
				name += f.name
			}
		}
		b.Run(name, func(b *testing.B) {
			type worker struct {
				p   *Preprocessor
				dst cu.DevPtr
				s   cu.Stream
			}
			ws := make([]worker, v.workers)
			rt := libs.Runtime
			for i := range ws {
				p, err := New(libs, Options{MaxBatch: batch, Spec: ImageNet, Out: tensor.Float16, GPUShare: v.share, PinInput: v.pin})
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close()
				p.reinit = v.reinit
				dst, err := rt.Malloc(int64(batch * 3 * 224 * 224 * 2))
				if err != nil {
					b.Fatal(err)
				}
				defer rt.Free(dst)
				s, err := rt.StreamCreate()
				if err != nil {
					b.Fatal(err)
				}
				defer rt.StreamDestroy(s)
				ws[i] = worker{p, dst, s}
			}
			// Warm up: scratch sized, states set up, the split balanced.
			for _, w := range ws {
				for range 8 {
					if _, err := w.p.Run(images, w.dst, w.s); err != nil {
						b.Fatal(err)
					}
					if err := rt.StreamSynchronize(w.s); err != nil {
						b.Fatal(err)
					}
				}
			}
			var before Stats
			for _, w := range ws {
				before = before.Add(w.p.Stats())
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			errc := make(chan error, v.workers)
			b.ResetTimer()
			for i := range ws {
				wg.Add(1)
				go func(w worker) {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						errs, err := w.p.Run(images, w.dst, w.s)
						if err == nil {
							err = errors.Join(errs...)
						}
						if err == nil {
							err = rt.StreamSynchronize(w.s)
						}
						if err != nil {
							errc <- err
							return
						}
					}
				}(ws[i])
			}
			wg.Wait()
			b.StopTimer()
			close(errc)
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "img/s")
			var st Stats
			for _, w := range ws {
				st = st.Add(w.p.Stats())
			}
			st = st.Sub(before)
			b.ReportMetric(float64(st.GPU)/float64(max(st.Batches, 1)), "gpu-img/batch")
			b.Logf("%s: %s", name, st)
		})
	}
}
