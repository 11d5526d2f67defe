package cpu

import (
	"goinfer/internal/engine/cpu/gemm"
	"goinfer/internal/engine/cpu/vec"
	"goinfer/internal/tensor"
)

// eltKind is a cheap, memory-bound op run plane by plane.
type eltKind uint8

const (
	eltBN eltKind = iota + 1
	eltReLU
	eltAdd
	eltMaxPool
	eltAvgPool
	eltInput // converts the input buffer to float32
)

// planeChunk is the floats per task of a plane-wise op: big enough to make
// dispatch negligible, small enough to spread over the workers.
const planeChunk = 1 << 14

// eltStep is a batch norm, relu, add or pooling node.
type eltStep struct {
	kind           eltKind
	src, src2, dst int
	c, hw          int // channels and pixels per plane of the input
	scale, shift   []float32
	mp             vec.MaxPool2D // max pooling only
	dtype          tensor.DType  // eltInput only
}

func (s *eltStep) run(in *instance, n int) {
	j := &in.elt
	j.s = s
	j.in, j.out = in.vals[s.src], in.vals[s.dst]
	if s.kind == eltAdd {
		j.in2 = in.vals[s.src2]
	}
	in.runPlanes(j, n*s.c, s.hw)
}

// eltJob is one call of an eltStep (or the input conversion), split into
// tasks of whole planes.
type eltJob struct {
	s       *eltStep
	in, in2 []float32
	out     []float32
	inBytes []byte // eltInput: raw input
	planes  int
	per     int         // planes per task
	rows    [][]float32 // per worker, max pooling's scratch row
}

// runPlanes runs j over planes planes of hw floats each.
func (in *instance) runPlanes(j *eltJob, planes, hw int) {
	j.planes = planes
	j.per = max(1, planeChunk/max(hw, 1))
	tasks := (planes + j.per - 1) / j.per
	in.pool.Run(j, tasks)
}

func (j *eltJob) Run(w, t int) {
	s := j.s
	p0, p1 := t*j.per, min(j.planes, (t+1)*j.per)
	hw := s.hw
	switch s.kind {
	case eltBN:
		for p := p0; p < p1; p++ {
			c := p % s.c
			vec.ScaleShift(j.out[p*hw:(p+1)*hw], j.in[p*hw:(p+1)*hw], s.scale[c], s.shift[c])
		}
	case eltReLU:
		vec.ReLU(j.out[p0*hw:p1*hw], j.in[p0*hw:p1*hw])
	case eltAdd:
		vec.Add(j.out[p0*hw:p1*hw], j.in[p0*hw:p1*hw], j.in2[p0*hw:p1*hw])
	case eltMaxPool:
		ohw := s.mp.OutH * s.mp.OutW
		for p := p0; p < p1; p++ {
			s.mp.Plane(j.out[p*ohw:(p+1)*ohw], j.in[p*hw:(p+1)*hw], j.rows[w])
		}
	case eltAvgPool:
		inv := 1 / float32(hw)
		for p := p0; p < p1; p++ {
			j.out[p] = vec.Sum(j.in[p*hw:(p+1)*hw]) * inv
		}
	case eltInput:
		j.convertInput(p0, p1)
	}
}

// convertInput turns input planes [p0, p1) into float32: float16 widened,
// uint8 pixels scaled to 0..1 and normalized with the ImageNet mean and std.
func (j *eltJob) convertInput(p0, p1 int) {
	s := j.s
	hw := s.hw
	for p := p0; p < p1; p++ {
		o := j.out[p*hw : (p+1)*hw]
		switch s.dtype {
		case tensor.Float16:
			src := j.inBytes[2*p*hw : 2*(p+1)*hw]
			for x := range o {
				o[x] = tensor.F16ToFloat32(uint16(src[2*x]) | uint16(src[2*x+1])<<8)
			}
		case tensor.Uint8:
			c := p % s.c
			sc, sh := s.scale[c], s.shift[c]
			for x, v := range j.inBytes[p*hw : (p+1)*hw] {
				o[x] = float32(v)*sc + sh
			}
		}
	}
}

// linearStep is a fully connected layer: C = W * X^T with W packed as A and
// the batch as the GEMM's N, then transposed into the n x Out output with
// the bias added.
type linearStep struct {
	src, dst int
	in, out  int
	a        *gemm.PackedA
	bias     []float32
}

func (s *linearStep) run(in *instance, n int) {
	j := &in.lin
	j.s, j.n = s, n
	j.x, j.y = in.vals[s.src], in.vals[s.dst]
	j.c = in.linC[:s.out*n]
	j.mw = roundUp(max(gemm.MR, (s.out+tasksPerThread*in.pool.Size()-1)/(tasksPerThread*in.pool.Size())), gemm.MR)
	in.pool.Run(j, (s.out+j.mw-1)/j.mw)
}

// linJob is one call of a linearStep, split into tasks of output rows.
type linJob struct {
	s       *linearStep
	n       int
	x, y    []float32
	c       []float32 // Out x n
	mw      int
	scratch []scratch // per worker
}

func (j *linJob) Run(w, t int) {
	s, n := j.s, j.n
	m0, m1 := t*j.mw, min(s.out, (t+1)*j.mw)
	bp, tile := j.scratch[w].packB, &j.scratch[w].tile
	for n0 := 0; n0 < n; n0 += ncMax {
		nw := min(ncMax, n-n0)
		for kb := 0; kb < s.a.Blocks(); kb++ {
			k0, kc := s.a.BlockK(kb)
			// B[k][i] = x[i][k]: image i's features form column i.
			for p := 0; p*gemm.NR < nw; p++ {
				d := bp[p*gemm.NR*kc : (p+1)*gemm.NR*kc]
				cols := min(gemm.NR, nw-p*gemm.NR)
				clear(d)
				for i := 0; i < cols; i++ {
					xi := j.x[(n0+p*gemm.NR+i)*s.in+k0 : (n0+p*gemm.NR+i)*s.in+k0+kc]
					for kk, v := range xi {
						d[kk*gemm.NR+i] = v
					}
				}
			}
			for jp := 0; jp*gemm.NR < nw; jp++ {
				cols := min(gemm.NR, nw-jp*gemm.NR)
				bpan := bp[jp*gemm.NR*kc : (jp+1)*gemm.NR*kc]
				for ip := m0 / gemm.MR; ip*gemm.MR < m1; ip++ {
					rows := min(gemm.MR, m1-ip*gemm.MR)
					off := ip*gemm.MR*n + n0 + jp*gemm.NR
					if rows == gemm.MR && cols == gemm.NR {
						gemm.Kernel(kc, s.a.Panel(kb, ip), bpan, j.c[off:], n, kb > 0)
					} else {
						gemm.KernelTile(kc, s.a.Panel(kb, ip), bpan, tile[:], cols)
						gemm.MergeTile(j.c[off:], n, tile[:], rows, cols, kb > 0)
					}
				}
			}
		}
	}
	for o := m0; o < m1; o++ {
		var b float32
		if s.bias != nil {
			b = s.bias[o]
		}
		for i, v := range j.c[o*n : (o+1)*n] {
			j.y[i*s.out+o] = v + b
		}
	}
}
