package imagegpu

import (
	"errors"
	"runtime"
	"sync"
	"time"

	cu "goinfer/internal/cuda"
)

// The hardware JPEG engines and nvJPEG's GPU (CUDA) backend are separate
// resources: the engines decode beside the SMs, the GPU backend's Huffman
// and IDCT kernels run on them. A batch is therefore split between the
// two, each part decoded on its backend's own stream from its own thread
// (nvJPEG's batched call holds the calling thread for much of the
// decode), and the caller's stream waits for both before the kernels.
//
// On an H200 with 500x375 photographs this did not pay (notes/img-fast.md):
// nvJPEG's GPU backend cost 16-39 ms a call for 26-150 images, and the
// engines' calls slowed down beside it, so Options.GPUShare is off by
// default.

// split moves a share of the JPEGs routed to the hardware decoder to the
// GPU backend, spread evenly over the batch.
func (p *Preprocessor) split(plans []plan, errs []error) {
	if !p.dec[0].ok || p.share <= 0 {
		return
	}
	acc := 0.5
	for i := range plans {
		if errs[i] != nil || plans[i].route != routeHardware {
			continue
		}
		if acc += p.share; acc < 1 {
			continue
		}
		acc--
		plans[i].route = routeGPU
		if p.dec[1].noYCbCr {
			plans[i].ycc = yccNone
		}
	}
}

// decodeAll decodes the batch's JPEGs with both backends at once and
// makes s wait for them.
func (p *Preprocessor) decodeAll(images [][]byte, plans []plan, errs []error, s cu.Stream) error {
	var cnt [2]int
	for i, pl := range plans {
		if errs[i] != nil {
			continue
		}
		switch pl.route {
		case routeHardware:
			cnt[0]++
		case routeGPU:
			cnt[1]++
		}
	}
	if cnt[0]+cnt[1] == 0 {
		p.last = cnt
		return nil
	}
	data := images
	if p.opts.PinInput {
		t := time.Now()
		var err error
		if data, err = p.pin(images, plans, errs); err != nil {
			return err
		}
		p.stats.Pin += time.Since(t)
	}
	if err := p.rt.EventRecord(p.start, s); err != nil {
		return err
	}
	var host [2]time.Duration
	var derr [2]error
	var wg sync.WaitGroup
	for di := range 2 {
		if cnt[di] == 0 {
			continue
		}
		work := func() {
			t := time.Now()
			derr[di] = p.decodeOn(di, data, images, plans, errs)
			host[di] = time.Since(t)
		}
		if di == 1 || cnt[1] == 0 {
			work()
			continue
		}
		// The hardware part on another thread, the GPU part on this one.
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer runtime.UnlockOSThread()
			if derr[di] = p.enter(); derr[di] == nil {
				work()
			}
		}()
	}
	wg.Wait()
	p.stats.HWCall += host[0]
	p.stats.GPUCall += host[1]
	p.stats.HW += cnt[0]
	p.stats.GPU += cnt[1]
	p.last = cnt
	if err := errors.Join(derr[:]...); err != nil {
		// s does not wait for this batch's decodes: let them finish
		// before the next batch reuses (or frees) the scratch they write.
		for di := range 2 {
			if p.dec[di].ok {
				err = errors.Join(err, p.rt.StreamSynchronize(p.dec[di].stream))
			}
		}
		return err
	}
	for di := range 2 {
		if cnt[di] > 0 {
			if err := p.rt.StreamWaitEvent(s, p.dec[di].end); err != nil {
				return err
			}
		}
	}
	return nil
}

// decodeOn decodes the images routed to backend di on its stream, after
// the caller's stream has reached the batch's start (the scratch it
// writes is free from there), and marks the end.
func (p *Preprocessor) decodeOn(di int, data, images [][]byte, plans []plan, errs []error) error {
	d := &p.dec[di]
	if err := p.rt.StreamWaitEvent(d.stream, p.start); err != nil {
		return err
	}
	r := []route{routeHardware, routeGPU}[di]
	for _, ycc := range []bool{true, false} {
		if err := p.decodeGPU(di, r, ycc, data, images, plans, errs, d.stream); err != nil {
			return err
		}
	}
	return p.rt.EventRecord(d.end, d.stream)
}

// decodeBatched is one batched nvJPEG decode on d, setting its state up
// only when the batch size or output format changed.
func (p *Preprocessor) decodeBatched(d *decoder, src [][]byte, dst []cu.JPEGImage, format int, s cu.Stream) error {
	if p.reinit || d.initN != len(src) || d.initFormat != format {
		d.initN = 0
		if err := p.jpg.InitBatched(d.h, d.st, len(src), format); err != nil {
			return err
		}
		d.initN, d.initFormat = len(src), format
	}
	return p.jpg.DecodeBatchedInitialized(d.h, d.st, src, dst, s)
}

// pin copies the bitstreams nvJPEG decodes into page-locked memory, in
// parallel, and returns the batch with those images replaced by their
// copies.
func (p *Preprocessor) pin(images [][]byte, plans []plan, errs []error) ([][]byte, error) {
	need := 0
	for i, pl := range plans {
		if errs[i] == nil && (pl.route == routeHardware || pl.route == routeGPU) {
			need += len(images[i])
		}
	}
	if len(p.pinned) < need {
		size := max(need, len(p.pinned)*3/2)
		if p.pinned != nil {
			if err := p.rt.FreeHost(p.pinned); err != nil {
				return nil, err
			}
			p.pinned = nil
		}
		b, err := p.rt.HostAlloc(size)
		if err != nil {
			return nil, err
		}
		p.pinned = b
	}
	data := make([][]byte, len(images))
	at := 0
	for i, pl := range plans {
		data[i] = images[i]
		if errs[i] == nil && (pl.route == routeHardware || pl.route == routeGPU) {
			data[i] = p.pinned[at : at+len(images[i]) : at+len(images[i])]
			at += len(images[i])
		}
	}
	workers := min(runtime.GOMAXPROCS(0), 8)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(images); i += workers {
				if len(data[i]) > 0 && &data[i][0] != &images[i][0] {
					copy(data[i], images[i])
				}
			}
		}()
	}
	wg.Wait()
	return data, nil
}
