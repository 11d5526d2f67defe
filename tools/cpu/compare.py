#!/usr/bin/env python3
"""goinfer's cpu engine against onnxruntime and PyTorch on the CPU: the same
ONNX export of each torchvision model (random weights), the same thread
counts, the same batch sizes, in one run on one machine.

    python3 tools/cpu/compare.py --goinfer .bin/goinfer \
        [--models resnet18,mobilenet_v3_large,efficientnet_b0,vit_b_16] \
        [--threads 16,2] [--batches 1,32] [--seconds 3] [--rounds 1] [--no_torch] [--out FILE.md]

Each cell runs for about --seconds after a warm-up and reports images per
second (batch / mean time per forward). With --rounds N, goinfer and
onnxruntime take turns N times per cell (a shared host drifts by tens of
percent within a minute) and the table gives each one's median, the median
of the N paired ratios and their range. onnxruntime runs with its CPU
provider, intra-op threads = the thread count, graph optimisations on;
PyTorch with torch.set_num_threads and inference_mode; goinfer with
`goinfer compute --engine cpu --threads N --compile true`.
"""
import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torchvision


def export(name, path):
    m = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    kw = dict(input_names=["input"], output_names=["logits"], opset_version=17,
              dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    if hasattr(torch.onnx, "ONNXProgram"):  # torch >= 2.5 would pick the dynamo exporter
        kw["dynamo"] = False
    torch.onnx.export(m, x, path, **kw)
    return m


def timed(fn, seconds):
    fn()  # warm-up
    fn()
    n, start = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        el = time.perf_counter() - start
        if el >= seconds and n >= 3:
            return el / n


def ort_session(path, threads):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def ort_ips(s, batch, seconds):
    x = np.random.rand(batch, 3, 224, 224).astype(np.float32)
    return batch / timed(lambda: s.run(None, {"input": x}), seconds)


def torch_ips(model, threads, batch, seconds):
    torch.set_num_threads(threads)
    x = torch.randn(batch, 3, 224, 224)
    with torch.inference_mode():
        return batch / timed(lambda: model(x), seconds)


def goinfer_run(binary, path, threads, batch, iters, warmup):
    """One `goinfer compute` run of one batch size: (img/s, ms per forward)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "rows.csv")
        cmd = [binary, "compute", "--engine", "cpu", "--checkpoint", path, "--threads", str(threads),
               "--batch_sizes", str(batch), "--image_sizes", "224", "--compile", "true",
               "--iters", str(iters), "--warmup", str(warmup), "--csv", out]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"goinfer failed: {' '.join(cmd)}\n{r.stderr[-2000:]}", file=sys.stderr)
            return None
        with open(out) as f:
            row = next(csv.DictReader(f))
            return float(row["img_per_s"]), float(row["ms_per_forward"])


def goinfer_sizes(binary, path, threads, batch, seconds):
    """(iters, warmup) for about --seconds of goinfer forwards in a cell,
    or None if goinfer fails. Timed like onnxruntime and PyTorch: a short
    probe sizes the run (a forward takes 3 ms at batch 1 and about a second
    at batch 32 on two threads); 5 forwards alone, at batch 1, are 20-30 ms
    of timing that one descheduling or a cold cache moves by tens of
    percent."""
    probe = goinfer_run(binary, path, threads, batch, 3, 1)
    if probe is None:
        return None
    iters = max(5, min(10000, int(seconds * 1e3 / max(probe[1], 1e-3))))
    return iters, max(2, min(50, iters // 10))


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return (xs[n // 2] + xs[(n - 1) // 2]) / 2 if n else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--goinfer", default=".bin/goinfer")
    ap.add_argument("--models", default="resnet18,mobilenet_v3_large,efficientnet_b0,vit_b_16")
    ap.add_argument("--threads", default=f"{os.cpu_count()},2")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--workdir", default="/tmp/cpu_compare")
    ap.add_argument("--rounds", type=int, default=1, help="goinfer and onnxruntime take turns this many times per cell")
    ap.add_argument("--no_torch", action="store_true", help="leave PyTorch out")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    batches = [int(b) for b in a.batches.split(",")]
    rounds = max(1, a.rounds)
    os.makedirs(a.workdir, exist_ok=True)
    import onnxruntime
    head = "| model | threads | batch | goinfer img/s | onnxruntime img/s | PyTorch img/s | goinfer / onnxruntime |"
    rule = "|---|---:|---:|---:|---:|---:|---:|"
    if rounds > 1:
        head += " ratio range |"
        rule += "---|"
    lines = [f"torch {torch.__version__}, torchvision {torchvision.__version__}, onnxruntime {onnxruntime.__version__}, "
             f"{os.cpu_count()} CPUs, fp32, 224x224, random weights"
             + (f"; {rounds} alternating rounds per cell, medians" if rounds > 1 else ""),
             "", head, rule]
    print("\n".join(lines), flush=True)
    nan = float("nan")
    for name in a.models.split(","):
        path = os.path.join(a.workdir, name + ".onnx")
        model = export(name, path)
        for t in threads:
            sess = ort_session(path, t)
            for b in batches:
                sizes = goinfer_sizes(a.goinfer, path, t, b, a.seconds)
                gs, os_, ratios = [], [], []
                for _ in range(rounds):
                    r = goinfer_run(a.goinfer, path, t, b, *sizes) if sizes else None
                    o = ort_ips(sess, b, a.seconds)
                    os_.append(o)
                    if r is not None:
                        gs.append(r[0])
                        ratios.append(r[0] / o)
                p = nan if a.no_torch else torch_ips(model, t, b, a.seconds)
                gi, o = median(gs), median(os_)
                ratio = median(ratios) if ratios else nan
                line = f"| {name} | {t} | {b} | {gi:.1f} | {o:.1f} | {p:.1f} | {ratio:.2f}x |"
                if rounds > 1:
                    line += f" {min(ratios, default=nan):.2f}-{max(ratios, default=nan):.2f} |"
                lines.append(line)
                print(line, flush=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
