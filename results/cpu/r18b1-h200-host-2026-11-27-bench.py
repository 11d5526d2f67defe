#!/usr/bin/env python3
"""cpu-r18b1 device run: base (main a80d952) vs new (cpu-r18b1: K split of
small-output convolutions for >= 4 workers) irexec test binaries
(TestProfileArchs: torchvision graph, random weights, ir.Optimize +
irexec.Compile) against onnxruntime (CPU provider, intra-op = threads,
inter-op 1) on the same architectures' ONNX exports, alternating rounds.
new runs with IREXEC_KSPLIT unset (the automatic choice), off, or forced
row,K ranges. Lines go to stdout as they come."""
import os, re, statistics, subprocess, time
import numpy as np

D = os.path.dirname(os.path.abspath(__file__))
T0 = time.time()


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


def gi(v, model, threads, batch, secs):
    binary, ks = v.split(":") if ":" in v else (v, None)
    env = dict(os.environ, IREXEC_NOSTEPS="1", IREXEC_PROFILE=model, IREXEC_THREADS=str(threads),
               IREXEC_BATCH=str(batch), IREXEC_SECONDS=str(secs))
    if ks:
        env["IREXEC_KSPLIT"] = ks
    out = subprocess.run([f"{D}/irexec-{binary}.test", "-test.run", "TestProfileArchs", "-test.v"], env=env,
                         capture_output=True, text=True).stdout
    m = re.search(r"best ([0-9.]+) ms .*mean ([0-9.]+) ms over (\d+) forwards, ([0-9.]+) CPU-ms", out)
    if not m:
        say("FAILED", v, model, out[-1500:])
        return None
    best, mean, n, cpu = float(m.group(1)), float(m.group(2)), int(m.group(3)), float(m.group(4))
    say(f"goinfer-{v} {model} t{threads} b{batch}: best {best:.2f} ms mean {mean:.2f} ms ({batch*1000/mean:.1f} img/s mean) n={n} cpu {cpu:.1f}")
    return (batch * 1000 / mean, best)


def ort(model, threads, batch, secs):
    import onnxruntime as rt
    so = rt.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    s = rt.InferenceSession(f"/tmp/onnx/{model}.onnx", so, providers=["CPUExecutionProvider"])
    x = np.random.rand(batch, 3, 224, 224).astype(np.float32)
    s.run(None, {"input": x}); s.run(None, {"input": x})
    n, st, best = 0, time.perf_counter(), 1e9
    while True:
        t = time.perf_counter(); s.run(None, {"input": x}); best = min(best, time.perf_counter() - t)
        n += 1
        el = time.perf_counter() - st
        if el >= secs and n >= 3:
            break
    say(f"onnxruntime {model} t{threads} b{batch}: best {best*1000:.2f} ms mean {el/n*1000:.2f} ms ({batch*n/el:.1f} img/s mean) n={n}")
    return (batch * n / el, best * 1000)


ROWS = {}


def cell(m, t, b, rounds, secs, vs):
    for r in range(rounds):
        for v in vs:
            x = gi(v, m, t, b, secs)
            if x:
                ROWS.setdefault((m, t, b), {}).setdefault(v, []).append(x)
        ROWS.setdefault((m, t, b), {}).setdefault("ort", []).append(ort(m, t, b, secs))


def table():
    print("\n| model | threads | batch | contender | img/s (mean-based, median of rounds) | best ms (median) | vs onnxruntime | rounds img/s |", flush=True)
    print("|---|---:|---:|---|---:|---:|---:|---|", flush=True)
    for (m, t, b), by in ROWS.items():
        o = statistics.median(x[0] for x in by["ort"])
        for v, xs in by.items():
            ips = statistics.median(x[0] for x in xs)
            best = statistics.median(x[1] for x in xs)
            print(f"| {m} | {t} | {b} | {v} | {ips:.1f} | {best:.2f} | {ips/o:.2f}x | {', '.join(f'{x[0]:.0f}' for x in xs)} |", flush=True)


def profile(v, threads, extra):
    env = dict(os.environ, IREXEC_PROFILE="resnet18", IREXEC_THREADS=str(threads), IREXEC_ITERS="10", IREXEC_SECONDS="1",
               IREXEC_PROFILE_CONV="1")
    env.update(extra)
    out = subprocess.run([f"{D}/irexec-{v}.test", "-test.run", "TestProfileArchs", "-test.v"], env=env,
                         capture_output=True, text=True).stdout
    say(f"profile {v} t{threads} {extra}:\n" + "\n".join(l for l in out.splitlines() if not l.startswith(("===", "---", "PASS", "ok"))))


def main():
    import onnxruntime
    say("onnxruntime", onnxruntime.__version__, "cpus", os.cpu_count())
    os.makedirs("/tmp/onnx", exist_ok=True)
    for m in ("resnet18", "mobilenet_v3_large", "efficientnet_b0"):
        export(m, f"/tmp/onnx/{m}.onnx")
    say("exported")
    cell("resnet18", 16, 1, 3, 1.0, ["base", "new", "new:off", "new:1,9", "new:2,9", "new:4,4", "new:1,18"])
    table()
    cell("resnet18", 8, 1, 1, 1.0, ["base", "new"])
    cell("resnet18", 2, 1, 2, 1.0, ["base", "new"])
    table()
    profile("new", 16, {})
    profile("new", 16, {"IREXEC_KSPLIT": "off"})
    for m in ("mobilenet_v3_large", "efficientnet_b0"):
        cell(m, 16, 1, 2, 1.0, ["base", "new"])
    cell("resnet18", 16, 32, 1, 1.0, ["base", "new"])
    table()


main()
