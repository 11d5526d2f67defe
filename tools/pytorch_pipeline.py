#!/usr/bin/env python3
"""PyTorch side of goinfer's end-to-end comparison, run on the same GPU.

Two variants, both on the reference workload (fp32 host tensors of
[batch, 3, size, size] made before timing, one warmup request, then
num_iters requests sent back to back):

  --variant reference  The method of PyTorch's benchmarks/inference server
                       simulation (latest version): a frontend process sends
                       (tensor, send time) on a multiprocessing queue; the
                       backend process loads ResNet-18 on the first request,
                       one H2D thread pins and copies on its own stream, a
                       pool of prediction threads (own stream each) waits on
                       the copy event, one D2H thread copies logits back and
                       answers on the response queue; nvidia-smi is polled
                       every 100 ms for utilization.
  --variant fast       What a skilled PyTorch user writes in one process:
                       pinned fp32 host tensors, a copy stream and a compute
                       stream overlapping, fp16 channels-last ResNet-18,
                       optionally captured as a CUDA graph (--cuda_graph).

Both print the metrics goinfer prints and append a row with goinfer's CSV
columns to --csv (experiment "pytorch-reference" / "pytorch-fast"), so
`goinfer report` can put them beside goinfer's rows.
"""
import argparse
import csv
import datetime
import math
import os
import queue
import statistics
import subprocess
import sys
import threading
import time

COLUMNS = ["batch_size", "compile", "load_time", "compile_time", "warmup_latency",
           "average_latency", "max_latency", "min_latency", "throughput", "gpu_util",
           "experiment", "engine", "device", "arch", "precision", "input_dtype",
           "num_workers", "copy_streams", "num_devices", "image_size", "num_iters", "mode",
           "std_latency", "p50_latency", "p90_latency", "p99_latency", "gflops",
           "gpu_mem_peak_mib", "seed", "timestamp"]


def ensure_checkpoint(model_dir):
    """The reference loads resnet18-f37072fd.pth; the GPU machine has no
    network, so write torchvision-layout random weights under that name when
    the real file is absent (same size, same load path)."""
    import torch
    import torchvision
    path = os.path.join(model_dir, "resnet18-f37072fd.pth")
    if not os.path.exists(path):
        os.makedirs(model_dir, exist_ok=True)
        torch.save(torchvision.models.resnet18().state_dict(), path)
    return path


class GPUSampler(threading.Thread):
    """Polls nvidia-smi every 100 ms, as the reference does."""

    def __init__(self):
        super().__init__(daemon=True)
        self.util, self.mem = [], []
        self.running = threading.Event()
        self.stop_ = threading.Event()

    def run(self):
        while not self.stop_.is_set():
            if self.running.is_set():
                try:
                    out = subprocess.check_output(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used",
                                                   "--format=csv,noheader,nounits", "-i", "0"], text=True)
                    u, m = out.strip().split(",")
                    self.util.append(float(u))
                    self.mem.append(float(m))
                except Exception:
                    pass
            time.sleep(0.1)


