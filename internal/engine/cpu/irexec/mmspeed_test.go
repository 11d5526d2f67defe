package irexec

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// TestMatMulSpeed times products of ViT-B/16's shapes against constant
// weights (tokens x k times k x n, bias, GELU on the MLP's first layer).
// It is a tool, not a check: it runs only with IREXEC_MMSPEED set (the
// number of runs per shape), IREXEC_THREADS (default 1) and
// IREXEC_MMSHAPES (rows x k x n, comma-separated; default ViT-B/16's four
// linear layers at batch 1). It prints each shape's minimum and median.
func TestMatMulSpeed(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("IREXEC_MMSPEED"))
	if runs < 1 {
		t.Skip("a timing tool: set IREXEC_MMSPEED=runs to run it")
	}
	threads, _ := strconv.Atoi(os.Getenv("IREXEC_THREADS"))
	shapes := os.Getenv("IREXEC_MMSHAPES")
	if shapes == "" {
		shapes = "197x768x2304,197x768x768,197x768x3072,197x3072x768"
	}
	r := rand.New(rand.NewPCG(1, 1))
	for _, sh := range strings.Split(shapes, ",") {
		var m, k, n int
		if _, err := fmt.Sscanf(sh, "%dx%dx%d", &m, &k, &n); err != nil {
			t.Fatalf("shape %q: %v", sh, err)
		}
		ep := ir.Epilogue{}
		if n == 4*k {
			ep.Act = ir.ActGELU
		}
		g := oneNode(&ir.MatMul{Epilogue: ep}, 1, f32in(1, m, k), randConst(r, k, n), randConst(r, n))
		b, err := ir.Bind(g, 1)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Compile(context.Background(), b, Options{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		x := p.NewExec()
		in := tensor.New(tensor.Float32, 1, m, k)
		out := tensor.New(tensor.Float32, 1, m, n)
		ds := make([]time.Duration, runs)
		for i := range ds {
			t0 := time.Now()
			if err := x.Run(context.Background(), [][]byte{in.Data}, [][]byte{out.Data}); err != nil {
				t.Fatal(err)
			}
			ds[i] = time.Since(t0)
		}
		x.Close()
		slices.Sort(ds)
		gf := 2 * float64(m) * float64(k) * float64(n) / 1e9
		fmt.Printf("%s threads %d: min %.3f ms (%.1f GFLOP/s), median %.3f ms\n", sh, p.threads,
			float64(ds[0].Microseconds())/1e3, gf/ds[0].Seconds(), float64(ds[len(ds)/2].Microseconds())/1e3)
	}
}
