package ir

import (
	"fmt"

	"goinfer/internal/tensor"
)

// Kind implements Op.
func (*Gemm) Kind() string { return "Gemm" }

// dims returns Gemm's M, K, N from A's and B's shapes.
func (g *Gemm) dims(a, b tensor.Shape) (m, k, n int, err error) {
	if len(a) != 2 || len(b) != 2 {
		return 0, 0, 0, fmt.Errorf("A %v and B %v must both be 2-D", a, b)
	}
	m, k = a[0], a[1]
	if g.TransA {
		m, k = k, m
	}
	kb, n := b[0], b[1]
	if g.TransB {
		kb, n = n, kb
	}
	if k != kb {
		return 0, 0, 0, fmt.Errorf("A %v (transA=%v) and B %v (transB=%v) disagree on K: %d vs %d", a, g.TransA, b, g.TransB, k, kb)
	}
	return m, k, n, nil
}

// Infer implements Op.
func (g *Gemm) Infer(in []*Value) ([]Type, error) {
	hi := 3
	if g.Epilogue.Residual {
		hi = 4
	}
	if err := wantInputs(in, 2, hi); err != nil {
		return nil, err
	}
	if !isFloatType(in[0].Type.DType) && !isInt(in[0].Type.DType) {
		return nil, fmt.Errorf("input A is %s, want a numeric tensor", in[0].Type)
	}
	if err := sameDTypes(in, "Gemm"); err != nil {
		return nil, err
	}
	m, _, n, err := g.dims(in[0].Type.Shape, in[1].Type.Shape)
	if err != nil {
		return nil, err
	}
	out := Type{DType: in[0].Type.DType, Shape: tensor.Shape{m, n}}
	if c := in2(in, 2); c != nil {
		if s, err := BroadcastShape(out.Shape, c.Type.Shape); err != nil || !s.Equal(out.Shape) {
			return nil, fmt.Errorf("C %s does not broadcast to the output [%d,%d]", c.Type, m, n)
		}
	}
	if err := g.Epilogue.check(in, 3, out); err != nil {
		return nil, err
	}
	return []Type{out}, nil
}

// Eval implements Op.
func (g *Gemm) Eval(in []*Array) ([]*Array, error) {
	if err := inferArrays(g, in); err != nil {
		return nil, err
	}
	a, b := in[0], in[1]
	m, k, n, err := g.dims(a.Shape, b.Shape)
	if err != nil {
		return nil, err
	}
	out := NewArray(a.DType, tensor.Shape{m, n})
	ad, bd := a.Data, b.Data
	if g.TransA {
		ad = transpose2D(ad, k, m)
	}
	if g.TransB {
		bd = transpose2D(bd, n, k)
	}
	matmulInto(out.Data, ad, bd, m, k, n)
	if g.Alpha != 1 {
		for q := range out.Data {
			out.Data[q] *= g.Alpha
		}
	}
	if c := arg(in, 2); c != nil && g.Beta != 0 {
		idx := BroadcastIndex(c.Shape, out.Shape)
		for q := range out.Data {
			out.Data[q] += g.Beta * c.Data[idx[q]]
		}
	}
	if err := g.Epilogue.apply(out, in, 3); err != nil {
		return nil, err
	}
	if isInt(out.DType) {
		out.RoundTo()
	}
	return []*Array{out}, nil
}

// Kind implements Op.
func (*MatMul) Kind() string { return "MatMul" }

// matmulPlan is NumPy's matmul shape logic: 1-D operands are promoted
// (a row for A, a column for B) and the promoted dimension dropped from
// the output; batch dimensions broadcast.
type matmulPlan struct {
	m, k, n          int
	batch            tensor.Shape
	aBatch, bBatch   tensor.Shape
	out              tensor.Shape
	aVector, bVector bool
}

