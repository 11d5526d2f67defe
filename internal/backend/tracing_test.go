package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"goinfer/internal/trace"
)

func TestAddTrace(t *testing.T) {
	for _, copyStreams := range []bool{true, false} {
		t.Run(fmt.Sprintf("copy_streams=%v", copyStreams), func(t *testing.T) {
			m := newAsyncModel(tClasses, tC, tH, tW, tMaxBatch, 100*time.Microsecond)
			b := New(Config{NumWorkers: 2, CopyStreams: copyStreams, Profile: true})
			b.Start(context.Background(), loaderOf(m))
			abortOnFailure(t, b)
			const n = 20
			reply := make(chan Response, n+1)
			rng := rand.New(rand.NewPCG(31, 32))
			for i := range n {
				if err := b.Submit(Request{ID: uint64(i), Input: randInput(rng, 1+i%tMaxBatch), SentAt: time.Now(), Reply: reply}); err != nil {
					t.Fatal(err)
				}
			}
			b.Submit(Request{ID: n, Input: randInput(rng, tMaxBatch+1), SentAt: time.Now(), Reply: reply}) // rejected
			var resps []Response
			for range n + 1 {
				resps = append(resps, <-reply)
			}
			closeBackend(t, b)

			tr := trace.New()
			b.AddTrace(tr, resps)
			var buf bytes.Buffer
			if _, err := tr.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			var f trace.File
			if err := json.Unmarshal(buf.Bytes(), &f); err != nil {
				t.Fatalf("trace is not valid JSON: %v", err)
			}
			tracks := map[[2]int]string{}
			spans := map[[2]int][][2]float64{}
			cats := map[string]int{}
			for _, e := range f.TraceEvents {
				switch e.Ph {
				case "M":
					if e.Name == "thread_name" {
						tracks[[2]int{e.Pid, e.Tid}] = e.Args["name"].(string)
					}
				case "X":
					k := [2]int{e.Pid, e.Tid}
					if _, ok := tracks[k]; !ok {
						t.Errorf("span %q on unnamed track %v", e.Name, k)
					}
					spans[k] = append(spans[k], [2]float64{e.Ts, e.Ts + *e.Dur})
					cats[e.Cat]++
				case "b":
					cats["async:"+e.Cat]++
				}
			}
			want := []string{"backend", "H2D stage", "reply stage", "worker 0", "worker 1", "GPU stream: worker 0", "GPU stream: worker 1"}
			if copyStreams {
				want = append(want, "D2H stage", "GPU stream: H2D", "GPU stream: D2H")
			}
			names := map[string]bool{}
			for _, nm := range tracks {
				names[nm] = true
			}
			for _, w := range want {
				if !names[w] {
					t.Errorf("no track %q (have %v)", w, tracks)
				}
			}
			// n requests ran: each has a device span per stage and host spans.
			if cats["gpu"] != 3*n || cats["compute"] != n || cats["reply"] != n || cats["h2d"] != n || cats["load"] != 2 {
				t.Errorf("span counts by category %v, want %d gpu spans and %d of each host stage", cats, 3*n, n)
			}
			if copyStreams && cats["d2h"] != n {
				t.Errorf("%d D2H stage spans, want %d", cats["d2h"], n)
			}
			if cats["async:latency"] != n+1 || cats["async:queue"] != n+1 {
				t.Errorf("async spans %v, want %d latency and queue spans", cats, n+1)
			}
			// Spans on one track may nest but must not partly overlap, or
			// viewers draw them wrongly.
			for k, ss := range spans {
				sort.Slice(ss, func(i, j int) bool {
					if ss[i][0] != ss[j][0] {
						return ss[i][0] < ss[j][0]
					}
					return ss[i][1] > ss[j][1]
				})
				var open []float64 // ends of the enclosing spans
				for _, sp := range ss {
					// Times are float microseconds: ts+dur of a span that
					// ends where the next begins can exceed that start by
					// rounding, so both checks allow 1 ns.
					for len(open) > 0 && open[len(open)-1] <= sp[0]+1e-3 {
						open = open[:len(open)-1]
					}
					if len(open) > 0 && sp[1] > open[len(open)-1]+1e-3 {
						t.Errorf("track %q: span %v partly overlaps one ending at %v", tracks[k], sp, open[len(open)-1])
					}
					open = append(open, sp[1])
				}
			}
		})
	}
}
