#!/usr/bin/env python3
"""Alternating A/B of goinfer's general-graph executor (irexec) builds
against onnxruntime on ONNX models, for a machine shared with other work:
every round runs each contender once per (model, batch) cell, and the
table reports per contender the median over rounds of the best forward
(wall ms) and of the process CPU ms per forward, the figure least
disturbed by other load.

    NODE_PATH=/tmp/ort/node_modules python3 tools/cpu/irexec_ab.py \\
        --models a.onnx,b.onnx --tests base=/tmp/irexec-base.test,new=/tmp/irexec-new.test \\
        [--threads 2] [--batches 1,32] [--rounds 3] [--seconds 3]

Each test binary is `go test -c ./internal/engine/cpu/irexec/` of one
build; it runs TestProfileArchs (ir.Optimize + irexec.Compile, the path of
`goinfer compute --engine cpu` for ONNX files) with IREXEC_NOSTEPS set.
onnxruntime runs tools/cpu/ort_bench.js (CPU provider, graph optimisations
all, intra-op threads = --threads, spinning off so its CPU time is work).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def goinfer(test, model, threads, batch, seconds):
    env = dict(os.environ, IREXEC_NOSTEPS="1", IREXEC_PROFILE=model, IREXEC_THREADS=str(threads),
               IREXEC_BATCH=str(batch), IREXEC_SECONDS=str(seconds), GOMAXPROCS=str(max(threads, 2)))
    out = subprocess.run([test, "-test.run", "TestProfileArchs", "-test.v"], env=env,
                         capture_output=True, text=True).stdout
    m = re.search(r"best ([0-9.]+) ms .* ([0-9.]+) CPU-ms each", out)
    if not m:
        sys.exit(f"{test} on {model}: no figures in\n{out[-2000:]}")
    return float(m.group(1)), float(m.group(2))


def ort(model, threads, batch, seconds):
    iters = 20 if batch == 1 else 3
    if batch > 1 and seconds > 6:
        iters = 5
    out = subprocess.run(["node", os.path.join(HERE, "ort_bench.js"), "--model", model, "--threads", str(threads),
                          "--batches", str(batch), "--iters", str(iters), "--warmup", "2"],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) > 9 and f[1].isdigit():
            return float(f[6]), float(f[8])
    sys.exit(f"ort_bench on {model}: no figures in\n{out[-2000:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True)
    ap.add_argument("--tests", required=True, help="name=binary,...")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3)
    a = ap.parse_args()
    tests = [t.split("=", 1) for t in a.tests.split(",")]
    rows = {}
    for r in range(a.rounds):
        for model in a.models.split(","):
            for b in map(int, a.batches.split(",")):
                cell = (os.path.basename(model).removesuffix(".onnx"), b)
                for name, binary in tests:
                    v = goinfer(binary, model, a.threads, b, a.seconds)
                    rows.setdefault(cell, {}).setdefault(name, []).append(v)
                    print(r, cell, name, v, file=sys.stderr, flush=True)
                v = ort(model, a.threads, b, a.seconds)
                rows[cell].setdefault("onnxruntime", []).append(v)
                print(r, cell, "onnxruntime", v, file=sys.stderr, flush=True)
    print(f"{a.threads} threads, {a.rounds} alternating rounds, medians; load average at the end: "
          f"{open('/proc/loadavg').read().split()[:3]}")
    print()
    print("| model | batch | contender | best ms | CPU ms/forward | img/s (best) | img/cpu-s | vs onnxruntime (best; CPU) | runs best / CPU |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---|")
    for (model, b), by in rows.items():
        ob = statistics.median(x[0] for x in by["onnxruntime"])
        oc = statistics.median(x[1] for x in by["onnxruntime"])
        for name, vs in by.items():
            best = statistics.median(x[0] for x in vs)
            cpu = statistics.median(x[1] for x in vs)
            runs = ", ".join(f"{x[0]:.1f}/{x[1]:.1f}" for x in vs)
            print(f"| {model} | {b} | {name} | {best:.1f} | {cpu:.1f} | {b * 1000 / best:.1f} | {b * 1000 / cpu:.1f} | "
                  f"{ob / best:.2f}x; {oc / cpu:.2f}x | {runs} |")


if __name__ == "__main__":
    main()
