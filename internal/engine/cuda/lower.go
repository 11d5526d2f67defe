package cuda

import (
	"encoding/binary"
	"fmt"
	"math"

	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
)

// precision is how one engine.Precision maps onto the libraries.
type precision struct {
	p           engine.Precision
	dnnType     int  // cuDNN data type of activations and weights
	elem        int  // bytes per element
	nhwc        bool // channels-last, so tensor cores see contiguous channels
	format      int  // cuDNN tensor/filter format
	mathType    int  // cuDNN math type
	blasType    int  // cuBLAS data type of the linear layer's operands
	blasComp    int  // cuBLAS compute type
	blasMath    int  // cuBLAS math mode
	suffix      string
	tensorDType tensor.DType
}

func precisionOf(p engine.Precision) (precision, error) {
	switch p {
	case engine.FP32:
		// FMA math keeps cuDNN off TF32 tensor cores: true float32, as
		// PyTorch with allow_tf32 = False.
		return precision{p: p, dnnType: cu.DataFloat, elem: 4, format: cu.TensorNCHW, mathType: cu.FMAMath,
			blasType: cu.CudaR32F, blasComp: cu.BLASComputeF32, blasMath: cu.BLASDefaultMath, suffix: "f32", tensorDType: tensor.Float32}, nil
	case engine.TF32:
		return precision{p: p, dnnType: cu.DataFloat, elem: 4, format: cu.TensorNCHW, mathType: cu.DefaultMath,
			blasType: cu.CudaR32F, blasComp: cu.BLASComputeF32FastTF32, blasMath: cu.BLASTF32TensorOpMath, suffix: "f32", tensorDType: tensor.Float32}, nil
	case engine.FP16:
		return precision{p: p, dnnType: cu.DataHalf, elem: 2, nhwc: true, format: cu.TensorNHWC, mathType: cu.TensorOpMath,
			blasType: cu.CudaR32F, blasComp: cu.BLASComputeF32, blasMath: cu.BLASDefaultMath, suffix: "f16", tensorDType: tensor.Float16}, nil
	case engine.BF16:
		return precision{p: p, dnnType: cu.DataBFloat16, elem: 2, nhwc: true, format: cu.TensorNHWC, mathType: cu.TensorOpMath,
			blasType: cu.CudaR32F, blasComp: cu.BLASComputeF32, blasMath: cu.BLASDefaultMath, suffix: "bf16", tensorDType: tensor.BFloat16}, nil
	}
	return precision{}, fmt.Errorf("cuda engine: precision %v is not supported", p)
}

// opKind is one step of a lowered forward pass.
type opKind uint8

const (
	opConv    opKind = iota + 1 // cuDNN convolution; epilogue per the node
	opScale                     // batch norm as per-channel scale and shift (kernel)
	opReLU                      // kernel
	opAdd                       // kernel
	opMaxPool                   // kernel
	opAvgPool                   // global average pool (kernel)
	opLinear                    // cuBLAS GEMM into the float32 logits
)

func (k opKind) String() string {
	return [...]string{"?", "conv", "batchnorm", "relu", "add", "maxpool", "avgpool", "linear"}[k]
}

// opSpec is a lowered node: what to run and on which values, before any
// device pointer exists. Lowering is pure so that it is tested without a GPU.
type opSpec struct {
	kind opKind
	node int // index in the graph
	in   []model.Value
	out  model.Value
	// For convolutions: the fused epilogue (bias, residual = in[1], relu).
	bias, residual, relu bool
}

// lower maps each graph node to one op. An eager graph gives one library
// call or kernel per node, like eager PyTorch; a fused graph gives one
// cudnnConvolutionBiasActivationForward per convolution.
func lower(g *model.Graph) ([]opSpec, error) {
	if len(g.Nodes) == 0 {
		return nil, fmt.Errorf("cuda engine: the graph has no nodes")
	}
	ops := make([]opSpec, 0, len(g.Nodes))
	for i, n := range g.Nodes {
		s := opSpec{node: i, in: n.Inputs, out: n.Output}
		switch n.Op {
		case model.OpConv:
			c := n.Conv
			s.kind = opConv
			s.bias, s.residual, s.relu = c.Bias != nil, c.Residual, c.ReLU
		case model.OpBatchNorm:
			s.kind = opScale
		case model.OpReLU:
			s.kind = opReLU
		case model.OpAdd:
			s.kind = opAdd
		case model.OpMaxPool:
			s.kind = opMaxPool
		case model.OpGlobalAvgPool:
			s.kind = opAvgPool
		case model.OpLinear:
			s.kind = opLinear
			if n.Output != g.Output {
				return nil, fmt.Errorf("cuda engine: node %s: a linear layer that is not the graph's output is not supported", n.Name)
			}
		default:
			return nil, fmt.Errorf("cuda engine: node %s: op %v is not supported", n.Name, n.Op)
		}
		ops = append(ops, s)
	}
	if last := g.Nodes[len(g.Nodes)-1]; last.Op != model.OpLinear || last.Output != g.Output {
		return nil, fmt.Errorf("cuda engine: the graph must end in a linear layer producing its output (it ends in %s %v)", last.Name, last.Op)
	}
	return ops, nil
}

