package imagegpu

import (
	"fmt"
	"strings"
	"time"
)

// Stats are a Preprocessor's cumulative per-stage times, for finding
// where a batch's time goes. Host times are wall time on the calling
// goroutine (the two nvJPEG calls overlap); device times are measured
// with CUDA events, from the batch's start on the caller's stream.
type Stats struct {
	Batches, Images int
	// HW and GPU count the images each nvJPEG backend decoded.
	HW, GPU int
	// Wait is the time Run waited for the previous batch to finish.
	Wait time.Duration
	// Plan is header parsing and routing.
	Plan time.Duration
	// CPUDecode is Go's decoding of the images nvJPEG does not take.
	CPUDecode time.Duration
	// Pin is the copy of the bitstreams to page-locked memory.
	Pin time.Duration
	// HWCall and GPUCall are the time spent in each backend's nvJPEG calls.
	HWCall, GPUCall time.Duration
	// Launch is the descriptors' layout and the kernels' launches.
	Launch time.Duration
	// HWDevice and GPUDevice are, per batch summed, the device time from
	// the batch's start to each backend's last decode; Kernels that of
	// the colour conversion and resize kernels (batches finished by the
	// next Run only).
	HWDevice, GPUDevice, Kernels time.Duration
}

// Stats returns the times so far.
func (p *Preprocessor) Stats() Stats { return p.stats }

// Add sums two Stats, for several Preprocessors.
func (s Stats) Add(o Stats) Stats {
	s.Batches += o.Batches
	s.Images += o.Images
	s.HW += o.HW
	s.GPU += o.GPU
	s.Wait += o.Wait
	s.Plan += o.Plan
	s.CPUDecode += o.CPUDecode
	s.Pin += o.Pin
	s.HWCall += o.HWCall
	s.GPUCall += o.GPUCall
	s.Launch += o.Launch
	s.HWDevice += o.HWDevice
	s.GPUDevice += o.GPUDevice
	s.Kernels += o.Kernels
	return s
}

// Sub is s minus an earlier snapshot o.
func (s Stats) Sub(o Stats) Stats {
	o.Batches, o.Images, o.HW, o.GPU = -o.Batches, -o.Images, -o.HW, -o.GPU
	o.Wait, o.Plan, o.CPUDecode, o.Pin = -o.Wait, -o.Plan, -o.CPUDecode, -o.Pin
	o.HWCall, o.GPUCall, o.Launch = -o.HWCall, -o.GPUCall, -o.Launch
	o.HWDevice, o.GPUDevice, o.Kernels = -o.HWDevice, -o.GPUDevice, -o.Kernels
	return s.Add(o)
}

// String is the per-batch breakdown in milliseconds.
func (s Stats) String() string {
	if s.Batches == 0 {
		return "no batches"
	}
	per := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(s.Batches) }
	var b strings.Builder
	fmt.Fprintf(&b, "%d batches, %.1f img/batch (hardware %.1f, gpu %.1f); ms/batch host: wait %.2f plan %.2f cpu-decode %.2f pin %.2f nvjpeg-hw %.2f nvjpeg-gpu %.2f launch %.2f; device: hw-done %.2f gpu-done %.2f kernels %.3f",
		s.Batches, float64(s.Images)/float64(s.Batches), float64(s.HW)/float64(s.Batches), float64(s.GPU)/float64(s.Batches),
		per(s.Wait), per(s.Plan), per(s.CPUDecode), per(s.Pin), per(s.HWCall), per(s.GPUCall), per(s.Launch),
		per(s.HWDevice), per(s.GPUDevice), per(s.Kernels))
	return b.String()
}

// collect reads the device times of the batch just finished.
func (p *Preprocessor) collect() {
	for di, d := range []*time.Duration{&p.stats.HWDevice, &p.stats.GPUDevice} {
		if p.last[di] == 0 {
			continue
		}
		if t, err := p.rt.EventElapsed(p.start, p.dec[di].end); err == nil {
			*d += msDuration(t)
		}
	}
	if t, err := p.rt.EventElapsed(p.kstart, p.done); err == nil {
		p.stats.Kernels += msDuration(t)
	}
}

func msDuration(ms float32) time.Duration {
	return time.Duration(float64(ms) * float64(time.Millisecond))
}
