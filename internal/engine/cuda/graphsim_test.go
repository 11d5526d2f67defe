package cuda

import (
	"fmt"
	"math"
	"testing"

	"goinfer/internal/ir"
)

// simulate runs a plan on the CPU in float64 with exactly the semantics
// of the GPU steps: the arena laid out by the plan's slots (so that
// liveness mistakes corrupt results), the strided kernel's index
// descriptions, cuBLAS's column-major call as gemmCallOf makes it, and a
// direct convolution. It checks the planner's lowering without a GPU.
func simulate(t testing.TB, p *gplan, input []float64) [][]float64 {
	t.Helper()
	offs, size := p.arenaLayout()
	el := int64(p.elem)
	arena := make([]float64, size/el+1)
	consts := map[int][]float64{}
	// view returns the backing slice and base element of value v.
	view := func(v int) ([]float64, int64) {
		if v < 0 {
			return nil, 0
		}
		r := p.root(v)
		val := &p.vals[r]
		switch val.kind {
		case gConst:
			if c, ok := consts[r]; ok {
				return c, p.offset(v)
			}
			f, err := val.cnst.ToFloat32()
			if err != nil {
				t.Fatal(err)
			}
			c := make([]float64, len(f))
			for i, x := range f {
				c[i] = float64(x)
			}
			consts[r] = c
			return c, p.offset(v)
		case gArena:
			return arena, offs[val.slot]/el + p.offset(v)
		}
		t.Fatalf("value %d has no storage", v)
		return nil, 0
	}
	inBuf, inBase := view(p.input)
	copy(inBuf[inBase:], input)
	for _, s := range p.steps {
		out, ob := view(s.out)
		ob += s.outOff
		a, ab := view(s.a)
		ab += s.aOff
		b, bb := view(s.b)
		bb += s.bOff
		switch s.kind {
		case stEW:
			if s.chanScale {
				for i := int64(0); i < s.n; i++ {
					img, c := i/int64(s.inner), i%int64(s.channels)
					out[ob+i] = simBinary(s.op, a[ab+i], b[bb+img*int64(s.channels)+c])
				}
				continue
			}
			if s.flat {
				for i := int64(0); i < s.n; i++ {
					var x, y float64
					if s.op != ewFill {
						x = a[ab+i]
					}
					if s.op >= ewAdd {
						j := i
						if s.bScalar {
							j = 0
						}
						y = simBinary(s.op, x, b[bb+j])
					} else {
						y = simUnary(s.op, x, float64(s.p0), float64(s.p1))
					}
					out[ob+i] = y
				}
				continue
			}
			m := s.meta
			for i := int64(0); i < s.n; i++ {
				r, oi, ai, bi := i, int64(0), int64(0), int64(0)
				for d := maxDims - 1; d >= 0; d-- {
					c := r % int64(m[d])
					r /= int64(m[d])
					oi += c * int64(m[maxDims+d])
					ai += c * int64(m[2*maxDims+d])
					bi += c * int64(m[3*maxDims+d])
				}
				var x, y float64
				if s.op != ewFill {
					x = a[ab+ai]
				}
				if s.op >= ewAdd {
					y = simBinary(s.op, x, b[bb+bi])
				} else {
					y = simUnary(s.op, x, float64(s.p0), float64(s.p1))
				}
				out[ob+oi] = y
			}
		case stChain:
			m := s.cmeta
			nops := int(m[(3+maxChain)*maxDims])
			type operand struct {
				buf  []float64
				base int64
			}
			bs := make([]operand, nops)
			for k, c := range s.chain {
				bs[k].buf, bs[k].base = view(c.b)
				bs[k].base += c.bOff
			}
			for i := int64(0); i < s.n; i++ {
				r, oi, ai := i, int64(0), int64(0)
				bi := make([]int64, nops)
				for d := maxDims - 1; d >= 0; d-- {
					c := r % int64(m[d])
					r /= int64(m[d])
					oi += c * int64(m[maxDims+d])
					ai += c * int64(m[2*maxDims+d])
					for k := range bi {
						bi[k] += c * int64(m[(3+k)*maxDims+d])
					}
				}
				v := a[ab+ai]
				base := (3 + maxChain) * maxDims
				for k := 0; k < nops; k++ {
					op := int(m[base+1+k])
					if op >= ewAdd {
						v = simBinary(op, v, bs[k].buf[bs[k].base+bi[k]])
					} else {
						p0 := float64(math.Float32frombits(uint32(m[base+1+maxChain+k])))
						p1 := float64(math.Float32frombits(uint32(m[base+1+2*maxChain+k])))
						v = simUnary(op, v, p0, p1)
					}
				}
				out[ob+oi] = v
			}
		case stAffine:
			res, rb := view(s.res)
			for i := int64(0); i < s.n; i++ {
				c := (i / int64(s.inner)) % int64(s.channels)
				ai, oi := i, i
				if s.rowLen > 0 {
					// Rows of rowLen elements, aRow and oRow apart.
					r, j := i/int64(s.rowLen), i%int64(s.rowLen)
					ai, oi = r*s.aRow+j, r*s.oRow+j
					if res != nil {
						t.Fatalf("%s: a strided affine step with a residual", s.node)
					}
				}
				v := a[ab+ai]
				if s.scale != nil {
					v *= float64(s.scale[c])
				}
				if s.shift != nil {
					v += float64(s.shift[c])
				}
				if res != nil {
					v += res[rb+i]
				}
				out[ob+oi] = simUnary(s.op, v, float64(s.p0), float64(s.p1))
			}
		case stPool:
			g := s.pool
			for i := int64(0); i < s.n; i++ {
				ox := int(i % int64(g.ow))
				oy := int((i / int64(g.ow)) % int64(g.oh))
				pl := i / int64(g.ow*g.oh)
				base, cs := ab+pl*int64(g.h*g.w), int64(1)
				if g.c > 0 {
					ch := i % int64(g.c)
					q := i / int64(g.c)
					ox = int(q % int64(g.ow))
					oy = int((q / int64(g.ow)) % int64(g.oh))
					base, cs = ab+(q/int64(g.ow*g.oh))*int64(g.h*g.w*g.c)+ch, int64(g.c)
				}
				y0, x0 := oy*g.sh-g.ph, ox*g.sw-g.pw
				acc, cnt := 0.0, 0
				if g.max {
					acc = math.Inf(-1)
				}
				for ky := 0; ky < g.kh; ky++ {
					iy := y0 + ky*g.dh
					if iy < 0 || iy >= g.h {
						continue
					}
					for kx := 0; kx < g.kw; kx++ {
						ix := x0 + kx*g.dw
						if ix < 0 || ix >= g.w {
							continue
						}
						v := a[base+int64(iy*g.w+ix)*cs]
						if g.max {
							acc = math.Max(acc, v)
						} else {
							acc += v
						}
						cnt++
					}
				}
				if !g.max {
					if g.countPad {
						ye, xe := min(y0+(g.kh-1)*g.dh+1, g.h+g.peh), min(x0+(g.kw-1)*g.dw+1, g.w+g.pew)
						cnt = ((ye - y0 + g.dh - 1) / g.dh) * ((xe - x0 + g.dw - 1) / g.dw)
					}
					acc /= float64(cnt)
				}
				out[ob+i] = acc
			}
		case stReduce, stSoftmax, stLayerNorm:
			for r := 0; r < s.rows; r++ {
				row := a[ab+int64(r*s.rowLen) : ab+int64((r+1)*s.rowLen)]
				switch s.kind {
				case stReduce:
					acc := 0.0
					if s.redOp == 1 {
						acc = math.Inf(-1)
					}
					for _, v := range row {
						if s.redOp == 1 {
							acc = math.Max(acc, v)
						} else {
							acc += v
						}
					}
					if s.redOp == 0 {
						acc /= float64(s.rowLen)
					}
					out[ob+int64(r)] = acc
				case stSoftmax:
					mx := math.Inf(-1)
					for _, v := range row {
						mx = math.Max(mx, v)
					}
					sum := 0.0
					for _, v := range row {
						sum += math.Exp(v - mx)
					}
					dst := out[ob+int64(r*s.rowLen):]
					for j, v := range row {
						if s.redOp == 1 {
							dst[j] = v - mx - math.Log(sum)
						} else {
							dst[j] = math.Exp(v-mx) / sum
						}
					}
				case stLayerNorm:
					mean, q := 0.0, 0.0
					for _, v := range row {
						mean += v
					}
					mean /= float64(len(row))
					for _, v := range row {
						q += (v - mean) * (v - mean)
					}
					inv := 1 / math.Sqrt(q/float64(len(row))+float64(s.eps))
					dst := out[ob+int64(r*s.rowLen):]
					for j, v := range row {
						y := (v - mean) * inv * float64(s.scale[j])
						if s.shift != nil {
							y += float64(s.shift[j])
						}
						dst[j] = y
					}
				}
			}
		case stPadCL:
			hw := int64(s.rowLen)
			for px := int64(0); px < s.n; px++ {
				img, q := px/hw, px%hw
				for ch := 0; ch < s.padTo; ch++ {
					v := 0.0
					if ch < s.channels {
						v = a[ab+(img*int64(s.channels)+int64(ch))*hw+q]
					}
					out[ob+px*int64(s.padTo)+int64(ch)] = v
				}
			}
		case stReduceCL:
			for i := int64(0); i < s.n; i++ {
				bt, ch := i/int64(s.channels), i%int64(s.channels)
				acc := 0.0
				if s.redOp == 1 {
					acc = math.Inf(-1)
				}
				for q := 0; q < s.rowLen; q++ {
					v := a[ab+(bt*int64(s.rowLen)+int64(q))*int64(s.channels)+ch]
					if s.redOp == 1 {
						acc = math.Max(acc, v)
					} else {
						acc += v
					}
				}
				if s.redOp == 0 {
					acc /= float64(s.rowLen)
				}
				out[ob+i] = acc
			}
		case stDW:
			g := s.conv
			res, rb := view(s.res)
			for i := int64(0); i < s.n; i++ {
				c := int(i % int64(g.c))
				q := int(i / int64(g.c))
				ox, oy, bt := q%g.ow, (q/g.ow)%g.oh, q/(g.ow*g.oh)
				acc := 0.0
				if s.shift != nil {
					acc = float64(s.shift[c])
				}
				for ky := 0; ky < g.kh; ky++ {
					iy := oy*g.strH - g.padH + ky*g.dilH
					if iy < 0 || iy >= g.h {
						continue
					}
					for kx := 0; kx < g.kw; kx++ {
						ix := ox*g.strW - g.padW + kx*g.dilW
						if ix < 0 || ix >= g.w {
							continue
						}
						wi := (c*g.kh+ky)*g.kw + kx
						if s.vec {
							wi = (ky*g.kw+kx)*g.c + c
						}
						// The prologue (graph.cu's dw_pre), from the description as uploaded.
						xv := simUnary(int(s.meta[dwMetaPre]), a[ab+int64(((bt*g.h+iy)*g.w+ix)*g.c+c)],
							float64(math.Float32frombits(uint32(s.meta[dwMetaPre+1]))), float64(math.Float32frombits(uint32(s.meta[dwMetaPre+2]))))
						acc += xv * float64(s.scale[wi])
					}
				}
				if res != nil {
					acc += res[rb+i]
				}
				out[ob+i] = simUnary(s.op, acc, float64(s.p0), float64(s.p1))
			}
		case stFC:
			g := s.conv
			for i := int64(0); i < s.n; i++ {
				bt, k := int(i)/g.k, int(i)%g.k
				acc := 0.0
				if s.shift != nil {
					acc = float64(s.shift[k])
				}
				for c := 0; c < g.c; c++ {
					acc += a[ab+int64(bt*g.c+c)] * float64(s.scale[k*g.c+c])
				}
				out[ob+i] = simUnary(s.op, acc, float64(s.p0), float64(s.p1))
			}
		case stGemm:
			g := s.gemm
			c := gemmCallOf(g)
			// cuBLAS: C (g.n x g.m, ld g.n) = op(X) op(Y), X = B's memory,
			// Y = A's memory.
			x, xb, y, yb := b, bb, a, ab
			for bt := 0; bt < g.batch; bt++ {
				for i := 0; i < g.n; i++ {
					for j := 0; j < g.m; j++ {
						sum := 0.0
						for l := 0; l < g.k; l++ {
							var xv, yv float64
							if c.opA == opN {
								xv = x[xb+int64(bt)*c.strideA+int64(i+l*c.ldA)]
							} else {
								xv = x[xb+int64(bt)*c.strideA+int64(l+i*c.ldA)]
							}
							if c.opB == opN {
								yv = y[yb+int64(bt)*c.strideB+int64(l+j*c.ldB)]
							} else {
								yv = y[yb+int64(bt)*c.strideB+int64(j+l*c.ldB)]
							}
							sum += xv * yv
						}
						v := float64(g.alpha) * sum
						if s.fused {
							// The epilogue in the call: scale (folded,
							// graphfold.go) and bias per output column,
							// residual (C, beta 1), activation.
							if s.scale != nil {
								v *= float64(s.scale[i])
							}
							if s.shift != nil {
								v += float64(s.shift[i])
							}
							if res, rb := view(s.res); res != nil {
								v += res[rb+int64(bt)*c.strideC+int64(i+j*g.n)]
							}
							v = simUnary(s.op, v, float64(s.p0), float64(s.p1))
						}
						out[ob+int64(bt)*c.strideC+int64(i+j*g.n)] = v
					}
				}
			}
		case stConv:
			g := s.conv
			w, wb := view(g.weight)
			cpg, kpg := g.c/g.groups, g.k/g.groups
			// The layout cuDNN is told, whatever the values claim.
			layout := func(sh []int) []int64 {
				if g.nhwc {
					return []int64{int64(sh[1] * sh[2] * sh[3]), 1, int64(sh[3] * sh[1]), int64(sh[1])}
				}
				return contiguous(sh)
			}
			cx := g.c
			if g.cpad > 0 {
				cx = g.cpad
			}
			xs, ys := layout([]int{g.n, cx, g.h, g.w}), layout([]int{g.n, g.k, g.oh, g.ow})
			for n := 0; n < g.n; n++ {
				for k := 0; k < g.k; k++ {
					grp := k / kpg
					for oy := 0; oy < g.oh; oy++ {
						for ox := 0; ox < g.ow; ox++ {
							sum := 0.0
							for c := 0; c < cpg; c++ {
								ic := grp*cpg + c
								for ky := 0; ky < g.kh; ky++ {
									iy := oy*g.strH - g.padH + ky*g.dilH
									if iy < 0 || iy >= g.h {
										continue
									}
									for kx := 0; kx < g.kw; kx++ {
										ix := ox*g.strW - g.padW + kx*g.dilW
										if ix < 0 || ix >= g.w {
											continue
										}
										sum += a[ab+int64(n)*xs[0]+int64(ic)*xs[1]+int64(iy)*xs[2]+int64(ix)*xs[3]] * w[wb+int64(((k*cpg+c)*g.kh+ky)*g.kw+kx)]
									}
								}
							}
							oi := int64(n)*ys[0] + int64(k)*ys[1] + int64(oy)*ys[2] + int64(ox)*ys[3]
							if s.fused {
								sum += float64(s.shift[k])
								if res, rb := view(s.res); res != nil {
									sum += res[rb+oi]
								}
								sum = simUnary(s.op, sum, 0, 0)
							}
							out[ob+oi] = sum
						}
					}
				}
			}
		case stAttn:
			// As the kernel reads its index description: dims, then the
			// (b1, b2, row, column) strides of q, k, v and out.
			m := s.meta
			v, vb := view(s.res)
			at := func(st int, i0, i1, i2, i3 int) int64 {
				return int64(i0)*int64(m[st]) + int64(i1)*int64(m[st+1]) + int64(i2)*int64(m[st+2]) + int64(i3)*int64(m[st+3])
			}
			sc := make([]float64, m[3])
			for b1 := 0; b1 < int(m[0]); b1++ {
				for b2 := 0; b2 < int(m[1]); b2++ {
					for i := 0; i < int(m[2]); i++ {
						mx := math.Inf(-1)
						for j := range sc {
							dot := 0.0
							for d := 0; d < int(m[4]); d++ {
								dot += a[ab+at(6, b1, b2, i, d)] * b[bb+at(10, b1, b2, j, d)]
							}
							sc[j] = float64(s.p0) * dot
							mx = math.Max(mx, sc[j])
						}
						sum := 0.0
						for j := range sc {
							sc[j] = math.Exp(sc[j] - mx)
							sum += sc[j]
						}
						for d := 0; d < int(m[5]); d++ {
							acc := 0.0
							for j := range sc {
								acc += sc[j] * v[vb+at(14, b1, b2, j, d)]
							}
							out[ob+at(18, b1, b2, i, d)] = acc / sum
						}
					}
				}
			}
		default:
			t.Fatalf("step kind %s", s.kind)
		}
	}
	var res [][]float64
	for _, o := range p.outputs {
		buf, base := view(o)
		res = append(res, append([]float64(nil), buf[base:base+p.vals[o].elems]...))
	}
	return res
}