// inPlace reports whether op may write its output over its first input:
// elementwise ops whose input dies there (relu(inplace=True) in PyTorch).
func inPlace(s opSpec, lastUse []int) bool {
	switch s.kind {
	case opScale, opReLU, opAdd:
		return lastUse[s.in[0]] == s.node
	}
	return false
}

// slotPlan assigns every activation value to a reusable buffer (slot) by
// liveness: a slot is free again after its value's last reader. Sizes are in
// bytes for the whole batch. The linear layer's output is not a slot (it
// goes to the float32 logits buffer).
type slotPlan struct {
	valSlot []int   // value -> slot, -1 for none
	sizes   []int64 // slot -> bytes
}

func planSlots(g *model.Graph, ops []opSpec, valueBytes func(model.Value) int64) slotPlan {
	lastUse := g.LastUse()
	sp := slotPlan{valSlot: make([]int, g.NumValues)}
	for i := range sp.valSlot {
		sp.valSlot[i] = -1
	}
	var free []int
	take := func(need int64) int {
		// Best fit among free slots; else grow the largest free one; else
		// a new slot.
		best, bestIdx := -1, -1
		for j, s := range free {
			if sp.sizes[s] >= need && (best < 0 || sp.sizes[s] < sp.sizes[best]) {
				best, bestIdx = s, j
			}
		}
		if best < 0 {
			for j, s := range free {
				if best < 0 || sp.sizes[s] > sp.sizes[best] {
					best, bestIdx = s, j
				}
			}
		}
		if best < 0 {
			sp.sizes = append(sp.sizes, need)
			return len(sp.sizes) - 1
		}
		free = append(free[:bestIdx], free[bestIdx+1:]...)
		if sp.sizes[best] < need {
			sp.sizes[best] = need
		}
		return best
	}
	sp.valSlot[0] = take(valueBytes(0))
	for _, s := range ops {
		if s.kind != opLinear {
			if inPlace(s, lastUse) {
				sp.valSlot[s.out] = sp.valSlot[s.in[0]]
			} else {
				sp.valSlot[s.out] = take(valueBytes(s.out))
			}
		}
		for _, v := range s.in {
			if lastUse[v] == s.node && sp.valSlot[v] >= 0 && sp.valSlot[v] != sp.valSlot[s.out] {
				already := false
				for _, f := range free {
					already = already || f == sp.valSlot[v]
				}
				if !already {
					free = append(free, sp.valSlot[v])
				}
			}
		}
	}
	return sp
}

// Stem modes (engine.Options.Stem) for channels-last precisions.
const (
	stemS2D  = "s2d"  // space to depth: the stride-2 stem as a stride-1 conv over 2x2 blocks
	stemPad  = "pad"  // pad the image's channels with zeros
	stemNone = "none" // the image's channels as they are
)

// stemSpec says how the stored input is laid out for the first convolution.
type stemSpec struct {
	node int  // the convolution reading the input, or -1
	s2d  bool // space to depth
	// in is the stored input's per-image dims (what the conversion kernel
	// writes and the first convolution reads).
	in model.Dims
	// k, stride, pad are the first convolution's geometry as run.
	k, stride, pad int
	// s2dPad is the original convolution's padding, which the space to
	// depth conversion applies (the rewritten convolution has none).
	s2dPad int
}

