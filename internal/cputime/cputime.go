// Package cputime reads the CPU time the process has used, so that
// benchmarks on a shared machine can report work per CPU-second as well as
// per wall-second.
package cputime

import "time"

// Process is the CPU time (user + system) the process has used so far, or
// 0 where the platform does not say.
func Process() time.Duration { return process() }
