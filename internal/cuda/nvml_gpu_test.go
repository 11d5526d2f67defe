package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestUtilizationSamplesOnGPU reads the driver's utilization buffer of
// GPU 0 (NVML's index; with several GPUs set CUDA_DEVICE_ORDER=PCI_BUS_ID so
// that CUDA's device 0 is the same one), first as it is, then around two
// seconds of back-to-back memset kernels, which must read as busy. Run it
// on a GPU machine: go test -c ./internal/cuda && ./cuda.test -test.run
// OnGPU -test.v
func TestUtilizationSamplesOnGPU(t *testing.T) {
	nv, err := OpenNVML()
	if err != nil {
		t.Skipf("needs NVML, that is an NVIDIA driver: %v", err)
	}
	defer nv.Close()
	if n, err := nv.DeviceCount(); err != nil || n == 0 {
		t.Skipf("NVML sees no GPU (%d, %v)", n, err)
	}

	for _, since := range []time.Time{{}, time.Now().Add(-5 * time.Second)} {
		s, err := nv.UtilizationSamples(0, since)
		if errors.Is(err, ErrNoSamples) {
			t.Skip(err)
		}
		if err != nil {
			t.Fatalf("since %v: %v", since, err)
		}
		t.Logf("since %v: %d samples%s", since.Format(time.StampMilli), len(s), describeSamples(s))
		checkSamples(t, s, since, time.Now())
	}

	libs, err := Load()
	if err != nil || libs.Runtime == nil {
		t.Skipf("the busy-window check needs the CUDA runtime: %v", err)
	}
	start, end := busyGPU(t, libs.Runtime, 2500*time.Millisecond)
	// Wait for the sample whose period holds the end of the busy time.
	var s []UtilSample
	for deadline := time.Now().Add(3 * time.Second); ; {
		s, err = nv.UtilizationSamples(0, start.Add(-2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if (len(s) > 0 && !s[len(s)-1].At.Before(end)) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("busy %v to %v: %d samples%s", start.Format(time.StampMilli), end.Format(time.StampMilli), len(s), describeSamples(s))
	checkSamples(t, s, start.Add(-2*time.Second), time.Now())
	// A sample period is at most a second: samples taken a second into the
	// busy time and before its end describe busy time only.
	var sum float64
	var n int
	for _, x := range s {
		if !x.At.Before(start.Add(time.Second)) && !x.At.After(end) {
			sum += x.Percent
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no sample within [start+1s, end] of a %v busy window: are the timestamps in Unix microseconds?", end.Sub(start))
	}
	if mean := sum / float64(n); mean < 50 {
		t.Errorf("mean utilization %.1f%% over %d samples of back-to-back kernels, want >= 50%%", mean, n)
	}
}

// busyGPU keeps device 0 running memset kernels for d and returns when it
// started and ended.
func busyGPU(t *testing.T, rt *Runtime, d time.Duration) (start, end time.Time) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := rt.SetDevice(0); err != nil {
		t.Fatal(err)
	}
	const size = 256 << 20
	p, err := rt.Malloc(size)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Free(p)
	s, err := rt.StreamCreate()
	if err != nil {
		t.Fatal(err)
	}
	defer rt.StreamDestroy(s)
	start = time.Now()
	for time.Since(start) < d {
		for range 64 {
			if err := rt.MemsetAsync(p, 1, size, s); err != nil {
				t.Fatal(err)
			}
		}
		if err := rt.StreamSynchronize(s); err != nil {
			t.Fatal(err)
		}
	}
	return start, time.Now()
}

// checkSamples asserts what UtilizationSamples promises: percentages, in
// time order, taken after since and not after now (a minute of slack for
// the driver's clock). With a zero since, the buffer may hold samples of
// long ago, but of this decade: timestamps counted from boot would not be.
func checkSamples(t *testing.T, s []UtilSample, since, now time.Time) {
	t.Helper()
	floor := since
	if since.IsZero() {
		floor = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	for i, x := range s {
		if !(x.Percent >= 0 && x.Percent <= 100) {
			t.Errorf("sample %d: %v%% is not a percentage", i, x.Percent)
		}
		if i > 0 && x.At.Before(s[i-1].At) {
			t.Errorf("sample %d at %v is before sample %d at %v", i, x.At, i-1, s[i-1].At)
		}
		if !x.At.After(floor) || x.At.After(now.Add(time.Minute)) {
			t.Errorf("sample %d at %v is not between %v and %v: are the driver's timestamps Unix microseconds?", i, x.At, floor, now)
		}
	}
}

// describeSamples lists samples as time, gap from the previous one (the
// driver's sample period) and percent.
func describeSamples(s []UtilSample) string {
	var b strings.Builder
	for i, x := range s {
		var gap time.Duration
		if i > 0 {
			gap = x.At.Sub(s[i-1].At)
		}
		fmt.Fprintf(&b, "\n\t%s +%v %g%%", x.At.Format(time.StampMicro), gap.Round(time.Millisecond), x.Percent)
	}
	return b.String()
}