// planStem decides the stored input's layout. Tensor-core convolutions want
// channel counts that are multiples of 8 in NHWC, and the image has 3:
//   - s2d rewrites a stride-2 k x k stem convolution (ResNet's 7x7) as a
//     stride-1 ceil(k/2) x ceil(k/2) convolution over 2x2 pixel blocks, whose
//     4*3 = 12 channels (padded to 16) suit tensor cores, with the same
//     arithmetic (TPU and MLPerf ResNets do this);
//   - pad zero-pads the channels to `channels` (TensorRT's way);
//   - none keeps them.
//
// Either only applies when the input's one reader is an ungrouped
// convolution; NCHW precisions keep the input as it is.
func planStem(g *model.Graph, shapes []model.Dims, nhwc bool, mode string, channels int) stemSpec {
	st := stemSpec{node: -1, in: shapes[0]}
	for i, n := range g.Nodes {
		for _, v := range n.Inputs {
			if v != 0 {
				continue
			}
			if st.node >= 0 || n.Op != model.OpConv || n.Conv.Groups != 1 {
				return stemSpec{node: -1, in: shapes[0]}
			}
			st.node = i
		}
	}
	if st.node < 0 {
		return st
	}
	c := g.Nodes[st.node].Conv
	st.k, st.stride, st.pad = c.K, c.Stride, c.Pad
	if !nhwc {
		return st
	}
	in := shapes[0]
	switch {
	case mode == stemS2D && c.Stride == 2 && c.K >= 2 && 4*in.C <= 16:
		out := shapes[g.Nodes[st.node].Output]
		kd := (c.K + 1) / 2
		st.s2d = true
		st.in = model.Dims{C: (4*in.C + 7) / 8 * 8, H: out.H + kd - 1, W: out.W + kd - 1}
		st.k, st.stride, st.pad, st.s2dPad = kd, 1, 0, c.Pad
	case (mode == stemPad || mode == stemS2D) && channels > in.C && channels <= 16:
		st.in.C = channels
	}
	return st
}

// s2dWeights lays out a stride-2 convolution's [K, C, k, k] weights for its
// space-to-depth form: KRSC [K, kd, kd, cPad] with channel (py*2+px)*C + c
// holding tap (2*dy+py, 2*dx+px), zero where that falls outside k x k.
func s2dWeights(c *model.Conv, cPad int, p precision) []byte {
	out := make([]byte, s2dBytes(c, cPad, p))
	s2dWeightsInto(out, c, cPad, p, 0, c.OutC)
	return out
}

// s2dBytes is the size of s2dWeights' result.
func s2dBytes(c *model.Conv, cPad int, p precision) int {
	kd := (c.K + 1) / 2
	return c.OutC * kd * kd * cPad * p.tensorDType.Size()
}

// s2dWeightsInto writes output channels [lo, hi) of s2dWeights' result
// into dst, which must be zero there; other ranges may be written
// concurrently.
func s2dWeightsInto(dst []byte, c *model.Conv, cPad int, p precision, lo, hi int) {
	put := putter(p.tensorDType)
	k, kd, cin := c.K, (c.K+1)/2, c.InC
	for o := lo; o < hi; o++ {
		for dy := 0; dy < kd; dy++ {
			for dx := 0; dx < kd; dx++ {
				for py := 0; py < 2; py++ {
					for px := 0; px < 2; px++ {
						ky, kx := 2*dy+py, 2*dx+px
						if ky >= k || kx >= k {
							continue
						}
						for ch := 0; ch < cin; ch++ {
							put(dst, ((o*kd+dy)*kd+dx)*cPad+(py*2+px)*cin+ch, c.Weight[((o*cin+ch)*k+ky)*k+kx])
						}
					}
				}
			}
		}
	}
}

// vecOK reports whether the elementwise kernels may move 16-byte vectors:
// n elements whose channel (i/div)%c is constant over each aligned vector.
func vecOK(n int64, c, div int, p precision) int {
	v := 16 / p.elem
	if n%int64(v) != 0 {
		return 0
	}
	if p.nhwc && c%v == 0 || !p.nhwc && div%v == 0 {
		return 1
	}
	return 0
}

// maxElements bounds every tensor the kernels index (32-bit indices).
const maxElements = 1<<31 - 1

// convWeights lays a convolution's float32 [K, C, R, S] weights out for the
// device: KCRS for NCHW, KRSC for NHWC, with the input channels padded to
// cPad, encoded in the precision's storage type.
func convWeights(c *model.Conv, cPad int, p precision) []byte {
	out := make([]byte, convBytes(c, cPad, p))
	convWeightsInto(out, c, cPad, p, 0, c.OutC)
	return out
}

// convBytes is the size of convWeights' result.
func convBytes(c *model.Conv, cPad int, p precision) int {
	return c.OutC * max(cPad, c.InC/c.Groups) * c.K * c.K * p.tensorDType.Size()
}

