package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	cu "goinfer/internal/cuda"
	"goinfer/internal/tensor"
)

// fusedPaths says which fused paths a model uses: the cuBLASLt epilogues
// and the fused attention kernels. checkFused decides them at load by
// running each on a small problem with a known answer, so that a path
// that computes wrong on this GPU, driver or library version (an enum
// cuBLASLt reads otherwise, a kernel a new architecture breaks) costs
// speed, not correctness: the plan falls back to cuBLAS with the epilogue
// kernel and to unfused attention.
type fusedPaths struct {
	lt, attn bool
	ldm      bool     // the tensor-core attention's ldmatrix variant passed
	split    bool     // so did the key-split attention for few query tiles
	sms      int      // the GPU's multiprocessors (0: unknown: no key-split attention)
	pdl      bool     // graph.cu's kernels launch as programmatic dependents (checkPDL)
	why      []string // what failed, for the model's log
}

// checkScratch is the device memory of one check, freed together.
type checkScratch struct {
	rt   *cu.Runtime
	bufs []cu.DevPtr
}

func (c *checkScratch) upload(b []byte) (cu.DevPtr, error) {
	p, err := c.rt.Malloc(int64(max(len(b), 16)))
	if err != nil {
		return 0, err
	}
	c.bufs = append(c.bufs, p)
	return p, c.rt.MemcpyHtoD(p, b)
}

func (c *checkScratch) free() {
	for _, p := range c.bufs {
		c.rt.Free(p)
	}
}

// values draws n values in [-1, 1] and rounds them to dt, returning the
// rounded values and their bytes.
func checkValues(r *rand.Rand, n int, dt tensor.DType) ([]float64, []byte) {
	f := make([]float32, n)
	for i := range f {
		f[i] = float32(2*r.Float64() - 1)
	}
	b := encode(f, dt)
	t := tensor.New(dt, n)
	copy(t.Data, b)
	g, _ := t.ToFloat32()
	out := make([]float64, n)
	for i, x := range g {
		out[i] = float64(x)
	}
	return out, b
}

// download reads n values of dt from p.
func (c *checkScratch) download(p cu.DevPtr, n int, dt tensor.DType) ([]float64, error) {
	t := tensor.New(dt, n)
	if err := c.rt.MemcpyDtoH(t.Data, p); err != nil {
		return nil, err
	}
	f, err := t.ToFloat32()
	if err != nil {
		return nil, err
	}
	out := make([]float64, n)
	for i, x := range f {
		out[i] = float64(x)
	}
	return out, nil
}

// checkTolerance is max|got-want|/max|want| a fused path may reach on the
// checks: the storage precision's rounding (and TF32's), not a bug's.
func (m *graphModel) checkTolerance() float64 {
	if m.prec.elem == 2 {
		return 2e-2
	}
	return 5e-3
}

// checkFused runs the checks on a stream of its own.
func (m *graphModel) checkFused() fusedPaths {
	fp := fusedPaths{}
	rt := m.dev.rt
	s, err := rt.StreamCreate()
	if err != nil {
		fp.why = append(fp.why, fmt.Sprintf("no stream for the checks: %v", err))
		return fp
	}
	defer rt.StreamDestroy(s)
	if sms, err := m.dev.rt.DeviceAttribute(cu.AttrMultiProcessorCount, m.dev.ordinal); err != nil {
		fp.why = append(fp.why, fmt.Sprintf("no key-split attention: the SM count: %v", err))
	} else {
		fp.sms = sms
	}
	var why string
	if fp.pdl, why = m.checkPDL(); why != "" {
		fp.why = append(fp.why, why)
	}
	if err := m.checkLt(s); err != nil {
		fp.why = append(fp.why, fmt.Sprintf("cuBLASLt epilogues not used: %v", err))
	} else {
		fp.lt = true
	}
	base, ldm := []attnKernel{{m.kern.attn, 256, 72, 8}}, []attnKernel(nil)
	if m.kern.attnMMA64 != 0 {
		// A head size of 36 (no multiple of 8) takes the element loads, 64
		// and 96 the vector loads; 36 and 96 pad the kernel's head size.
		base = []attnKernel{{m.kern.attnMMA64, 128, 36, 64}, {m.kern.attnMMA64, 128, 64, 64}, {m.kern.attnMMA128, 128, 96, 64}}
		ldm = []attnKernel{{m.kern.attnLdm64, 128, 36, 64}, {m.kern.attnLdm64, 128, 64, 64}, {m.kern.attnLdm128, 128, 96, 64}}
	}
	if ldm != nil {
		if err := m.checkAttention(s, ldm); err != nil {
			fp.why = append(fp.why, fmt.Sprintf("ldmatrix attention not used: %v", err))
		} else {
			fp.ldm, fp.attn = true, true
		}
	}
	if fp.ldm && m.kern.attnSplit64 != 0 {
		// 75 keys leave the last of the four warps without a chunk.
		split := []attnKernel{{m.kern.attnSplit64, 128, 36, 16}, {m.kern.attnSplit64, 128, 64, 16}}
		if err := m.checkAttention(s, split); err != nil {
			fp.why = append(fp.why, fmt.Sprintf("key-split attention not used: %v", err))
		} else {
			fp.split = true
		}
	}
	if !fp.attn {
		if err := m.checkAttention(s, base); err != nil {
			fp.why = append(fp.why, fmt.Sprintf("fused attention not used: %v", err))
		} else {
			fp.attn = true
		}
	}
	return fp
}

