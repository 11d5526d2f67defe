package metrics

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// NvidiaSMIProbe returns a Probe that runs nvidia-smi once per sample, as
// the reference does, for the given GPU ordinals (all GPUs when empty). It
// returns an error when nvidia-smi is not on PATH, so callers can fall back
// to "unknown" rather than report a 0.
func NvidiaSMIProbe(devices []int) (Probe, error) {
	bin, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil, fmt.Errorf("GPU utilization: %w", err)
	}
	args := []string{"--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"}
	if len(devices) > 0 {
		ids := make([]string, len(devices))
		for i, d := range devices {
			ids[i] = strconv.Itoa(d)
		}
		args = append(args, "-i", strings.Join(ids, ","))
	}
	return func(ctx context.Context) (GPUSample, error) {
		out, err := exec.CommandContext(ctx, bin, args...).Output()
		if err != nil {
			return GPUSample{}, fmt.Errorf("nvidia-smi: %w", err)
		}
		return ParseNvidiaSMI(out)
	}, nil
}

// ParseNvidiaSMI reads the output of
//
//	nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits
//
// one line per GPU ("37, 1234"), and returns the utilization averaged over
// the GPUs and the largest memory use. A field nvidia-smi cannot read
// ("[N/A]", "[Not Supported]") is an error naming the line.
func ParseNvidiaSMI(out []byte) (GPUSample, error) {
	var s GPUSample
	n := 0
	for i, line := range bytes.Split(out, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		fields := strings.Split(string(line), ",")
		if len(fields) != 2 {
			return GPUSample{}, fmt.Errorf("nvidia-smi line %d: %q: want 2 comma-separated fields (utilization.gpu, memory.used)", i+1, line)
		}
		util, err := strconv.ParseFloat(strings.TrimSpace(fields[0]), 64)
		if err != nil {
			return GPUSample{}, fmt.Errorf("nvidia-smi line %d: utilization.gpu %q is not a number", i+1, strings.TrimSpace(fields[0]))
		}
		mem, err := strconv.ParseFloat(strings.TrimSpace(fields[1]), 64)
		if err != nil {
			return GPUSample{}, fmt.Errorf("nvidia-smi line %d: memory.used %q is not a number", i+1, strings.TrimSpace(fields[1]))
		}
		s.Util += util
		s.MemMiB = max(s.MemMiB, mem)
		n++
	}
	if n == 0 {
		return GPUSample{}, fmt.Errorf("nvidia-smi printed no GPU lines")
	}
	s.Util /= float64(n)
	return s, nil
}