// convWeightsInto writes output channels [lo, hi) of convWeights' result
// into dst, which must be zero there; other ranges may be written
// concurrently.
func convWeightsInto(dst []byte, c *model.Conv, cPad int, p precision, lo, hi int) {
	put := putter(p.tensorDType)
	cg := c.InC / c.Groups
	cPad = max(cPad, cg)
	r := c.K
	for o := lo; o < hi; o++ {
		for ci := 0; ci < cg; ci++ {
			for y := 0; y < r; y++ {
				for x := 0; x < r; x++ {
					var idx int
					if p.nhwc {
						idx = ((o*r+y)*r+x)*cPad + ci
					} else {
						idx = ((o*cPad+ci)*r+y)*r + x
					}
					put(dst, idx, c.Weight[((o*cg+ci)*r+y)*r+x])
				}
			}
		}
	}
}

// linearWeights lays out [Out, In] weights, permuting the input features
// from PyTorch's NCHW flatten order to NHWC order when the input has a
// spatial extent and the precision runs channels-last.
func linearWeights(l *model.Linear, in model.Dims, p precision) []float32 {
	w := l.Weight
	hw := in.H * in.W
	if p.nhwc && hw > 1 {
		w = make([]float32, len(l.Weight))
		for o := 0; o < l.Out; o++ {
			for c := 0; c < in.C; c++ {
				for q := 0; q < hw; q++ {
					w[o*l.In+q*in.C+c] = l.Weight[o*l.In+c*hw+q]
				}
			}
		}
	}
	return w
}

// encode stores float32 values as dt (Float32, Float16 or BFloat16) bytes.
func encode(v []float32, dt tensor.DType) []byte {
	b := make([]byte, len(v)*dt.Size())
	encodeInto(b, v, dt, 0, len(v))
	return b
}

// encodeInto encodes v[lo:hi] into its place in dst (element lo at byte
// lo*dt.Size()).
func encodeInto(dst []byte, v []float32, dt tensor.DType, lo, hi int) {
	switch dt {
	case tensor.Float16:
		for i := lo; i < hi; i++ {
			binary.LittleEndian.PutUint16(dst[2*i:], tensor.Float32ToF16(v[i]))
		}
	case tensor.BFloat16:
		for i := lo; i < hi; i++ {
			binary.LittleEndian.PutUint16(dst[2*i:], tensor.Float32ToBF16(v[i]))
		}
	default:
		for i := lo; i < hi; i++ {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v[i]))
		}
	}
}

// putter returns what stores v as element i of dst in dt (Float16,
// BFloat16, else Float32), little-endian.
func putter(dt tensor.DType) func(dst []byte, i int, v float32) {
	switch dt {
	case tensor.Float16:
		return func(dst []byte, i int, v float32) { binary.LittleEndian.PutUint16(dst[2*i:], tensor.Float32ToF16(v)) }
	case tensor.BFloat16:
		return func(dst []byte, i int, v float32) { binary.LittleEndian.PutUint16(dst[2*i:], tensor.Float32ToBF16(v)) }
	}
	return func(dst []byte, i int, v float32) { binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v)) }
}

// bnScaleShift turns a batch norm into float32 per-channel scale and shift.
func bnScaleShift(bn *model.BatchNorm) []float32 {
	scale, shift := bn.ScaleShift()
	out := make([]float32, 2*bn.C)
	for c := range scale {
		out[c] = float32(scale[c])
		out[bn.C+c] = float32(shift[c])
	}
	return out
}

// inputAffine is the per-channel x*scale+shift that turns 0..255 pixels
// into ImageNet-normalized values: scale = 1/(255 std), shift = -mean/std.
func inputAffine(channels int) ([]float32, error) {
	if channels != len(engine.ImageNetMean) {
		return nil, fmt.Errorf("cuda engine: uint8 input needs %d channels (ImageNet normalization), the model has %d", len(engine.ImageNetMean), channels)
	}
	out := make([]float32, 2*channels)
	for c := 0; c < channels; c++ {
		out[c] = float32(1 / (255 * float64(engine.ImageNetStd[c])))
		out[channels+c] = float32(-float64(engine.ImageNetMean[c]) / float64(engine.ImageNetStd[c]))
	}
	return out, nil
}

// launchDims picks a 1-D launch for n elements: grid-stride kernels need
// no more blocks than keep every SM busy.
func launchDims(n int64) (grid, block int) {
	const threads = 256
	const maxBlocks = 8192
	g := (n + threads - 1) / threads
	if g > maxBlocks {
		g = maxBlocks
	}
	if g < 1 {
		g = 1
	}
	return int(g), threads
}

// tensorBytes of n images of dims d in p.
func tensorBytes(n int, d model.Dims, p precision) int64 {
	return int64(n) * int64(d.Elements()) * int64(p.elem)
}