func simUnary(op int, x, p0, p1 float64) float64 {
	sig := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
	switch op {
	case ewCopy:
		return x
	case ewRelu:
		return math.Max(x, 0)
	case ewSigmoid:
		return sig(x)
	case ewTanh:
		return math.Tanh(x)
	case ewExp:
		return math.Exp(x)
	case ewLog:
		return math.Log(x)
	case ewSqrt:
		return math.Sqrt(x)
	case ewRecip:
		return 1 / x
	case ewNeg:
		return -x
	case ewAbs:
		return math.Abs(x)
	case ewErf:
		return math.Erf(x)
	case ewHardSwish:
		return x * math.Min(math.Max(x+3, 0), 6) / 6
	case ewSiLU:
		return x * sig(x)
	case ewHardSigmoid:
		return math.Max(0, math.Min(1, p0*x+p1))
	case ewGELU:
		return 0.5 * x * (1 + math.Erf(x/math.Sqrt2))
	case ewGELUTanh:
		return 0.5 * x * (1 + math.Tanh(0.7978845608028654*(x+0.044715*x*x*x)))
	case ewClip:
		return math.Min(math.Max(x, p0), p1)
	case ewLeaky:
		if x < 0 {
			return p0 * x
		}
		return x
	case ewFill:
		return p0
	case ewSoftplus:
		return math.Log1p(math.Exp(x))
	case ewFloor:
		return math.Floor(x)
	case ewCeil:
		return math.Ceil(x)
	case ewMish:
		return x * math.Tanh(math.Log1p(math.Exp(x)))
	}
	panic(fmt.Sprintf("unary op %d", op))
}

