package cpu

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"goinfer/internal/engine"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
)

func TestTmpSteps(t *testing.T) {
	a, _ := model.KnownArch("resnet18", 1000)
	_, g, _ := model.InitGraph(context.Background(), a, 0)
	m, err := Engine{}.Load(context.Background(), g, engine.Options{Compile: true, Precision: engine.FP32, MaxBatch: 4, BatchSizes: []int{4}, Height: 250, Width: 250, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	ie, _ := m.NewInstance(context.Background())
	in := ie.(*instance)
	p := in.plan
	n := 4
	x := make([]float32, n*3*250*250)
	for i := range x {
		x[i] = float32(i%17) * 0.1
	}
	for v, s := range p.slotOf {
		if s >= 0 {
			in.vals[v] = in.slots[s][:n*p.dims[v].Elements()]
		}
	}
	in.vals[0] = x
	best := make([]time.Duration, len(p.steps))
	for r := 0; r < 6; r++ {
		for i, s := range p.steps {
			t0 := time.Now()
			s.run(in, n)
			d := time.Since(t0)
			if r == 0 || d < best[i] {
				best[i] = d
			}
		}
	}
	type row struct {
		name string
		d    time.Duration
	}
	var rows []row
	var tot time.Duration
	fg, _ := model.Fuse(g)
	for i, d := range best {
		nd := fg.Nodes[i]
		name := fmt.Sprintf("%s %T", nd.Name, p.steps[i])
		if nd.Op == model.OpConv {
			name += fmt.Sprintf(" %dx%d k%d s%d in %v", nd.Conv.InC, nd.Conv.OutC, nd.Conv.K, nd.Conv.Stride, p.dims[nd.Inputs[0]])
		}
		rows = append(rows, row{name, d})
		tot += d
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].d > rows[j].d })
	for _, r := range rows[:16] {
		t.Logf("%6.2f ms %4.1f%% %s", float64(r.d.Microseconds())/1000, 100*float64(r.d)/float64(tot), r.name)
	}
	t.Logf("total %.2f ms", float64(tot.Microseconds())/1000)
	_ = tensor.Float32
}
