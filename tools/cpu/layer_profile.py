#!/usr/bin/env python3
"""Where a model's CPU time goes: goinfer's per-layer profile beside
onnxruntime's per-node profile, for one model, thread count and batch.

    python3 tools/cpu/layer_profile.py --goinfer .bin/goinfer \
        --model mobilenet_v3_large [--threads 2] [--batch 1] [--iters 50] \
        [--ort auto|python|node] [--out FILE.md]

--model is an ONNX file or a torchvision architecture, exported here with
random weights (needs torch and torchvision). goinfer runs
`goinfer compute --engine cpu --profile` (each planned step timed over
--iters forwards, its median kept; a split batch's steps summed over the
chunks and divided by the threads). onnxruntime runs the same file with its
CPU provider, intra-op threads = --threads, graph optimisations on,
profiling on (SessionOptions.enable_profiling): each node's kernel time is
averaged over the --iters timed runs. With --ort node (auto picks it when
the onnxruntime Python package is missing) the same native library runs
through the npm package onnxruntime-node: set NODE_PATH to a node_modules
holding it (`npm install --ignore-scripts onnxruntime-node` in a scratch
directory outside the repository).

The report has four tables: both engines' totals; time by op kind
(goinfer's fused kinds such as Conv+GlobalAveragePool, onnxruntime's op
types such as Conv and ReorderInput); time by module, the first --depth
components of the ONNX node names ("/features/features.4": one inverted
residual block; both engines rename the nodes they fuse, the modules stay);
and goinfer's steps one by one.
"""
import argparse
import csv
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict

ORT_NODE_JS = r"""
const ort = require('onnxruntime-node');
const [model, threads, batch, iters, warmup, prefix, size] = process.argv.slice(1);
(async () => {
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['cpu'], intraOpNumThreads: Number(threads), interOpNumThreads: 1,
    graphOptimizationLevel: 'all', enableProfiling: true, profileFilePrefix: prefix,
    extra: { session: { intra_op: { allow_spinning: '1' } } },
  });
  const n = Number(batch) * 3 * Number(size) * Number(size);
  const data = new Float32Array(n);
  for (let i = 0; i < n; i++) data[i] = Math.random();
  const feeds = { [session.inputNames[0]]: new ort.Tensor('float32', data, [Number(batch), 3, Number(size), Number(size)]) };
  for (let i = 0; i < Number(warmup) + Number(iters); i++) await session.run(feeds);
  session.endProfiling();
})().catch((e) => { console.error(e); process.exit(1); });
"""


