package cuda

import (
	"fmt"

	cu "goinfer/internal/cuda"
)

// convChunks is how a convolution's batch is split into several cuDNN
// calls: at large batch, implicit precomputed GEMM's index workspace grows
// with the batch past graphWorkspace, and without it cuDNN is left with the
// generic implicit GEMM, many times slower (a grouped convolution of
// RegNet's first stage took half of the whole forward). Calls over part of
// the batch keep the fast algorithm within the workspace.
type convChunks struct {
	per            int           // images per call (0: one call over the batch)
	xImg, yImg     int64         // bytes of one image of x and of y
	tail           int           // images of the last call, when fewer than per
	xdTail, ydTail cu.TensorDesc // descriptors of the last call
}

// chunkCount is the smallest number of calls over n images whose share,
// ceil(n/calls), needs at most limit bytes, given that the whole batch
// needs need bytes and the need is about proportional to the images.
// It returns 1 when the batch fits and 0 when no split fits.
func chunkCount(n int, need, limit int64, fits func(per int) bool) int {
	if need <= limit {
		return 1
	}
	if n < 2 {
		return 0
	}
	k := int(min(int64(n), (need+limit-1)/limit))
	for ; k <= n; k++ {
		per := (n + k - 1) / k
		if k > 1 && per == (n+k-2)/(k-1) {
			continue // the same share as k-1 calls: already refused
		}
		if fits(per) {
			return k
		}
	}
	return 0
}

// planChunks splits rs's convolution over the batch when the fast
// algorithm's workspace at the whole batch exceeds graphWorkspace, and
// replaces rs.xd and rs.yd with the descriptors of one call.
func (i *graphInstance) planChunks(rs *runStep, g *convGeom, format, c int) error {
	dnn := i.m.libs.DNN
	need, err := dnn.ConvForwardWorkspace(i.h, rs.xd, rs.wd, rs.cd, rs.yd, cu.ConvFwdAlgoImplicitPrecompGemm)
	if err != nil || need <= graphWorkspace || g.n < 2 {
		return nil // unsupported algorithm (splitting cannot help), or it fits
	}
	descs := func(n int) (xd, yd cu.TensorDesc, err error) {
		if xd, err = dnn.NewTensor4d(format, i.m.prec.dnnType, n, c, g.h, g.w); err != nil {
			return 0, 0, err
		}
		if yd, err = dnn.NewTensor4d(format, i.m.prec.dnnType, n, g.k, g.oh, g.ow); err != nil {
			dnn.DestroyTensor(xd)
			return 0, 0, err
		}
		return xd, yd, nil
	}
	var xd, yd cu.TensorDesc
	var derr error
	k := chunkCount(g.n, need, graphWorkspace, func(per int) bool {
		x, y, err := descs(per)
		if err != nil {
			derr = err
			return false
		}
		w, err := dnn.ConvForwardWorkspace(i.h, x, rs.wd, rs.cd, y, cu.ConvFwdAlgoImplicitPrecompGemm)
		if err != nil || w > graphWorkspace {
			dnn.DestroyTensor(x)
			dnn.DestroyTensor(y)
			return false
		}
		xd, yd = x, y
		return true
	})
	if derr != nil {
		return fmt.Errorf("convolution over part of the batch: %w", derr)
	}
	if k < 2 {
		return nil
	}
	per := (g.n + k - 1) / k
	ch := &convChunks{per: per,
		xImg: int64(c) * int64(g.h) * int64(g.w) * int64(i.m.prec.elem),
		yImg: int64(g.k) * int64(g.oh) * int64(g.ow) * int64(i.m.prec.elem)}
	if t := g.n - (k-1)*per; t != per {
		ch.tail = t
		if ch.xdTail, ch.ydTail, err = descs(t); err != nil {
			dnn.DestroyTensor(xd)
			dnn.DestroyTensor(yd)
			return fmt.Errorf("convolution over part of the batch: %w", err)
		}
	}
	dnn.DestroyTensor(rs.xd)
	dnn.DestroyTensor(rs.yd)
	rs.xd, rs.yd, rs.chunks = xd, yd, ch
	return nil
}

// runConv enqueues rs's convolution: one cuDNN call, or one per chunk of
// the batch. fused selects cuDNN's convolution + bias + activation call.
func (i *graphInstance) runConv(rs *runStep, fused bool) error {
	dnn := i.m.libs.DNN
	call := func(xd, yd cu.TensorDesc, x, y, z cu.DevPtr) error {
		if fused {
			return dnn.ConvBiasActForward(i.h, xd, x, rs.wd, rs.w, rs.cd, rs.algoF, i.ws, graphWorkspace,
				yd, z, rs.bd, rs.bias, rs.act, yd, y)
		}
		return dnn.ConvForward(i.h, xd, x, rs.wd, rs.w, rs.cd, rs.algo, i.ws, graphWorkspace, yd, y)
	}
	ch := rs.chunks
	if ch == nil {
		return call(rs.xd, rs.yd, rs.x, rs.y, rs.z)
	}
	n := rs.s.conv.n
	for at := 0; at < n; at += ch.per {
		xd, yd := rs.xd, rs.yd
		if n-at < ch.per {
			xd, yd = ch.xdTail, ch.ydTail
		}
		z := rs.z
		if z != 0 {
			z += cu.DevPtr(int64(at) * ch.yImg)
		}
		if err := call(xd, yd, rs.x+cu.DevPtr(int64(at)*ch.xImg), rs.y+cu.DevPtr(int64(at)*ch.yImg), z); err != nil {
			return err
		}
	}
	return nil
}

// destroy releases the descriptors of the last call.
func (ch *convChunks) destroy(dnn *cu.DNN) {
	if ch != nil && ch.tail > 0 {
		dnn.DestroyTensor(ch.xdTail)
		dnn.DestroyTensor(ch.ydTail)
	}
}
