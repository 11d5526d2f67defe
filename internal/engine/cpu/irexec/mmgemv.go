package irexec

import (
	"fmt"

	"goinfer/internal/engine/cpu/vec"
	"goinfer/internal/hugepage"
)

// mmGemvStep is a Gemm or MatMul of a few rows against constant weights (a
// classifier's Linear layers at a small batch): every output is one dot
// product of an input row with a column of the weights, laid out at compile
// time as rows of k contiguous floats, so that a worker's columns are one
// sequential stream of weights and each is read once for all the rows.
// mmStep would pack the rows into MR-row panels and run micro-kernels made
// for many rows over them.
type mmGemvStep struct {
	rows, k, cols int
	l, dst        int
	lrs           int       // L's row stride; its columns are contiguous
	w             []float32 // column j of R (times alpha) at w[j*k:]
	colBias       []float32
	adds          []mmAdd
	act           act
}

// gemvMaxRows is the most rows a product runs as dot products. Each
// further row is another pass of dot products over weights already in
// cache, where mmStep's 6-row panels cost the same for 1 to 6 rows: on
// one core of a Zen 5 VM the classifier's shapes ran 1.6-2x faster as
// dot products at 1 row, 1.2x at 2, level at 3 and slower from 4 (the
// 16-core Xeon host, where streaming the weights costs more per core,
// may favour a larger bound: BenchmarkGemv).
const gemvMaxRows = 2

// gemvFits reports whether s, built with its epilogue but not yet with
// its constant R, runs as dot products: few rows of an L read along its
// rows (not transposed), one product, the output row-major.
func gemvFits(s *mmStep) bool {
	return s.batch == 1 && s.rows <= gemvMaxRows && s.lcs == 1 && s.ocs == 1 && s.ors == s.cols
}

// newMMGemvStep returns the dot-product step computing what s computes,
// with R the constant input (k x n through strides rs, cs) times alpha.
func newMMGemvStep(nc *nodeCtx, s *mmStep, input, rs, cs int, alpha float32) (*mmGemvStep, error) {
	w, err := gemvWeights(nc, input, s.k, s.cols, rs, cs, alpha)
	if err != nil {
		return nil, err
	}
	return &mmGemvStep{
		rows: s.rows, k: s.k, cols: s.cols, l: s.l, dst: s.dst, lrs: s.lrs,
		w: w, colBias: s.colBias, adds: s.adds, act: s.act,
	}, nil
}

// gemvWeights lays out the constant input (as k x n through strides rs,
// cs, times alpha) as n rows of k, in memory that may be backed by huge
// pages (the whole matrix is streamed every forward). Plans share it
// through the weight cache.
func gemvWeights(nc *nodeCtx, input int, k, n, rs, cs int, alpha float32) ([]float32, error) {
	t := nc.n.Input(input).Const
	nc.consumed(input)
	wf, err := nc.c.p.weights.floats(t)
	if err != nil {
		return nil, err
	}
	form := fmt.Sprintf("gemvR %d %d %d %d %g", k, n, rs, cs, alpha)
	v, err := nc.c.p.weights.derived(t, form, func(v any) int64 { return 4 * int64(len(v.([]float32))) }, func() (any, error) {
		d := hugepage.Float32s(k * n)
		for j := range n {
			row := d[j*k : (j+1)*k]
			for kk := range row {
				row[kk] = alpha * wf[kk*rs+j*cs]
			}
		}
		return d, nil
	})
	if err != nil {
		return nil, err
	}
	return v.([]float32), nil
}

func (s *mmGemvStep) run(x *Exec) error {
	// At least 64K multiply-adds a task: a task of fewer columns costs
	// more to hand over than to compute.
	x.parRange(s, s.cols, max(8, (64<<10)/max(1, s.k*s.rows)))
	return nil
}

// rng computes output columns [lo, hi) of every row.
func (s *mmGemvStep) rng(x *Exec, _, lo, hi int) {
	lv, out := x.f32(s.l), x.f32(s.dst)
	k := s.k
	for j := lo; j < hi; j++ {
		w := s.w[j*k : (j+1)*k]
		for i := range s.rows {
			out[i*s.cols+j] = vec.Dot(w, lv[i*s.lrs:i*s.lrs+k])
		}
	}
	for i := range s.rows {
		o := out[i*s.cols+lo : i*s.cols+hi]
		if s.colBias != nil {
			vec.Add(o, o, s.colBias[lo:hi])
		}
		for _, a := range s.adds {
			src := x.f32(a.v)
			off := i*a.rs + lo*a.cs
			if a.cs == 1 && a.scale == 1 {
				vec.Add(o, o, src[off:off+len(o)])
				continue
			}
			for j := range o {
				o[j] += a.scale * src[off+j*a.cs]
			}
		}
		s.act.apply(o)
	}
}
