package cuda

import (
	"errors"

	cu "goinfer/internal/cuda"
)

// timeCaptured returns the device time of one call of run, in ms, on
// stream s: reps calls captured in a CUDA graph and timed as one launch
// between start and end (the best of two, after one that uploads the
// graph), as a compiled plan runs them. Timed one by one from the host, a
// small kernel measures the host's submission rather than the device. A
// first call outside the capture checks that run works at all (and lets a
// library warm up).
func timeCaptured(rt *cu.Runtime, s cu.Stream, start, end cu.Event, run func() error, reps int) (float32, error) {
	if err := run(); err != nil {
		return 0, err
	}
	if err := rt.StreamBeginCapture(s, cu.CaptureModeThreadLocal); err != nil {
		return 0, err
	}
	var runErr error
	for r := 0; r < reps && runErr == nil; r++ {
		runErr = run()
	}
	g, endErr := rt.StreamEndCapture(s)
	if runErr != nil || endErr != nil {
		if g != 0 {
			rt.GraphDestroy(g)
		}
		return 0, errors.Join(runErr, endErr)
	}
	defer rt.GraphDestroy(g)
	exec, err := rt.GraphInstantiate(g)
	if err != nil {
		return 0, err
	}
	defer rt.GraphExecDestroy(exec)
	best := float32(-1)
	for t := 0; t < 3; t++ {
		if err := rt.EventRecord(start, s); err != nil {
			return 0, err
		}
		if err := rt.GraphLaunch(exec, s); err != nil {
			return 0, err
		}
		if err := rt.EventRecord(end, s); err != nil {
			return 0, err
		}
		if err := rt.EventSynchronize(end); err != nil {
			return 0, err
		}
		ms, err := rt.EventElapsed(start, end)
		if err != nil {
			return 0, err
		}
		if t > 0 && (best < 0 || ms < best) {
			best = ms
		}
	}
	return best / float32(reps), nil
}
