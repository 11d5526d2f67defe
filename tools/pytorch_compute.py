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

Any torchvision model (--models): for each model, batch size and mode, the
median device time per forward over the timed forwards after warm-up (img/s
= batch / median), the mean, p90 and the compile time. Every mode runs
float16 (--dtype) channels-last weights and input, under inference_mode,
cudnn.benchmark on:
  eager       net(x)
  cudagraph   the same forward captured once in a torch.cuda.CUDAGraph and replayed
  compile     torch.compile(net, mode="reduce-overhead", dynamic=False), one
              fresh compile per batch size (torch._dynamo.reset() between);
              "compile s" is the first three calls (compile, warm-up, CUDA
              graph recording)
Each model runs in a child process, eager and cudagraph cells of every model
first and compile cells after, so that a slow compile costs only compile
cells: a cell that fails prints its error in the table and the run goes on;
a compile that passes --compile_limit seconds is stopped and the model's
other compile cells are skipped; a child that passes --model_limit is
killed; with --budget, cells that would start after the budget are skipped.
Every skip is said in its cell.

    python3 tools/pytorch_compute.py --models resnet50,mobilenet_v3_large,efficientnet_b0,regnet_y_800mf,convnext_tiny,vit_b_16,densenet121 \\
        --batches 256,1 --modes eager,cudagraph,compile --compile_batches 256 --budget 360 \\
        --csv /tmp/pytorch-models.csv --output /tmp/pytorch-models.md
    # on a CPU, to try the script (fp16 convolutions and CUDA graphs need a GPU):
    python3 tools/pytorch_compute.py --device cpu --dtype fp32 --models resnet18,mobilenet_v3_small \\
        --batches 2,1 --image_size 64 --iters 3 --warmup 1
