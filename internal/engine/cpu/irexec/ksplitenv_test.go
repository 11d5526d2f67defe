package irexec

import (
	"fmt"
	"os"
)

// The profiling tools (TestProfileArchs, TestSimThreads) take
// IREXEC_KSPLIT=off to run without K splits, or IREXEC_KSPLIT=rows,k to
// force that many row ranges and K ranges wherever a K split applies.
func init() {
	switch v := os.Getenv("IREXEC_KSPLIT"); v {
	case "":
	case "off":
		kSplitForce = &[2]int{}
	default:
		var f [2]int
		if _, err := fmt.Sscanf(v, "%d,%d", &f[0], &f[1]); err != nil {
			panic(fmt.Sprintf("IREXEC_KSPLIT=%q: want off or rows,k: %v", v, err))
		}
		kSplitForce = &f
	}
}
