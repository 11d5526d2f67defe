#!/usr/bin/env python3
"""goinfer's cpu engine against onnxruntime and PyTorch on the CPU: the same
ONNX export of each torchvision model (random weights), the same thread
counts, the same batch sizes, in one run on one machine.

    python3 tools/cpu/compare.py --goinfer .bin/goinfer \
        [--models resnet18,mobilenet_v3_large,efficientnet_b0,vit_b_16] \
        [--threads 16,2] [--batches 1,32] [--seconds 3] [--out FILE.md]

Each cell runs for about --seconds after a warm-up and reports images per
second (batch / mean time per forward). onnxruntime runs with its CPU
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


def ort_ips(path, threads, batch, seconds):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
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


def goinfer_ips(binary, path, threads, batches, seconds):
    # Timed like onnxruntime and PyTorch: about --seconds of back-to-back
    # forwards after a warm-up. A short probe sizes the run per cell (a
    # forward takes 3 ms at batch 1 and about a second at batch 32 on two
    # threads); 5 forwards alone, at batch 1, are 20-30 ms of timing that
    # one descheduling or a cold cache moves by tens of percent.
    res = {}
    for b in batches:
        probe = goinfer_run(binary, path, threads, b, 3, 1)
        if probe is None:
            continue
        iters = max(5, min(10000, int(seconds * 1e3 / max(probe[1], 1e-3))))
        warmup = max(2, min(50, iters // 10))
        r = goinfer_run(binary, path, threads, b, iters, warmup)
        if r is not None:
            res[b] = r[0]
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--goinfer", default=".bin/goinfer")
    ap.add_argument("--models", default="resnet18,mobilenet_v3_large,efficientnet_b0,vit_b_16")
    ap.add_argument("--threads", default=f"{os.cpu_count()},2")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--workdir", default="/tmp/cpu_compare")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    batches = [int(b) for b in a.batches.split(",")]
    os.makedirs(a.workdir, exist_ok=True)
    import onnxruntime
    lines = [f"torch {torch.__version__}, torchvision {torchvision.__version__}, onnxruntime {onnxruntime.__version__}, "
             f"{os.cpu_count()} CPUs, fp32, 224x224, random weights",
             "",
             "| model | threads | batch | goinfer img/s | onnxruntime img/s | PyTorch img/s | goinfer / onnxruntime |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    for name in a.models.split(","):
        path = os.path.join(a.workdir, name + ".onnx")
        model = export(name, path)
        for t in threads:
            g = goinfer_ips(a.goinfer, path, t, batches, a.seconds)
            for b in batches:
                o = ort_ips(path, t, b, a.seconds)
                p = torch_ips(model, t, b, a.seconds)
                gi = g.get(b, float("nan"))
                line = f"| {name} | {t} | {b} | {gi:.1f} | {o:.1f} | {p:.1f} | {gi / o:.2f}x |"
                lines.append(line)
                print(line, flush=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
