#!/usr/bin/env python3
"""MobileNetV3-Large / EfficientNet-B0 at 2 threads, batch 1 (and 32): goinfer
variants (irexec TestProfileArchs binaries, torchvision graphs with random
weights) against onnxruntime on the same architectures' ONNX exports, in
alternating rounds; then per-step profiles of goinfer (1 and 2 threads) and
onnxruntime's per-node profiles (medians per node, grouped by op). Lines go
to stdout as they come.

Each variant is a test binary <name>.test next to this script, built with
`go test -c -trimpath -ldflags='-s -w' ./internal/engine/cpu/irexec/` from
the tree to measure (VARIANTS below: binary, extra environment, command
prefix). The cpu-dw2 run (results/cpu/dw2-h200-host-2026-11-27.md) unpacked
xz-compressed binaries and ran, on the device machine:

    python3 -u tools/cpu/variants_bench.py > $OUT/bench.log

DRY=1 runs MobileNetV3 alone (a quick check of the script)."""
import json, os, re, statistics, subprocess, sys, time
from collections import defaultdict
import numpy as np

D = os.path.dirname(os.path.abspath(__file__))
T0 = time.time()
MODELS = ["mobilenet_v3_large", "efficientnet_b0"]
if os.environ.get("DRY"):  # a quick local check of the script itself
    MODELS = MODELS[:1]
# name -> (binary, extra env, command prefix)
VARIANTS = {
    "main": ("main", {}, []),
    "cand": ("cand", {}, []),
    "candspin": ("candspin", {}, []),
    "spin": ("spin", {}, []),
    "cspin": ("cspin", {}, []),
    "huge": ("huge", {}, []),
    "tpt8": ("tpt8", {}, []),
    "tpt2": ("tpt2", {}, []),
    "gmp2": ("main", {"GOMAXPROCS": "2"}, []),
    "avx2": ("main", {"GODEBUG": "cpu.avx512f=off"}, []),
    "pin": ("main", {}, ["taskset", "-c", "4,5"]),
}
CORE = ["main", "cand", "candspin", "spin"]


def say(*a):
    print(f"[{time.time()-T0:6.1f}s]", *a, flush=True)


