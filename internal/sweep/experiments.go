package sweep

import (
	"fmt"
	"slices"
	"strings"
)

// Experiment is a named preset: the bench flags that make one variant of
// the benchmark. Its flags are written "--name=value" and win over the
// flags forwarded to every run.
type Experiment struct {
	Name    string
	Summary string
	Args    []string
}

// presets are the experiments --experiments can name. The first five
// re-create the reference's CHANGELOG steps; the rest are goinfer's own.
var presets = []Experiment{
	{"original", "the reference before its copy-stream change: copies done by the prediction worker, 1 worker",
		[]string{"--copy_streams=false", "--num_workers=1"}},
	{"copy_streams", "separate H2D and D2H stages on their own streams, 1 prediction worker",
		[]string{"--copy_streams=true", "--num_workers=1"}},
	{"workers2", "copy stages and 2 prediction workers, each on its own stream",
		[]string{"--copy_streams=true", "--num_workers=2"}},
	{"workers3", "copy stages and 3 prediction workers",
		[]string{"--copy_streams=true", "--num_workers=3"}},
	{"workers4", "copy stages and 4 prediction workers",
		[]string{"--copy_streams=true", "--num_workers=4"}},
	{"default", "bench's defaults, nothing changed", nil},
	{"fp32", "fp32 arithmetic (no TF32)", []string{"--precision=fp32"}},
	{"tf32", "fp32 storage, TF32 tensor-core math", []string{"--precision=tf32"}},
	{"fp16", "fp16 arithmetic, channels-last", []string{"--precision=fp16"}},
	{"bf16", "bf16 arithmetic, channels-last", []string{"--precision=bf16"}},
	{"fp16_input", "requests sent as fp16 instead of fp32 (half the bytes to copy)", []string{"--input_dtype=fp16"}},
	{"uint8_input", "requests sent as uint8 pixels (a quarter of the bytes), converted on the device", []string{"--input_dtype=uint8"}},
}

// DefaultExperiments are run when --experiments is not given: the
// reference's five and bench's defaults.
var DefaultExperiments = []string{"original", "copy_streams", "workers2", "workers3", "workers4", "default"}

// Presets returns every named experiment, in display order.
func Presets() []Experiment {
	out := make([]Experiment, len(presets))
	for i, e := range presets {
		e.Args = slices.Clone(e.Args)
		out[i] = e
	}
	return out
}

// PresetNames lists the preset names in display order (report uses it to
// order its tables).
func PresetNames() []string {
	names := make([]string, len(presets))
	for i, e := range presets {
		names[i] = e.Name
	}
	return names
}

// LookupExperiments returns the named presets, in the order given. An
// unknown or repeated name is an error that lists the known ones.
func LookupExperiments(names []string) ([]Experiment, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("no experiments given (known: %s)", strings.Join(PresetNames(), ", "))
	}
	var out []Experiment
	seen := map[string]bool{}
	for _, n := range names {
		i := slices.IndexFunc(presets, func(e Experiment) bool { return e.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("unknown experiment %q (known: %s)", n, strings.Join(PresetNames(), ", "))
		}
		if seen[n] {
			return nil, fmt.Errorf("experiment %q given twice", n)
		}
		seen[n] = true
		e := presets[i]
		e.Args = slices.Clone(e.Args)
		out = append(out, e)
	}
	return out, nil
}

// Help describes the presets, one per line, for the command's usage text.
func Help() string {
	var b strings.Builder
	for _, e := range presets {
		args := strings.Join(e.Args, " ")
		if args == "" {
			args = "(no flags)"
		}
		fmt.Fprintf(&b, "  %-13s %s\n  %-13s   %s\n", e.Name, e.Summary, "", args)
	}
	return b.String()
}