// attnKernel is an attention kernel with its launch shape and the head
// size to check it on.
type attnKernel struct {
	fn         cu.Function
	block, d   int
	rowsPerBlk int
}

// checkLt runs the epilogues the planner fuses (bias, bias + ReLU, bias +
// GELU with a residual C, residual alone), A stored both ways.
func (m *graphModel) checkLt(s cu.Stream) error {
	lt := m.libs.BLASLt
	if lt == nil {
		return errors.New("cuBLASLt did not load")
	}
	h, err := lt.Create()
	if err != nil {
		return err
	}
	defer lt.Destroy(h)
	sc := &checkScratch{rt: m.dev.rt}
	defer sc.free()
	dt := m.prec.tensorDType
	typ := cu.CudaR32F
	if m.prec.elem == 2 {
		typ = cu.CudaR16F
		if dt == tensor.BFloat16 {
			typ = cu.CudaR16BF
		}
	}
	const M, N, K = 24, 16, 40
	r := rand.New(rand.NewPCG(5, 7))
	a, ab := checkValues(r, M*K, dt)
	b, bb := checkValues(r, K*N, dt)
	c, cb := checkValues(r, M*N, dt)
	bias, biasb := checkValues(r, M, dt)
	ws, err := m.dev.rt.Malloc(blasWorkspace)
	if err != nil {
		return err
	}
	defer m.dev.rt.Free(ws)
	var pa, pb, pc, pbias, pd cu.DevPtr
	for _, u := range []struct {
		dst *cu.DevPtr
		b   []byte
	}{{&pa, ab}, {&pb, bb}, {&pc, cb}, {&pbias, biasb}, {&pd, make([]byte, len(cb))}} {
		if *u.dst, err = sc.upload(u.b); err != nil {
			return err
		}
	}
	for _, v := range []struct {
		transA   bool
		epi      int
		residual bool
	}{
		{true, cu.LtEpilogueBias, false},
		{false, cu.LtEpilogueReLUBias, false},
		{true, cu.LtEpilogueGELUBias, true},
		{false, cu.LtEpilogueDefault, true},
	} {
		lda := M
		if v.transA {
			lda = K
		}
		var bp cu.DevPtr
		if v.epi != cu.LtEpilogueDefault {
			bp = pbias
		}
		mm, err := lt.NewMatmul(h, cu.LtProblem{TransA: v.transA, M: M, N: N, K: K, LdA: lda, LdB: K, LdC: M, Type: typ,
			Compute: m.prec.blasComp, Epilogue: v.epi, Bias: bp, Workspace: blasWorkspace})
		if err != nil {
			return err
		}
		alpha, beta := float32(1), float32(0)
		cp := pd
		if v.residual {
			beta, cp = 1, pc
		}
		err = lt.Matmul(h, mm, &alpha, &beta, pa, pb, cp, pd, ws, blasWorkspace, s)
		lt.DestroyMatmul(mm)
		if err != nil {
			return err
		}
		if err := m.dev.rt.StreamSynchronize(s); err != nil {
			return err
		}
		got, err := sc.download(pd, M*N, dt)
		if err != nil {
			return err
		}
		want := make([]float64, M*N)
		for i := 0; i < M; i++ {
			for j := 0; j < N; j++ {
				acc := 0.0
				for l := 0; l < K; l++ {
					ai := i + l*lda
					if v.transA {
						ai = l + i*lda
					}
					av := a[ai]
					acc += av * b[l+j*K]
				}
				if v.residual {
					acc += c[i+j*M]
				}
				if v.epi != cu.LtEpilogueDefault {
					acc += bias[i]
				}
				switch v.epi {
				case cu.LtEpilogueReLUBias:
					acc = math.Max(acc, 0)
				case cu.LtEpilogueGELUBias:
					acc = 0.5 * acc * (1 + math.Erf(acc/math.Sqrt2))
				}
				want[i+j*M] = acc
			}
		}
		if e := checkErr(got, want); !(e <= m.checkTolerance()) {
			return fmt.Errorf("epilogue %d (A transposed %v, residual %v): relative error %.3g", v.epi, v.transA, v.residual, e)
		}
	}
	return nil
}

