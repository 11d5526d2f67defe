#!/usr/bin/env python3
"""PyTorch's side of `goinfer compute`: the same cells (batch sizes x image
sizes, input already on the GPU, back-to-back forwards timed with CUDA
events) for the ways a PyTorch user runs ResNet-18, printed as the same
markdown table so the two can be read side by side.

Variants (column "precision", column "compile" says how it runs):
  fp32        NCHW float32, TF32 off, cudnn.benchmark off   (eager)
  tf32        NCHW float32, TF32 on, cudnn.benchmark on     (eager)
  fp16        float16 channels_last, cudnn.benchmark off    (eager)
  fp16        float16 channels_last, cudnn.benchmark on, one CUDA graph per
              batch size                                     (graph)
  bf16        bfloat16 channels_last, cudnn.benchmark off   (eager)
  fp16        torch.compile(mode="max-autotune") (only with --max-autotune;
              it takes minutes)                              (max-autotune)

The input is already in the variant's dtype and memory format (as the
reference's compute numbers were measured); goinfer's forwards also convert
fp32 NCHW input on the GPU, which is included in its figures.

    python3 tools/pytorch_compute.py --batch_sizes 1,32,64,128,256 --image_sizes 224,250
"""
import argparse
import datetime
import sys
import time

import torch
import torchvision


def timed(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    evs = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    evs[0].record()
    for i in range(iters):
        fn()
        evs[i + 1].record()
    torch.cuda.synchronize()
    total = evs[0].elapsed_time(evs[-1])
    per = sorted(evs[i].elapsed_time(evs[i + 1]) for i in range(iters))
    return total / iters, per


def quantile(v, q):
    pos = q * (len(v) - 1)
    lo = int(pos)
    if lo + 1 >= len(v):
        return v[lo]
    return v[lo] + (pos - lo) * (v[lo + 1] - v[lo])


def build(checkpoint):
    net = torchvision.models.resnet18(weights=None)
    if checkpoint:
        net.load_state_dict(torch.load(checkpoint, map_location="cpu"))
    return net.eval()


VARIANTS = {
    # name: (precision, compile label, dtype, channels_last, tf32, benchmark, graph)
    "fp32": ("fp32", "false", torch.float32, False, False, False, False),
    "tf32": ("tf32", "false", torch.float32, False, True, True, False),
    "fp16": ("fp16", "false", torch.float16, True, False, False, False),
    "fp16-graph": ("fp16", "graph", torch.float16, True, False, True, True),
    "bf16": ("bf16", "false", torch.bfloat16, True, False, False, False),
}


def cell(variant, size, bs, args):
    prec, label, dtype, cl, tf32, bench, graph = VARIANTS[variant]
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = bench
    fmt = torch.channels_last if cl else torch.contiguous_format
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    net = build(args.checkpoint).to("cuda", dtype).to(memory_format=fmt)
    weights = torch.cuda.memory_allocated()
    x = torch.randn(bs, 3, size, size, device="cuda").to(dtype).contiguous(memory_format=fmt)
    compile_s = 0.0
    with torch.inference_mode():
        fn = lambda: net(x)
        if graph:
            t0 = time.perf_counter()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    net(x)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                net(x)
            torch.cuda.synchronize()
            compile_s = time.perf_counter() - t0
            fn = g.replay
        ms, per = timed(fn, args.iters, args.warmup)
    peak = torch.cuda.max_memory_allocated()
    row = dict(engine="pytorch", precision=prec, compile=label, image=size, batch=bs, ips=bs * 1000.0 / ms, ms=ms,
               p50=quantile(per, 0.5), p90=quantile(per, 0.9), compile_s=compile_s,
               weights=weights / 2**20, act=(peak - weights) / 2**20)
    del net, x
    return row


def autotune_cell(size, bs, args):
    torch.backends.cudnn.benchmark = True
    net = build(args.checkpoint).to("cuda", torch.float16).to(memory_format=torch.channels_last)
    x = torch.randn(bs, 3, size, size, device="cuda").half().contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        t0 = time.perf_counter()
        cnet = torch.compile(net, mode="max-autotune")
        cnet(x)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - t0
        ms, per = timed(lambda: cnet(x), args.iters, args.warmup)
    return dict(engine="pytorch", precision="fp16", compile="max-autotune", image=size, batch=bs, ips=bs * 1000.0 / ms, ms=ms,
                p50=quantile(per, 0.5), p90=quantile(per, 0.9), compile_s=compile_s, weights=0, act=0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch_sizes", default="1,32,64,128,256")
    ap.add_argument("--image_sizes", default="224,250")
    ap.add_argument("--variants", default="fp32,tf32,fp16,fp16-graph,bf16")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--checkpoint", default="", help="torchvision resnet18 state dict; default random weights")
    ap.add_argument("--max-autotune", default="", help="also torch.compile max-autotune for SIZExBATCH cells, e.g. 224x256")
    args = ap.parse_args()
    sizes = [int(s) for s in args.image_sizes.split(",")]
    batches = [int(b) for b in args.batch_sizes.split(",")]
    rows = []
    for size in sizes:
        for v in filter(None, args.variants.split(",")):
            for bs in batches:
                try:
                    r = cell(v, size, bs, args)
                except torch.cuda.OutOfMemoryError as e:
                    print("pytorch %s %d batch %d: out of memory: %s" % (v, size, bs, e), file=sys.stderr)
                    continue
                print("pytorch %-10s %d batch %3d: %9.0f img/s  %.3f ms/forward" % (v, size, bs, r["ips"], r["ms"]), file=sys.stderr)
                rows.append(r)
    for cellspec in filter(None, args.max_autotune.split(",")):
        size, bs = (int(p) for p in cellspec.split("x"))
        rows.append(autotune_cell(size, bs, args))
    dev = torch.cuda.get_device_name()
    print("## PyTorch %s compute: %s\n" % (torch.__version__, dev))
    print("- date: %s\n- command: `%s`\n- cuDNN %s, CUDA %s; input already on the GPU in the variant's dtype and memory format; %d warm-up and %d timed forwards per cell\n"
          % (datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), " ".join(sys.argv), torch.backends.cudnn.version(),
             torch.version.cuda, args.warmup, args.iters))
    print("| engine | precision | compile | image | batch | img/s | ms/forward | p50 ms | p90 ms | compile s | weights MiB | workspace MiB | activations MiB |")
    print("|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| %s | %s | %s | %d | %d | %.0f | %.3f | %.3f | %.3f | %.2f | %.1f | - | %.1f |" % (
            r["engine"], r["precision"], r["compile"], r["image"], r["batch"], r["ips"], r["ms"], r["p50"], r["p90"],
            r["compile_s"], r["weights"], r["act"]))


if __name__ == "__main__":
    main()