"""
import argparse
import csv
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
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

# --- any torchvision model (--models) ---------------------------------------

MODES = ("eager", "cudagraph", "compile")
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


class CompileTimeout(Exception):
    # fired stays set once the alarm went off: torch.compile may wrap the
    # exception in its own.
    fired = False


def _alarm(signum, frame):
    CompileTimeout.fired = True
    raise CompileTimeout()


def timed_host(fn, iters, warmup):
    """timed for the CPU: wall time of each forward."""
    for _ in range(warmup):
        fn()
    per = []
    t = time.perf_counter()
    for _ in range(iters):
        fn()
        now = time.perf_counter()
        per.append((now - t) * 1e3)
        t = now
    return sum(per) / iters, sorted(per)


def model_cell(name, net, mode, bs, args, compile_limit):
    """One (model, batch, mode) cell: a row with the median and mean ms per
    forward, or raises."""
    dtype = DTYPES[args.dtype]
    dev = args.device
    x = torch.randn(bs, 3, args.image_size, args.image_size, device=dev).to(dtype).contiguous(memory_format=torch.channels_last)
    timer = timed if dev == "cuda" else timed_host
    compile_s = 0.0
    with torch.inference_mode():
        fn = lambda: net(x)
        if mode == "cudagraph":
            if dev != "cuda":
                raise RuntimeError("CUDA graphs need --device cuda")
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
        elif mode == "compile":
            torch._dynamo.reset()
            # Tells CUDA graph trees that each call starts a new iteration,
            # as their documentation asks of a loop that replays the graph.
            step = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", lambda: None)
            t0 = time.perf_counter()
            old = signal.signal(signal.SIGALRM, _alarm)
            signal.setitimer(signal.ITIMER_REAL, max(compile_limit, 1))
            try:
                cnet = torch.compile(net, mode="reduce-overhead", dynamic=False)
                for _ in range(3):  # compile, warm-up run, CUDA graph recording
                    step()
                    cnet(x)
                if dev == "cuda":
                    torch.cuda.synchronize()
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, old)
            compile_s = time.perf_counter() - t0

            def fn():
                step()
                return cnet(x)
        mean, per = timer(fn, args.iters, args.warmup)
    med = quantile(per, 0.5)
    return dict(model=name, batch=bs, mode=mode, dtype=args.dtype, image=args.image_size, ips=bs * 1000.0 / med,
                ms=med, mean_ms=mean, p90=quantile(per, 0.9), compile_s=compile_s, error="")


def build_model(name, args):
    net = torchvision.models.get_model(name, weights=None).eval()
    return net.to(args.device, DTYPES[args.dtype]).to(memory_format=torch.channels_last)


def model_worker(args):
    """Child process: the cells of one model and phase (--modes), each row
    appended to --rows_file as a JSON line as soon as it is measured."""
    name = args.models
    modes = [m for m in args.modes.split(",") if m]
    batches = [int(b) for b in args.batches.split(",")]
    compile_batches = [int(b) for b in args.compile_batches.split(",")] if args.compile_batches else batches
    if args.device == "cuda":
        torch.backends.cudnn.benchmark = not args.no_cudnn_benchmark
    out = open(args.rows_file, "a")

    def emit(row):
        out.write(json.dumps(row) + "\n")
        out.flush()
        if row["error"]:
            print("pytorch %-20s %-9s batch %3d: %s" % (name, row["mode"], row["batch"], row["error"]), file=sys.stderr)
        else:
            print("pytorch %-20s %-9s batch %3d: %9.0f img/s  %.3f ms/forward (median)%s" % (
                name, row["mode"], row["batch"], row["ips"], row["ms"],
                "  %s %.1f s" % ("capture" if row["mode"] == "cudagraph" else "compile", row["compile_s"]) if row["mode"] != "eager" else ""),
                file=sys.stderr)

    try:
        net = build_model(name, args)
    except Exception as e:  # a model torchvision lacks, out of memory
        for bs in batches:
            for mode in modes:
                emit(error_row(name, bs, mode, args, "%s: %s" % (type(e).__name__, e)))
        return
    skip_compile = ""
    for bs in batches:
        for mode in modes:
            left = args.deadline - time.time() if args.deadline else float("inf")
            if mode == "compile" and bs not in compile_batches:
                emit(error_row(name, bs, mode, args, "not run (--compile_batches %s)" % args.compile_batches))
                continue
            if mode == "compile" and skip_compile:
                emit(error_row(name, bs, mode, args, skip_compile))
                continue
            if left <= 0:
                emit(error_row(name, bs, mode, args, "skipped: time budget spent"))
                continue
            limit = min(args.compile_limit, left)
            CompileTimeout.fired = False
            try:
                try:
                    emit(model_cell(name, net, mode, bs, args, limit))
                except Exception as e:
                    if CompileTimeout.fired:
                        raise CompileTimeout() from e
                    raise
            except CompileTimeout:
                torch._dynamo.reset()
                why = "--compile_limit" if limit == args.compile_limit else "time budget"
                emit(error_row(name, bs, mode, args, "skipped: compile passed %.0f s (%s)" % (limit, why)))
                skip_compile = "skipped: the compile of batch %d passed %.0f s" % (bs, limit)
            except Exception as e:
                msg = str(e).strip().splitlines()
                emit(error_row(name, bs, mode, args, "%s: %s" % (type(e).__name__, msg[0] if msg else "")))
            if args.device == "cuda":
                torch.cuda.empty_cache()


def error_row(name, bs, mode, args, err):
    return dict(model=name, batch=bs, mode=mode, dtype=args.dtype, image=args.image_size, ips=0.0, ms=0.0, mean_ms=0.0,
                p90=0.0, compile_s=0.0, error=err)


def run_models(args):
    """Parent: one child process per model and phase; collects the rows,
    fills the cells a child did not report, prints and writes the tables."""
    t_start = time.time()
    deadline = t_start + args.budget if args.budget > 0 else 0
    models = list(dict.fromkeys(m for m in args.models.split(",") if m))
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        sys.exit("--modes: unknown %s (want %s)" % (",".join(bad), ",".join(MODES)))
    batches = [int(b) for b in args.batches.split(",")]
    phases = [[m for m in modes if m != "compile"], [m for m in modes if m == "compile"]]
    rows = {}
    rows_file = tempfile.NamedTemporaryFile(prefix="pytorch-models-", suffix=".jsonl", delete=False).name
    for phase in filter(None, phases):
        for name in models:
            left = deadline - time.time() if deadline else float("inf")
            limit = min(args.model_limit, left)
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--models", name, "--modes", ",".join(phase),
                   "--batches", args.batches, "--compile_batches", args.compile_batches, "--image_size", str(args.image_size),
                   "--dtype", args.dtype, "--device", args.device, "--iters", str(args.iters), "--warmup", str(args.warmup),
                   "--compile_limit", str(args.compile_limit), "--deadline", str(deadline), "--rows_file", rows_file]
            if args.no_cudnn_benchmark:
                cmd.append("--no_cudnn_benchmark")
            why = ""
            if limit <= 0:
                why = "skipped: time budget spent"
            else:
                # A session of its own, so that a timeout also ends the
                # compile workers torch.compile starts.
                child = subprocess.Popen(cmd, start_new_session=True)
                try:
                    rc = child.wait(timeout=limit)
                    if rc != 0:
                        why = "the child process exited with status %d (see stderr)" % rc
                except subprocess.TimeoutExpired:
                    os.killpg(child.pid, signal.SIGKILL)
                    child.wait()
                    why = "stopped: the model passed %.0f s (%s)" % (limit, "--model_limit" if limit == args.model_limit else "time budget")
            with open(rows_file) as f:
                for line in f:
                    r = json.loads(line)
                    rows[(r["model"], r["batch"], r["mode"])] = r
            for bs in batches:
                for mode in phase:
                    if (name, bs, mode) not in rows:
                        rows[(name, bs, mode)] = error_row(name, bs, mode, args, why or "no result")
    os.unlink(rows_file)
    ordered = [rows[(m, b, mode)] for m in models for b in batches for mode in modes]
    md = models_markdown(ordered, models, batches, modes, args, time.time() - t_start)
    print(md)
    if args.output:
        with open(args.output, "w") as f:
            f.write(md)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["engine", "device", "model", "dtype", "mode", "image", "batch", "img_per_s", "ms_median", "ms_mean", "p90_ms",
                        "compile_s", "error"])
            for r in ordered:
                ok = not r["error"]
                w.writerow(["pytorch", device_name(args), r["model"], r["dtype"], r["mode"], r["image"], r["batch"],
                            "%.1f" % r["ips"] if ok else "", "%.4f" % r["ms"] if ok else "", "%.4f" % r["mean_ms"] if ok else "",
                            "%.4f" % r["p90"] if ok else "", "%.2f" % r["compile_s"] if ok and r["mode"] != "eager" else "", r["error"]])


def device_name(args):
    if args.device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return "cpu"


def md_cell(s):
    return s.replace("|", "\\|").replace("\n", " ")[:120]


def models_markdown(rows, models, batches, modes, args, took):
    b = []
    b.append("## PyTorch %s compute, torchvision models: %s\n" % (torch.__version__, device_name(args)))
    cudnn = "cuDNN %s, CUDA %s, cudnn.benchmark %s; " % (torch.backends.cudnn.version(), torch.version.cuda,
                                                       "off" if args.no_cudnn_benchmark else "on") if args.device == "cuda" else ""
    b.append("- date: %s\n- command: `%s`\n- %s%s channels-last weights and input (%dx%d, already on the device), inference_mode, "
             "random weights; %d warm-up and %d timed forwards per cell; img/s = batch / median ms; took %.0f s\n" % (
                 datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), " ".join(sys.argv), cudnn,
                 args.dtype, args.image_size, args.image_size, args.warmup, args.iters, took))
    head = "| model | batch |"
    rule = "|---|---:|"
    for m in modes:
        head += " %s img/s | %s ms |" % (m, m)
        rule += "---:|---:|"
        if m != "eager":
            head += " %s s |" % ("capture" if m == "cudagraph" else "compile")
            rule += "---:|"
    b.append(head + " best |")
    b.append(rule + "---|")
    by = {(r["model"], r["batch"], r["mode"]): r for r in rows}
    for name in models:
        for bs in batches:
            line = "| %s | %d |" % (name, bs)
            best, best_ips = "-", 0.0
            for m in modes:
                r = by[(name, bs, m)]
                if r["error"]:
                    line += " %s | |" % md_cell(r["error"]) + (" |" if m != "eager" else "")
                    continue
                line += " %.0f | %.3f |" % (r["ips"], r["ms"])
                if m != "eager":
                    line += " %.1f |" % r["compile_s"]
                if r["ips"] > best_ips:
                    best, best_ips = m, r["ips"]
            b.append(line + " %s |" % best)
    return "\n".join(b) + "\n"



def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch_sizes", default="1,32,64,128,256")
    ap.add_argument("--image_sizes", default="224,250")
    ap.add_argument("--variants", default="fp32,tf32,fp16,fp16-graph,bf16")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--checkpoint", default="", help="torchvision resnet18 state dict; default random weights")
    ap.add_argument("--max-autotune", default="", help="also torch.compile max-autotune for SIZExBATCH cells, e.g. 224x256")
    ap.add_argument("--models", default="", help="torchvision model names, e.g. resnet50,vit_b_16: measure these (see above) instead of the ResNet-18 variants")
    ap.add_argument("--batches", default="", help="batch sizes of --models (default 256,1); without --models, overrides --batch_sizes")
    ap.add_argument("--modes", default="eager,cudagraph,compile", help="--models: eager, cudagraph, compile")
    ap.add_argument("--compile_batches", default="", help="--models: run the compile mode at these batch sizes only (default: all)")
    ap.add_argument("--image_size", type=int, default=224, help="--models: square image size")
    ap.add_argument("--dtype", default="fp16", choices=sorted(DTYPES), help="--models: weights and input dtype")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="--models: cpu only to try the script")
    ap.add_argument("--no_cudnn_benchmark", action="store_true", help="--models: leave cudnn.benchmark off")
    ap.add_argument("--compile_limit", type=float, default=120, help="--models: seconds one torch.compile may take")
    ap.add_argument("--model_limit", type=float, default=300, help="--models: seconds one model's child process may take per phase")
    ap.add_argument("--budget", type=float, default=0, help="--models: seconds for the whole run (0: no limit); later cells are skipped")
    ap.add_argument("--csv", default="", help="--models: also write the rows as CSV to this file")
    ap.add_argument("--output", default="", help="--models: also write the markdown table to this file")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rows_file", default="", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.models:
        args.batches = args.batches or "256,1"
        if args.worker:
            model_worker(args)
        else:
            run_models(args)
        return
    if args.batches:
        args.batch_sizes = args.batches
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