func simBinary(op int, a, b float64) float64 {
	switch op {
	case ewAdd:
		return a + b
	case ewSub:
		return a - b
	case ewMul:
		return a * b
	case ewDiv:
		return a / b
	case ewPow:
		return math.Pow(a, b)
	case ewMax:
		return math.Max(a, b)
	case ewMin:
		return math.Min(a, b)
	case ewPRelu:
		if a < 0 {
			return a * b
		}
		return a
	}
	panic(fmt.Sprintf("binary op %d", op))
}

// relErr64 is max|got-want| / max|want|.
func relErr64(got, want []float64) float64 {
	var d, m float64
	for i := range want {
		d = math.Max(d, math.Abs(got[i]-want[i]))
		m = math.Max(m, math.Abs(want[i]))
	}
	if m == 0 {
		return d
	}
	return d / m
}

// evalRef evaluates the unoptimized graph bound to batch in float64.
func evalRef(t testing.TB, g *ir.Graph, batch int, input *ir.Array) []*ir.Array {
	t.Helper()
	b, err := ir.Bind(g, batch)
	if err != nil {
		t.Fatal(err)
	}
	outs, err := ir.Evaluate(t.Context(), b, map[string]*ir.Array{b.Inputs[0].Name: input})
	if err != nil {
		t.Fatal(err)
	}
	return outs
}
