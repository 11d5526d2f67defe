//go:build unix

package gemm

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user + system) the process has used, so that
// benchmarks on a shared machine can report work per CPU-second as well as
// per wall-second.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