def percentile(xs, p):
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    f, c = math.floor(k), math.ceil(k)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def summarize(args, experiment, load_time, compile_time, warmup, lat, first_send, last_resp, sampler, precision):
    thr = args.num_iters * args.batch_size / (last_resp - first_send)
    util = statistics.mean(sampler.util) if sampler.util else float("nan")
    mem = max(sampler.mem) if sampler.mem else float("nan")
    row = {
        "batch_size": args.batch_size, "compile": str(bool(args.compile)).lower(),
        "load_time": load_time, "compile_time": compile_time, "warmup_latency": warmup,
        "average_latency": statistics.mean(lat), "max_latency": max(lat), "min_latency": min(lat),
        "throughput": thr, "gpu_util": util, "experiment": experiment, "engine": "pytorch",
        "device": torch_device_name(), "arch": "resnet18", "precision": precision, "input_dtype": "float32",
        "num_workers": args.num_workers, "copy_streams": "true", "num_devices": 1,
        "image_size": args.image_size, "num_iters": args.num_iters, "mode": "flood",
        "std_latency": statistics.stdev(lat) if len(lat) > 1 else float("nan"),
        "p50_latency": percentile(lat, 50), "p90_latency": percentile(lat, 90), "p99_latency": percentile(lat, 99),
        "gflops": float("nan"), "gpu_mem_peak_mib": mem, "seed": 0,
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    print(f"[{experiment}] bs={args.batch_size} compile={args.compile}")
    print(f"  load time: {load_time:.5f} s   compile time: {compile_time:.5f} s")
    print(f"  warmup latency: {warmup:.5f} s")
    print(f"  average latency: {row['average_latency']:.5f} +/- {row['std_latency']:.5f} s  "
          f"(min {row['min_latency']:.5f}, p50 {row['p50_latency']:.5f}, p99 {row['p99_latency']:.5f}, max {row['max_latency']:.5f})")
    print(f"  throughput: {thr:.1f} samples/s   gpu util: {util:.1f} %   gpu mem peak: {mem:.0f} MiB")
    if args.csv:
        new = not os.path.exists(args.csv)
        with open(args.csv, "a", newline="") as f:
            w = csv.writer(f)
            if new:
                w.writerow(COLUMNS)
            w.writerow(["" if isinstance(row[c], float) and math.isnan(row[c]) else
                        (f"{row[c]:.7g}" if isinstance(row[c], float) else row[c]) for c in COLUMNS])


def torch_device_name():
    import torch
    return torch.cuda.get_device_name(0) + " (cuda:0)"


# ---------------------------------------------------------------- reference

def backend_process(args, req_q, resp_q, times_q):
    import torch
    import torchvision
    from concurrent.futures import ThreadPoolExecutor

    first = req_q.get()
    t0 = time.perf_counter()
    m = torchvision.models.resnet18()
    sd = torch.load(ensure_checkpoint(args.model_dir), mmap=True, map_location="cpu", weights_only=True)
    m.load_state_dict(sd)
    m = m.to("cuda:0").eval()
    load_time = time.perf_counter() - t0
    compile_time = 0.0
    if args.compile:
        t1 = time.perf_counter()
        m = torch.compile(m)
        compile_time = time.perf_counter() - t1
    times_q.put((load_time, compile_time))

    h2d_stream = torch.cuda.Stream()
    d2h_stream = torch.cuda.Stream()
    local = threading.local()
    pending = queue.Queue()
    out_q = queue.Queue()

    def h2d():
        while True:
            item = pending.get()
            if item is None:
                return
            data, sent = item
            with torch.cuda.stream(h2d_stream):
                g = data.pin_memory().to("cuda:0", non_blocking=True)
                ev = torch.cuda.Event()
                ev.record(h2d_stream)
            pool.submit(predict, g, ev, sent)

    def predict(g, ev, sent):
        if not hasattr(local, "stream"):
            local.stream = torch.cuda.Stream()
        with torch.cuda.stream(local.stream):
            local.stream.wait_event(ev)
            g.record_stream(local.stream)
            with torch.no_grad():
                y = m(g)
            done = torch.cuda.Event()
            done.record(local.stream)
        out_q.put((y, done, sent))

    def d2h():
        while True:
            item = out_q.get()
            if item is None:
                return
            y, ev, sent = item
            with torch.cuda.stream(d2h_stream):
                d2h_stream.wait_event(ev)
                y.record_stream(d2h_stream)
                c = y.to("cpu", non_blocking=True)
                d2h_stream.synchronize()
            resp_q.put((c, sent))

    pool = ThreadPoolExecutor(max_workers=args.num_workers)
    threads = [threading.Thread(target=h2d, daemon=True), threading.Thread(target=d2h, daemon=True)]
    for t in threads:
        t.start()
    pending.put(first)
    while True:
        item = req_q.get()
        if item is None:
            break
        pending.put(item)
    pending.put(None)
    pool.shutdown(wait=True)
    out_q.put(None)
    for t in threads:
        t.join()


def run_reference(args):
    import torch
    # torch.multiprocessing shares tensor storage between processes instead
    # of pickling the bytes through a pipe, as the reference's queues do.
    import torch.multiprocessing as mp
    ensure_checkpoint(args.model_dir)
    ctx = mp.get_context("spawn")
    req_q, resp_q, times_q = ctx.Queue(), ctx.Queue(), ctx.Queue()
    torch.manual_seed(0)
    data = [torch.randn(args.batch_size, 3, args.image_size, args.image_size) for _ in range(args.num_iters + 1)]
    proc = ctx.Process(target=backend_process, args=(args, req_q, resp_q, times_q))
    proc.start()
    sampler = GPUSampler()
    sampler.start()

    t = time.perf_counter()
    req_q.put((data[0], t))
    _, sent = resp_q.get()
    warmup = time.perf_counter() - sent
    load_time, compile_time = times_q.get()

    sampler.running.set()
    lat = []
    first_send = time.perf_counter()

    def collect():
        for _ in range(args.num_iters):
            _, s = resp_q.get()
            lat.append(time.perf_counter() - s)
    col = threading.Thread(target=collect)
    col.start()
    for i in range(args.num_iters):
        req_q.put((data[i + 1], time.perf_counter()))
    col.join()
    last = time.perf_counter()
    sampler.running.clear()
    sampler.stop_.set()
    req_q.put(None)
    proc.join()
    summarize(args, "pytorch-reference", load_time, compile_time, warmup, lat, first_send, last, sampler, "fp32")


# --------------------------------------------------------------------- fast

def run_fast(args):
    import torch
    import torchvision
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    n = args.num_iters + 1
    host = [torch.randn(args.batch_size, 3, args.image_size, args.image_size).pin_memory() for _ in range(min(n, 8))]
    sampler = GPUSampler()
    sampler.start()

    t0 = time.perf_counter()
    m = torchvision.models.resnet18()
    m.load_state_dict(torch.load(ensure_checkpoint(args.model_dir), mmap=True, map_location="cpu", weights_only=True))
    m = m.to("cuda:0").half().eval().to(memory_format=torch.channels_last)
    torch.cuda.synchronize()
    load_time = time.perf_counter() - t0

    copy_s, comp_s = torch.cuda.Stream(), torch.cuda.Stream()
    slots = 2
    dev_in = [torch.empty(args.batch_size, 3, args.image_size, args.image_size, device="cuda") for _ in range(slots)]
    out_host = [torch.empty(args.batch_size, 1000, pin_memory=True) for _ in range(slots)]
    copied = [torch.cuda.Event() for _ in range(slots)]
    done = [torch.cuda.Event() for _ in range(slots)]

    def forward(x):
        return m(x.half().contiguous(memory_format=torch.channels_last)).float()

    t1 = time.perf_counter()
    graphs = None
    if args.cuda_graph:
        with torch.no_grad():
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    forward(dev_in[0])
            torch.cuda.current_stream().wait_stream(s)
            graphs, outs = [], []
            for k in range(slots):
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    outs.append(forward(dev_in[k]))
                graphs.append(g)
    torch.cuda.synchronize()
    compile_time = time.perf_counter() - t1

    def issue(i, k):
        with torch.cuda.stream(copy_s):
            copy_s.wait_event(done[k])  # the slot's previous forward has read its input
            dev_in[k].copy_(host[i % len(host)], non_blocking=True)
            copied[k].record(copy_s)
        with torch.cuda.stream(comp_s), torch.no_grad():
            comp_s.wait_event(copied[k])
            if graphs:
                graphs[k].replay()
                y = outs[k]
            else:
                y = forward(dev_in[k])
            out_host[k].copy_(y, non_blocking=True)
            done[k].record(comp_s)

    send = time.perf_counter()
    issue(0, 0)
    done[0].synchronize()
    warmup = time.perf_counter() - send + load_time + compile_time

    sampler.running.set()
    lat, sent = [], [0.0] * slots
    first = time.perf_counter()
    for i in range(args.num_iters):
        k = i % slots
        if i >= slots:
            done[k].synchronize()
            lat.append(time.perf_counter() - sent[k])
        sent[k] = time.perf_counter()
        issue(i + 1, k)
    for i in range(max(0, args.num_iters - slots), args.num_iters):
        k = i % slots
        done[k].synchronize()
        lat.append(time.perf_counter() - sent[k])
    last = time.perf_counter()
    sampler.running.clear()
    sampler.stop_.set()
    args.compile = bool(args.cuda_graph)
    summarize(args, "pytorch-fast" + ("-graph" if args.cuda_graph else ""), load_time, compile_time, warmup,
              lat, first, last, sampler, "fp16")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", choices=["reference", "fast"], default="reference")
    ap.add_argument("--num_iters", type=int, default=100)
    ap.add_argument("--batch_size", type=int, default=32)
    ap.add_argument("--image_size", type=int, default=250)
    ap.add_argument("--model_dir", default="/tmp/models")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=False)
    ap.add_argument("--num_workers", type=int, default=4)
    ap.add_argument("--cuda_graph", action="store_true", help="fast variant: replay a captured CUDA graph")
    ap.add_argument("--csv", default="", help="append a row in goinfer's CSV format here")
    args = ap.parse_args()
    if args.variant == "reference":
        run_reference(args)
    else:
        run_fast(args)


if __name__ == "__main__":
    main()
