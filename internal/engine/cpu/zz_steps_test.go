package cpu

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"goinfer/internal/engine"
)

func TestZZStepTimes(t *testing.T) {
	if os.Getenv("ZZ_STEPS") == "" {
		t.Skip("diagnostic")
	}
	n, _ := strconv.Atoi(os.Getenv("ZZ_STEPS"))
	g, _ := resnet18()
	ctx := context.Background()
	m, err := Engine{}.Load(ctx, g, engine.Options{Compile: true, MaxBatch: n, Height: 224, Width: 224, Threads: zzThreads()})
	if err != nil {
		t.Fatal(err)
	}
	inst, _ := m.NewInstance(ctx)
	in := inst.(*instance)
	p := in.plan
	for v, s := range p.slotOf {
		if s >= 0 {
			in.vals[v] = in.slots[s][:n*p.dims[v].Elements()]
		}
	}
	in.vals[0] = make([]float32, n*3*224*224)
	best := make([]time.Duration, len(p.steps))
	for i := range best {
		best[i] = time.Hour
	}
	for r := 0; r < 5; r++ {
		for i, s := range p.steps {
			t0 := zzNow()
			s.run(in, n)
			if d := zzNow() - t0; d < best[i] {
				best[i] = d
			}
		}
	}
	var tot time.Duration
	for i, s := range p.steps {
		tot += best[i]
		desc := fmt.Sprintf("%T", s)
		if c, ok := s.(*convStep); ok {
			macs := float64(n * c.oh * c.ow * c.outC * c.icg * c.k * c.k)
			desc = fmt.Sprintf("conv %dx%d s%d %d->%d %dx%d layout%d  %.1f GFLOP/s", c.k, c.k, c.stride, c.inC, c.outC, c.oh, c.ow, c.layout, 2*macs/best[i].Seconds()/1e9)
		}
		fmt.Printf("%3d %8.3f ms  %s\n", i, best[i].Seconds()*1e3, desc)
	}
	fmt.Printf("total %.3f ms\n", tot.Seconds()*1e3)
}

func zzThreads() int {
	t, _ := strconv.Atoi(os.Getenv("ZZ_THREADS"))
	return max(t, 1)
}

var zzStart = time.Now()

func zzNow() time.Duration {
	if os.Getenv("ZZ_WALL") != "" {
		return time.Since(zzStart)
	}
	return processCPU()
}
