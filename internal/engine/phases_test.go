package engine

import (
	"bytes"
	"strings"
	"testing"
)

func TestPhases(t *testing.T) {
	var buf bytes.Buffer
	ReportPhases(nil)
	defer ReportPhases(nil)
	if p := StartPhases("off"); p != nil {
		t.Fatalf("StartPhases with phases off = %v, want nil", p)
	}
	var none *Phases // every method is a no-op on nil
	none.Done("x")
	none.Add("x")
	none.Skip()
	none.Flush()

	ReportPhases(&buf)
	p := StartPhases("load")
	p.Done("a")
	p.Add("find")
	p.Add("time")
	p.Add("find")
	p.Flush()
	p.Flush() // nothing left to report
	got := buf.String()
	for _, want := range []string{"phase load/a ", "phase load/find (sum) ", "phase load/time (sum) "} {
		if strings.Count(got, want) != 1 {
			t.Errorf("output has %q %d times, want once:\n%s", want, strings.Count(got, want), got)
		}
	}
	if n := strings.Count(got, "\n"); n != 3 {
		t.Errorf("%d lines, want 3:\n%s", n, got)
	}
	if i, j := strings.Index(got, "find (sum)"), strings.Index(got, "time (sum)"); i > j {
		t.Errorf("accumulated steps out of first-seen order:\n%s", got)
	}
}