def export(name, path):
    import torch, torchvision
    m = getattr(torchvision.models, name)(weights=None).eval()
    kw = dict(input_names=["input"], output_names=["logits"], opset_version=17,
              dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    if hasattr(torch.onnx, "ONNXProgram"):
        kw["dynamo"] = False
    torch.onnx.export(m, torch.randn(1, 3, 224, 224), path, **kw)


def gi(v, model, threads, batch, secs, steps=False, extra=None):
    binary, env0, prefix = VARIANTS[v]
    env = dict(os.environ, IREXEC_PROFILE=model, IREXEC_THREADS=str(threads),
               IREXEC_BATCH=str(batch), IREXEC_SECONDS=str(secs))
    if not steps:
        env["IREXEC_NOSTEPS"] = "1"
    else:
        env.update(IREXEC_ITERS="20", IREXEC_PROFILE_CONV="1", IREXEC_PROFILE_DW="1")
    env.update(env0)
    env.update(extra or {})
    out = subprocess.run(prefix + [f"{D}/{binary}.test", "-test.run", "TestProfileArchs", "-test.v"], env=env,
                         capture_output=True, text=True).stdout
    m = re.search(r"best ([0-9.]+) ms .*mean ([0-9.]+) ms over (\d+) forwards, ([0-9.]+) CPU-ms", out)
    if not m:
        say("FAILED", v, model, out[-1500:])
        return None
    best, mean, n, cpu = float(m.group(1)), float(m.group(2)), int(m.group(3)), float(m.group(4))
    say(f"goinfer-{v} {model} t{threads} b{batch}: best {best:.2f} ms mean {mean:.2f} ms ({batch*1000/mean:.1f} img/s mean, {batch*1000/best:.1f} best) n={n} cpu {cpu:.1f}")
    if steps:
        print("\n".join(l for l in out.splitlines() if not l.startswith(("===", "---", "PASS", "ok"))), flush=True)
    return batch * 1000 / mean


def ort(path, model, threads, batch, secs, prof=False):
    import onnxruntime as rt
    so = rt.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    if prof:
        so.enable_profiling = True
        so.profile_file_prefix = f"/tmp/ortprof_{model}_{threads}"
    s = rt.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    x = np.random.rand(batch, 3, 224, 224).astype(np.float32)
    s.run(None, {"input": x}); s.run(None, {"input": x})
    n, st, best = 0, time.perf_counter(), 1e9
    while True:
        t = time.perf_counter(); s.run(None, {"input": x}); best = min(best, time.perf_counter() - t)
        n += 1
        el = time.perf_counter() - st
        if el >= secs and n >= 3:
            break
    say(f"onnxruntime{'-prof' if prof else ''} {model} t{threads} b{batch}: mean {el/n*1000:.2f} ms ({batch*n/el:.1f} img/s mean, {batch/best:.1f} best) n={n}")
    if prof:
        summarize(s.end_profiling(), n)
    return batch * n / el


def summarize(path, runs):
    ev = json.load(open(path))
    per_node = defaultdict(list)
    info = {}
    for e in ev:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        a = e.get("args", {})
        name = e["name"][:-len("_kernel_time")]
        per_node[name].append(e["dur"])
        info[name] = (a.get("op_name", "?"), a.get("input_type_shape", []), a.get("output_type_shape", []))
    kinds = defaultdict(float)
    kcount = defaultdict(int)
    rows = []
    total = 0.0
    for name, ds in per_node.items():
        med = statistics.median(ds[2:] if len(ds) > 4 else ds)
        mn = min(ds)
        op, ins, outs = info[name]
        def shp(l):
            return ["x".join(str(d) for d in list(x.values())[0]) for x in l]
        ish, osh = shp(ins), shp(outs)
        k = op
        if op in ("Conv", "FusedConv") and len(ish) > 1:
            w = ish[1].split("x")
            k = f"{op} w{ish[1]} out {osh[0] if osh else '?'}"
        kinds[op] += med
        kcount[op] += 1
        total += med
        rows.append((med, mn, name, op, ish, osh))
    say(f"  onnxruntime per-node medians: total {total/1000:.3f} ms over {len(per_node)} nodes ({runs} runs)")
    for op, v in sorted(kinds.items(), key=lambda x: -x[1]):
        print(f"    {op:28s} {v/1000:8.3f} ms {100*v/total:5.1f}% ({kcount[op]})", flush=True)
    print("  nodes (median us, min us, op, inputs -> outputs):", flush=True)
    for med, mn, name, op, ish, osh in sorted(rows, key=lambda r: -r[0]):
        print(f"    {med:8.1f} {mn:8.1f} {op:20s} {' '.join(ish)} -> {' '.join(osh)}", flush=True)


def main():
    import onnxruntime
    say("onnxruntime", onnxruntime.__version__, "cpus", os.cpu_count())
    os.makedirs("/tmp/onnx", exist_ok=True)
    for m in MODELS:
        export(m, f"/tmp/onnx/{m}.onnx")
    say("exported")
    rows = defaultdict(lambda: defaultdict(list))
    for r in range(3):
        for m in MODELS:
            vs = list(VARIANTS) if r < 2 else CORE
            if r == 1:
                vs = vs[::-1]
            for i, v in enumerate(vs):
                x = gi(v, m, 2, 1, 0.8)
                if x:
                    rows[(m, 2, 1)][v].append(x)
                if i == len(vs) // 2:
                    rows[(m, 2, 1)]["ort"].append(ort(f"/tmp/onnx/{m}.onnx", m, 2, 1, 1.0))
    table(rows)
    for m in MODELS:
        for t in (1, 2):
            gi("main", m, t, 1, 0.7, steps=True)
        gi("cand", m, 2, 1, 0.7, steps=True)
        for t in (1, 2):
            ort(f"/tmp/onnx/{m}.onnx", m, t, 1, 1.0, prof=True)
    for m in MODELS:
        for v in ("main", "cand", "candspin"):
            x = gi(v, m, 2, 32, 1.0)
            if x:
                rows[(m, 2, 32)][v].append(x)
        rows[(m, 2, 32)]["ort"].append(ort(f"/tmp/onnx/{m}.onnx", m, 2, 32, 1.0))
    table(rows)


def table(rows):
    vs = list(VARIANTS)
    print("\n| model | threads | batch | onnxruntime | " + " | ".join(vs) + " |", flush=True)
    print("|---|---:|---:|---:|" + "---:|" * len(vs), flush=True)
    for (m, t, b), by in rows.items():
        o = statistics.median(by["ort"])
        cells = []
        for v in vs:
            if by.get(v):
                x = statistics.median(by[v])
                cells.append(f"{x:.1f} ({x/o:.2f}x)")
            else:
                cells.append("")
        print(f"| {m} | {t} | {b} | {o:.1f} | " + " | ".join(cells) + " |", flush=True)
    print("runs:", {f"{k[0]} b{k[2]}": {v: [round(x) for x in xs] for v, xs in by.items()} for k, by in rows.items()}, flush=True)


main()