func planMatMul(a, b tensor.Shape) (*matmulPlan, error) {
	if len(a) == 0 || len(b) == 0 {
		return nil, fmt.Errorf("operands %v and %v must have rank 1 or more", a, b)
	}
	p := &matmulPlan{aVector: len(a) == 1, bVector: len(b) == 1}
	if p.aVector {
		a = tensor.Shape{1, a[0]}
	}
	if p.bVector {
		b = tensor.Shape{b[0], 1}
	}
	p.m, p.k = a[len(a)-2], a[len(a)-1]
	kb := b[len(b)-2]
	p.n = b[len(b)-1]
	if p.k != kb {
		return nil, fmt.Errorf("A %v and B %v disagree on the inner dimension: %d vs %d", a, b, p.k, kb)
	}
	p.aBatch, p.bBatch = a[:len(a)-2], b[:len(b)-2]
	batch, err := BroadcastShape(p.aBatch, p.bBatch)
	if err != nil {
		return nil, fmt.Errorf("batch dimensions of A %v and B %v: %w", a, b, err)
	}
	p.batch = batch
	p.out = batch.Clone()
	if !p.aVector {
		p.out = append(p.out, p.m)
	}
	if !p.bVector {
		p.out = append(p.out, p.n)
	}
	return p, nil
}

// Infer implements Op.
func (mm *MatMul) Infer(in []*Value) ([]Type, error) {
	hi := 2
	if !mm.Epilogue.IsZero() || len(in) > 2 {
		hi = 3
	}
	if mm.Epilogue.Residual {
		hi = 4
	}
	if err := wantInputs(in, 2, hi); err != nil {
		return nil, err
	}
	if !isFloatType(in[0].Type.DType) && !isInt(in[0].Type.DType) {
		return nil, fmt.Errorf("input A is %s, want a numeric tensor", in[0].Type)
	}
	if err := sameDTypes(in, "MatMul"); err != nil {
		return nil, err
	}
	p, err := planMatMul(in[0].Type.Shape, in[1].Type.Shape)
	if err != nil {
		return nil, err
	}
	out := Type{DType: in[0].Type.DType, Shape: p.out}
	if b := in2(in, 2); b != nil {
		if s, err := BroadcastShape(out.Shape, b.Type.Shape); err != nil || !s.Equal(out.Shape) {
			return nil, fmt.Errorf("bias %s does not broadcast to the output %s", b.Type, out)
		}
	}
	if err := mm.Epilogue.check(in, 3, out); err != nil {
		return nil, err
	}
	return []Type{out}, nil
}

// Eval implements Op.
func (mm *MatMul) Eval(in []*Array) ([]*Array, error) {
	a, b := in[0], in[1]
	p, err := planMatMul(a.Shape, b.Shape)
	if err != nil {
		return nil, err
	}
	out := NewArray(a.DType, p.out)
	nb := p.batch.NumElements()
	ai := BroadcastIndex(p.aBatch, p.batch)
	bi := BroadcastIndex(p.bBatch, p.batch)
	mk, kn, mn := p.m*p.k, p.k*p.n, p.m*p.n
	parallelFor(nb, func(q int) {
		matmulInto(out.Data[q*mn:(q+1)*mn], a.Data[ai[q]*mk:(ai[q]+1)*mk], b.Data[bi[q]*kn:(bi[q]+1)*kn], p.m, p.k, p.n)
	})
	if bias := arg(in, 2); bias != nil {
		if err := addBroadcast(out, bias); err != nil {
			return nil, fmt.Errorf("bias: %w", err)
		}
	}
	if err := mm.Epilogue.apply(out, in, 3); err != nil {
		return nil, err
	}
	if isInt(out.DType) {
		out.RoundTo()
	}
	return []*Array{out}, nil
}

// matmulInto adds the product of a [m,k] and b [k,n] (row-major) to dst
// [m,n], a row of b at a time so that the inner loop is contiguous.
func matmulInto(dst, a, b []float64, m, k, n int) {
	for i := 0; i < m; i++ {
		row := dst[i*n : (i+1)*n]
		for r := 0; r < k; r++ {
			av := a[i*k+r]
			br := b[r*n : (r+1)*n]
			for j := range row {
				row[j] += av * br[j]
			}
		}
	}
}

// transpose2D returns the [cols,rows] transpose of a [rows,cols] matrix.
func transpose2D(a []float64, rows, cols int) []float64 {
	t := make([]float64, len(a))
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			t[j*rows+i] = a[i*cols+j]
		}
	}
	return t
}