// checkAttention runs the attention kernels the plans use on two heads of
// 70 queries and 75 keys (partial tiles).
func (m *graphModel) checkAttention(s cu.Stream, ks []attnKernel) error {
	dt := m.prec.tensorDType
	const B, S, L = 2, 70, 75
	r := rand.New(rand.NewPCG(9, 11))
	for _, k := range ks {
		sc := &checkScratch{rt: m.dev.rt}
		err := func() error {
			D := k.d
			q, qb := checkValues(r, B*S*D, dt)
			kk, kb := checkValues(r, B*L*D, dt)
			v, vb := checkValues(r, B*L*D, dt)
			meta := []int32{1, B, S, L, int32(D), int32(D),
				0, int32(S * D), int32(D), 1, 0, int32(L * D), int32(D), 1, 0, int32(L * D), int32(D), 1, 0, int32(S * D), int32(D), 1}
			mb := make([]byte, 4*len(meta))
			for i, x := range meta {
				u := uint32(x)
				mb[4*i], mb[4*i+1], mb[4*i+2], mb[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
			}
			var pq, pk, pv, pm, po cu.DevPtr
			var err error
			for _, u := range []struct {
				dst *cu.DevPtr
				b   []byte
			}{{&pq, qb}, {&pk, kb}, {&pv, vb}, {&pm, mb}, {&po, make([]byte, len(qb))}} {
				if *u.dst, err = sc.upload(u.b); err != nil {
					return err
				}
			}
			scale := 1 / math.Sqrt(float64(D))
			grid := (B*S + k.rowsPerBlk - 1) / k.rowsPerBlk
			if k.rowsPerBlk >= 16 {
				// The tensor-core kernels tile each head's queries.
				grid = B * ((S + k.rowsPerBlk - 1) / k.rowsPerBlk)
			}
			args := f32arg(new(cu.KernelArgs).Ptr(po).Ptr(pq).Ptr(pk).Ptr(pv).Ptr(pm), float32(scale))
			if err := m.libs.Driver.Launch(k.fn, grid, k.block, s, args); err != nil {
				return err
			}
			if err := m.dev.rt.StreamSynchronize(s); err != nil {
				return err
			}
			got, err := sc.download(po, B*S*D, dt)
			if err != nil {
				return err
			}
			want := make([]float64, B*S*D)
			p := make([]float64, L)
			for b := 0; b < B; b++ {
				for i := 0; i < S; i++ {
					mx := math.Inf(-1)
					for j := 0; j < L; j++ {
						dot := 0.0
						for d := 0; d < D; d++ {
							dot += q[(b*S+i)*D+d] * kk[(b*L+j)*D+d]
						}
						p[j] = scale * dot
						mx = math.Max(mx, p[j])
					}
					sum := 0.0
					for j := range p {
						p[j] = math.Exp(p[j] - mx)
						sum += p[j]
					}
					for d := 0; d < D; d++ {
						acc := 0.0
						for j := range p {
							acc += p[j] * v[(b*L+j)*D+d]
						}
						want[(b*S+i)*D+d] = acc / sum
					}
				}
			}
			if e := checkErr(got, want); !(e <= m.checkTolerance()) {
				return fmt.Errorf("head size %d: relative error %.3g", D, e)
			}
			return nil
		}()
		sc.free()
		if err != nil {
			return err
		}
	}
	return nil
}

// checkErr is max|got-want| / max|want| (NaN when got has one).
func checkErr(got, want []float64) float64 {
	var d, w float64
	for i := range want {
		if math.IsNaN(got[i]) {
			return math.NaN()
		}
		d = math.Max(d, math.Abs(got[i]-want[i]))
		w = math.Max(w, math.Abs(want[i]))
	}
	if w == 0 {
		return d
	}
	return d / w
}