def export(name, path, size):
    import torch
    import torchvision
    m = getattr(torchvision.models, name)(weights=None).eval()
    kw = dict(input_names=["input"], output_names=["logits"], opset_version=17,
              dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    if hasattr(torch.onnx, "ONNXProgram"):  # torch >= 2.5 would pick the dynamo exporter
        kw["dynamo"] = False
    torch.onnx.export(m, torch.randn(1, 3, size, size), path, **kw)


def goinfer_layers(binary, model, threads, batch, iters, size):
    """goinfer's per-layer rows [(name, kind, algorithm, ms)] and its ms per forward."""
    with tempfile.TemporaryDirectory() as d:
        layers, rows = os.path.join(d, "layers.csv"), os.path.join(d, "rows.csv")
        cmd = [binary, "compute", "--engine", "cpu", "--checkpoint", model, "--threads", str(threads),
               "--batch_sizes", str(batch), "--image_sizes", str(size), "--compile", "true",
               "--iters", str(iters), "--warmup", "3", "--profile", "--profile_iters", str(iters),
               "--csv", rows, "--profile_csv", layers]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"goinfer failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
        with open(layers) as f:
            out = [(x["name"], x["kind"], x["algorithm"], float(x["ms"])) for x in csv.DictReader(f)]
        with open(rows) as f:
            fwd = float(next(csv.DictReader(f))["ms_per_forward"])
    return out, fwd


def ort_profile_file(model, threads, batch, iters, size, backend, d):
    """Runs onnxruntime with profiling on; returns the JSON file it wrote."""
    prefix = os.path.join(d, "ort")
    warmup = 3
    if backend == "python":
        import numpy as np
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.enable_profiling = True
        so.profile_file_prefix = prefix
        s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        x = np.random.rand(batch, 3, size, size).astype(np.float32)
        for _ in range(warmup + iters):
            s.run(None, {s.get_inputs()[0].name: x})
        return s.end_profiling()
    node = shutil.which("node") or sys.exit("--ort node: no node on PATH")
    r = subprocess.run([node, "-e", ORT_NODE_JS, model, str(threads), str(batch), str(iters), str(warmup), prefix, str(size)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"onnxruntime-node failed (is NODE_PATH set?):\n{r.stderr[-2000:]}")
    files = sorted(glob.glob(prefix + "*.json"), key=os.path.getmtime)
    if not files:
        sys.exit(f"onnxruntime-node wrote no profile under {d}")
    return files[-1]


def ort_nodes(path, iters):
    """onnxruntime's nodes {name: (op type, ms per run)} in first-run order
    and its ms per run, from the profile's last iters runs."""
    with open(path) as f:
        events = json.load(f)
    runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    timed = runs[-iters:]
    start = timed[0]["ts"] if timed else 0
    per, order = defaultdict(float), {}
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time") or e["ts"] < start:
            continue
        name = e["name"][: -len("_kernel_time")]
        order.setdefault(name, (len(order), e.get("args", {}).get("op_name", "?")))
        per[name] += e["dur"] / 1e3
    n = max(len(timed), 1)
    nodes = {k: (order[k][1], per[k] / n) for k in sorted(per, key=lambda k: order[k][0])}
    run_ms = sum(r["dur"] for r in timed) / 1e3 / n
    return nodes, run_ms


def by_kind(items):
    """[(kind, ms)] summed by kind, largest first, with counts."""
    tot, cnt = defaultdict(float), defaultdict(int)
    for k, ms in items:
        tot[k] += ms
        cnt[k] += 1
    return sorted(((k, cnt[k], tot[k]) for k in tot), key=lambda x: -x[2])


def group(name, depth):
    """The module a node name comes from: its first depth path components
    ("/features/features.4/block/block.1/..." -> "/features/features.4"),
    without onnxruntime's "_output_0_nchwc" suffix; a name without "/" is
    its own module."""
    for suffix in ("_nchwc", "_output_0"):
        name = name.removesuffix(suffix)
    if "/" not in name:
        return name
    parts = name.strip("/").split("/")
    return "/" + "/".join(parts[: min(depth, max(len(parts) - 1, 1))])


def report(model, threads, batch, g_layers, g_fwd, o_nodes, o_run, backend, depth):
    g_sum = sum(x[3] for x in g_layers)
    o_sum = sum(ms for _, ms in o_nodes.values())
    L = [f"## {os.path.basename(model)}: {threads} threads, batch {batch}", "",
         f"onnxruntime through {backend}; goinfer `compute --engine cpu --profile`. Step and node times are per forward.", "",
         "| | goinfer | onnxruntime |", "|---|---:|---:|",
         f"| forward, ms (goinfer: timed loop mean; onnxruntime: model_run mean while profiling) | {g_fwd:.3f} | {o_run:.3f} |",
         f"| sum of steps / nodes, ms | {g_sum:.3f} | {o_sum:.3f} |",
         f"| steps / nodes | {len(g_layers)} | {len(o_nodes)} |", ""]
    gk, ok = by_kind((x[1], x[3]) for x in g_layers), by_kind(o_nodes.values())
    L += ["| goinfer kind | steps | ms | share | onnxruntime op | nodes | ms | share |", "|---|---:|---:|---:|---|---:|---:|---:|"]
    for i in range(max(len(gk), len(ok))):
        a = f"| {gk[i][0]} | {gk[i][1]} | {gk[i][2]:.3f} | {100 * gk[i][2] / g_sum:.1f}% " if i < len(gk) else "| | | | "
        b = f"| {ok[i][0]} | {ok[i][1]} | {ok[i][2]:.3f} | {100 * ok[i][2] / o_sum:.1f}% |" if i < len(ok) else "| | | | |"
        L.append(a + b)
    # Both engines rename what they fuse (onnxruntime's NCHWc convolutions
    # take their output's name), so steps and nodes are matched by the
    # module they come from: the first `depth` components of the name.
    g_grp, o_grp, order = defaultdict(lambda: [0, 0.0]), defaultdict(lambda: [0, 0.0]), []
    for name, _, _, ms in g_layers:
        k = group(name.split("+")[0], depth)
        if k not in g_grp and k not in o_grp:
            order.append(k)
        g_grp[k][0] += 1
        g_grp[k][1] += ms
    last = ""
    for name, (_, ms) in o_nodes.items():
        k = group(name, depth)
        if "/" not in name and last:
            k = last  # a layout reorder onnxruntime inserted: the module before it
        last = k
        if k not in g_grp and k not in o_grp:
            order.append(k)
        o_grp[k][0] += 1
        o_grp[k][1] += ms
    L += ["", f"By module (names cut to {depth} path components; onnxruntime's inserted reorders count with the node before them):", "",
          "| module | goinfer steps | goinfer ms | onnxruntime nodes | onnxruntime ms | goinfer / onnxruntime |",
          "|---|---:|---:|---:|---:|---:|"]
    for k in order:
        gs, gm = g_grp.get(k, (0, 0.0))
        os_, om = o_grp.get(k, (0, 0.0))
        ratio = f"{gm / om:.2f}" if om > 0 and gm > 0 else ""
        L.append(f"| {k} | {gs} | {gm:.4f} | {os_} | {om:.4f} | {ratio} |")
    L += ["", "goinfer's steps:", "", "| # | ONNX nodes | kind | kernel | ms | share |", "|---:|---|---|---|---:|---:|"]
    for i, (name, kind, algo, ms) in enumerate(g_layers):
        L.append(f"| {i} | {name} | {kind} | {algo} | {ms:.4f} | {100 * ms / g_sum:.1f}% |")
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--goinfer", required=True, help="the goinfer binary")
    ap.add_argument("--model", required=True, help="an ONNX file or a torchvision architecture to export")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--iters", type=int, default=50, help="timed forwards of each engine")
    ap.add_argument("--size", type=int, default=224, help="image size")
    ap.add_argument("--ort", default="auto", choices=["auto", "python", "node"])
    ap.add_argument("--depth", type=int, default=2, help="path components of a node name that name its module in the by-module table")
    ap.add_argument("--out", help="also write the report to this file")
    a = ap.parse_args()
    backend = a.ort
    if backend == "auto":
        try:
            import onnxruntime  # noqa: F401
            backend = "python"
        except ImportError:
            backend = "node"
    with tempfile.TemporaryDirectory() as d:
        model = a.model
        if not model.endswith(".onnx"):
            model = os.path.join(d, a.model + ".onnx")
            export(a.model, model, a.size)
        g_layers, g_fwd = goinfer_layers(a.goinfer, model, a.threads, a.batch, a.iters, a.size)
        o_nodes, o_run = ort_nodes(ort_profile_file(model, a.threads, a.batch, a.iters, a.size, backend, d), a.iters)
    md = report(a.model, a.threads, a.batch, g_layers, g_fwd, o_nodes, o_run, backend, a.depth)
    print(md, end="")
    if a.out:
        with open(a.out, "w") as f:
            f.write(md)


if __name__ == "__main__":
    main()
