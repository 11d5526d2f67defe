package backend

import (
	"fmt"

	"goinfer/internal/trace"
)

// Track layout of AddTrace. Process 0 holds the requests' async spans;
// device d's tracks are process d+1.
const (
	tidLoad     = 0
	tidH2D      = 1
	tidD2H      = 2
	tidReply    = 3
	tidWorker   = 10  // + worker index
	tidGPUH2D   = 100 // device streams
	tidGPUD2H   = 101
	tidGPUWork  = 110 // + worker index
	pidRequests = 0
)

// AddTrace adds the backend's part of a run to tr: per device, the model
// load, one track per host stage (H2D stage, each worker, D2H stage, reply
// stage) and one per device stream (the copy streams and each worker's
// stream, from the engine's event times when Config.Profile was set); and,
// in a "requests" process, each request's queue wait and whole latency as
// async spans (they overlap, so viewers stack them). resps are responses
// this backend gave; call it after Ready.
func (b *Backend) AddTrace(tr *trace.Trace, resps []Response) {
	copyStreams := b.cfg.CopyStreams
	tr.Process(pidRequests, "requests")
	for _, d := range b.Devices() {
		pid := d.Index + 1
		tr.Process(pid, fmt.Sprintf("device %d: %s", d.Index, d.Info.Device))
		tr.Thread(pid, tidLoad, "backend", tidLoad)
		tr.Thread(pid, tidH2D, "H2D stage", tidH2D)
		tr.Thread(pid, tidReply, "reply stage", tidReply)
		if copyStreams {
			tr.Thread(pid, tidD2H, "D2H stage", tidD2H)
			tr.Thread(pid, tidGPUH2D, "GPU stream: H2D", tidGPUH2D)
			tr.Thread(pid, tidGPUD2H, "GPU stream: D2H", tidGPUD2H)
		}
		for k := range b.cfg.NumWorkers {
			tr.Thread(pid, tidWorker+k, fmt.Sprintf("worker %d", k), tidWorker+k)
			tr.Thread(pid, tidGPUWork+k, fmt.Sprintf("GPU stream: worker %d", k), tidGPUWork+k)
		}
		loaded := d.LoadStart.Add(d.Load)
		tr.Span(pid, tidLoad, "load model", "load", d.LoadStart, loaded, map[string]any{"arch": d.Info.Arch, "engine": d.Info.Engine})
		tr.Span(pid, tidLoad, "set up pipeline", "load", loaded, loaded.Add(d.Setup), map[string]any{"workers": b.cfg.NumWorkers})
	}
	for i := range resps {
		r := &resps[i]
		args := map[string]any{"request": r.ID, "images": r.N}
		if r.Err != nil {
			args["error"] = r.Err.Error()
		}
		st := &r.Stages
		tr.Async(pidRequests, fmt.Sprintf("request %d", r.ID), "latency", r.ID, r.SentAt, r.DoneAt, args)
		tr.Async(pidRequests, "queued", "queue", r.ID, st.Queued, st.Dequeued, args)
		if r.Device < 0 || r.Worker < 0 {
			continue // never reached a worker
		}
		pid := r.Device + 1
		name := fmt.Sprintf("request %d", r.ID)
		w := tidWorker + r.Worker
		gpuIn, gpuOut := tidGPUH2D, tidGPUD2H
		if copyStreams {
			tr.Span(pid, tidH2D, "stage input "+name, "h2d", st.Dequeued, st.Staged, args)
			tr.Span(pid, tidD2H, "copy out "+name, "d2h", st.D2HStart, st.D2HEnd, args)
		} else {
			gpuIn, gpuOut = tidGPUWork+r.Worker, tidGPUWork+r.Worker
			tr.Instant(pid, tidH2D, "dispatch "+name, st.Dequeued, args)
			tr.Span(pid, w, "stage input "+name, "h2d", st.WorkerStart, st.Staged, args)
		}
		tr.Span(pid, w, "forward "+name, "compute", st.WorkerStart, st.WorkerEnd, args)
		tr.Span(pid, tidReply, "wait and reply "+name, "reply", st.ReplyStart, r.DoneAt, args)
		tr.Span(pid, gpuIn, "H2D "+name, "gpu", st.GPUH2D.Start, st.GPUH2D.End, args)
		tr.Span(pid, tidGPUWork+r.Worker, "forward "+name, "gpu", st.GPUCompute.Start, st.GPUCompute.End, args)
		tr.Span(pid, gpuOut, "D2H "+name, "gpu", st.GPUD2H.Start, st.GPUD2H.End, args)
	}
}
