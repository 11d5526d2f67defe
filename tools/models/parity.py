#!/usr/bin/env python3
"""Correctness of goinfer against PyTorch float64 on torchvision models
(issue 13's check): for each model, seeded random weights saved as a
PyTorch state dict (.pth, or .safetensors with --format: `goinfer predict
--arch NAME --checkpoint FILE` reads both), float32 inputs of batch 1 and of an odd batch (.npy, NCHW), and
the logits PyTorch computes in float64 from those same float32 weights and
inputs; then `goinfer predict` for every engine, precision and mode (eager
--compile=false, compiled --compile) and batch, each compared with the
reference:

    rel = max|got - ref| / max|ref|      (over all images and classes)
    top-1: images whose argmax agrees with the reference's

A run passes when rel <= the precision's tolerance (fp32 1e-4, tf32 5e-3,
fp16 and bf16 2e-2) and, in fp32, every top-1 agrees. The table and every
failure's goinfer output go to stdout and to --log (by default
results/models/parity-<engines>-<device>-<date>.log); the exit status is 1 when
any run fails, errs or is skipped.

The weights are torchvision's own initialization (weights=None after
torch.manual_seed(--seed)), made to exercise every tensor: tensors that
initialization leaves constant (norm scales and shifts, ViT's zero head and
class token, ConvNeXt's 1e-6 layer scales) are drawn at random, and the
batch-norm running statistics are those of random inputs (as a trained
network's are of its data), so that activations keep a trained network's
scale instead of vanishing or growing through the depth, and the logits
differ from class to class.

On the GPU machine, from the repository root, with .bin/goinfer built:

    python3 tools/models/parity.py --engines cuda --precisions fp32,tf32,fp16,bf16 --jobs 4

Locally, on the CPU engine (smaller images, fewer models):

    CGO_ENABLED=0 go build -o .bin/goinfer ./cmd/goinfer
    /usr/bin/python3 tools/models/parity.py --engines cpu --precisions fp32 \\
        --models resnet18,mobilenet_v3_large,efficientnet_b0 --image_size 96 --jobs 1
"""
import argparse
import concurrent.futures
import datetime
import copy
import json
import os
import shlex
import socket
import struct
import subprocess
import sys
import time

import numpy as np
import torch
import torchvision

DEFAULT_MODELS = "resnet50,mobilenet_v3_large,efficientnet_b0,regnet_y_800mf,convnext_tiny,vit_b_16,densenet121"
TOLERANCE = {"fp32": 1e-4, "tf32": 5e-3, "fp16": 2e-2, "bf16": 2e-2}
NORMS = (torch.nn.modules.batchnorm._BatchNorm,)


def randomize_constants(net, gen):
    """Draws every floating tensor that initialization left constant (all
    elements equal) at random, but for the batch-norm statistics, which
    calibrate sets."""
    with torch.no_grad():
        for name, p in net.state_dict().items():
            if not p.is_floating_point() or p.numel() == 0 or name.endswith(("running_mean", "running_var")):
                continue
            if p.numel() > 1 and p.max() != p.min():
                continue
            if "layer_scale" in name or (p.dim() == 1 and name.endswith("weight")):
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            elif p.dim() <= 1:
                p.copy_((torch.rand(p.shape, generator=gen) - 0.5) * 0.2)
            else:
                bound = (3.0 / p[0].numel()) ** 0.5
                p.copy_((torch.rand(p.shape, generator=gen) * 2 - 1) * bound)


def calibrate(net, size, gen, batches, batch, device):
    """Sets the batch-norm running statistics to the mean and variance of
    random inputs, with the rest of the network in eval mode (no dropout,
    no stochastic depth)."""
    net.eval()
    bns = [m for m in net.modules() if isinstance(m, NORMS)]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the calibration batches
        m.train()
    with torch.no_grad():
        for _ in range(batches):
            net(torch.randn(batch, 3, size, size, generator=gen).to(device))
    net.eval()


def save_safetensors(path, sd):
    """Writes a state dict as safetensors (the format's header and raw
    little-endian tensors; no package needed)."""
    dtypes = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64", torch.int64: "I64"}
    header, blobs, off = {}, [], 0
    for k, t in sd.items():
        t = t.detach().cpu().contiguous()
        b = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[k] = {"dtype": dtypes[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def prepare(name, args, work):
    """Writes NAME.pth (or NAME.safetensors), NAME.b{B}.input.npy and NAME.b{B}.ref.npy (float64)
    and returns the references by batch size, and on a GPU PyTorch's own
    fp16/bf16 error against them (rel, worst over the batches) by dtype."""
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    net = torchvision.models.get_model(name, weights=None)
    randomize_constants(net, gen)
    dev = args.ref_device
    net = net.to(dev)
    calibrate(net, args.image_size, gen, args.calib_batches, args.calib_batch, dev)
    net = net.cpu()
    if args.format == "pth":
        torch.save(net.state_dict(), checkpoint_path(name, args, work))
    else:
        save_safetensors(checkpoint_path(name, args, work), net.state_dict())
    # PyTorch's own low-precision error on the same inputs, on a GPU: what
    # the tolerance is measured against when a model is hard in fp16/bf16.
    lowp = {}
    if dev == "cuda":
        for dt in (torch.float16, torch.bfloat16):
            lowp[dt] = copy.deepcopy(net).to(dev, dt).to(memory_format=torch.channels_last).eval()
    net64 = net.double().to(dev)
    refs, own = {}, {}
    for b in args.batch_list:
        x = torch.randn(b, 3, args.image_size, args.image_size, generator=gen)
        np.save(os.path.join(work, "%s.b%d.input.npy" % (name, b)), x.numpy())
        with torch.no_grad():
            ref = net64(x.double().to(dev)).cpu().numpy()
            for dt, m in lowp.items():
                got = m(x.to(dev, dt).contiguous(memory_format=torch.channels_last)).double().cpu().numpy()
                rel = np.abs(got - ref).max() / np.abs(ref).max()
                own[str(dt).replace("torch.", "")] = max(own.get(str(dt).replace("torch.", ""), 0.0), float(rel))
        np.save(os.path.join(work, "%s.b%d.ref.npy" % (name, b)), ref)
        refs[b] = ref
    del net, net64, lowp
    if dev == "cuda":
        torch.cuda.empty_cache()
    return refs, own


def checkpoint_path(name, args, work):
    return os.path.join(work, "%s.%s" % (name, args.format))


def compare(got, ref, precision):
    """rel, top-1 agreements, and whether the run passes."""
    if got.shape != ref.shape:
        return float("nan"), 0, False, "shape %s, want %s" % (got.shape, ref.shape)
    scale = np.abs(ref).max()
    rel = float(np.abs(got.astype(np.float64) - ref).max() / scale) if scale > 0 else float("inf")
    agree = int((got.argmax(axis=1) == ref.argmax(axis=1)).sum())
    ok = rel <= TOLERANCE[precision] and (precision != "fp32" or agree == ref.shape[0])
    return rel, agree, ok, ""


def top1_margin(ref):
    """The smallest gap between the best and second-best logit of an image,
    relative to max|ref|: how far from a tie the reference's top-1 is."""
    s = np.sort(ref, axis=1)
    return float((s[:, -1] - s[:, -2]).min() / np.abs(ref).max())


def run_one(job, args, work, deadline):
    name, engine, precision, compiled, b = job
    mode = "compiled" if compiled else "eager"
    stem = "%s.b%d" % (name, b)
    out = os.path.join(work, "%s.%s.%s.%s.got.npy" % (stem, engine, precision, mode))
    if os.path.exists(out):
        os.remove(out)
    left = deadline - time.time() if deadline else args.call_timeout
    if left <= 0:
        return job, None, "skipped: --budget spent", 0.0
    cmd = [args.goinfer, "predict", "--arch", name, "--checkpoint", checkpoint_path(name, args, work),
           "--engine", engine, "--precision", precision, "--compile=%s" % ("true" if compiled else "false"),
           "--input", os.path.join(work, stem + ".input.npy"), "--output", out, "--topk", "0", "--batch_size", str(b)]
    if args.graph_experiments:
        cmd += ["--graph_experiments", args.graph_experiments]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=min(args.call_timeout, left))
    except subprocess.TimeoutExpired:
        return job, None, "timed out after %.0f s: %s" % (min(args.call_timeout, left), shlex.join(cmd)), time.time() - t0
    took = time.time() - t0
    if p.returncode != 0:
        tail = "\n".join((p.stderr + p.stdout).strip().splitlines()[-8:])
        return job, None, "exit status %d: %s\n%s" % (p.returncode, shlex.join(cmd), tail), took
    return job, np.load(out), "", took


def device_name(args):
    if "cuda" in args.engine_list and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return socket.gethostname()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=DEFAULT_MODELS, help="torchvision model names")
    ap.add_argument("--engines", default="cuda", help="goinfer engines: cuda, cpu")
    ap.add_argument("--precisions", default="fp32,tf32,fp16,bf16")
    ap.add_argument("--modes", default="eager,compiled", help="eager (--compile=false), compiled (--compile)")
    ap.add_argument("--batches", default="1,3", help="batch sizes: 1 and an odd one")
    ap.add_argument("--image_size", type=int, default=224)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--calib_batches", type=int, default=2, help="random batches that set the batch-norm statistics")
    ap.add_argument("--calib_batch", type=int, default=8)
    ap.add_argument("--format", default="pth", choices=["pth", "safetensors"], help="how the state dict is saved")
    ap.add_argument("--goinfer", default=".bin/goinfer")
    ap.add_argument("--graph_experiments", default="", help="passed to goinfer predict --graph_experiments (cuda engine: fusions to turn off, e.g. noidentity)")
    ap.add_argument("--work_dir", default="/tmp/goinfer-parity", help="state dicts, inputs, references and outputs")
    ap.add_argument("--log", default="", help="log file (default results/models/parity-<engines>-<device>-<date>.log)")
    ap.add_argument("--jobs", type=int, default=4, help="goinfer processes at a time")
    ap.add_argument("--call_timeout", type=float, default=300, help="seconds one goinfer predict may take")
    ap.add_argument("--budget", type=float, default=0, help="seconds for the goinfer runs (0: no limit); later runs are skipped")
    ap.add_argument("--ref_device", default="cuda" if torch.cuda.is_available() else "cpu",
                    help="where PyTorch calibrates and computes the float64 reference")
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m]
    args.engine_list = [e for e in args.engines.split(",") if e]
    precisions = [p for p in args.precisions.split(",") if p]
    for p in precisions:
        if p not in TOLERANCE:
            sys.exit("--precisions: unknown %s (want %s)" % (p, ",".join(TOLERANCE)))
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in ("eager", "compiled"):
            sys.exit("--modes: unknown %s (want eager, compiled)" % m)
    args.batch_list = [int(b) for b in args.batches.split(",") if b]
    if not os.access(args.goinfer, os.X_OK):
        sys.exit("%s: not an executable; build it: CGO_ENABLED=0 go build -o .bin/goinfer ./cmd/goinfer" % args.goinfer)
    os.makedirs(args.work_dir, exist_ok=True)
    dev = device_name(args)
    date = datetime.datetime.now(datetime.timezone.utc)
    if not args.log:
        slug = "".join(c if c.isalnum() else "-" for c in dev.lower().replace("nvidia ", "")).strip("-")
        args.log = "results/models/parity-%s-%s-%s.log" % ("-".join(args.engine_list), slug, date.strftime("%Y-%m-%d"))
    os.makedirs(os.path.dirname(args.log) or ".", exist_ok=True)
    log = open(args.log, "w")

    def say(s=""):
        print(s, flush=True)
        log.write(s + "\n")
        log.flush()

    say("# goinfer parity against PyTorch float64: %s" % dev)
    say()
    say("- date: %s" % date.strftime("%Y-%m-%d %H:%M UTC"))
    say("- command: `%s`" % shlex.join(sys.argv))
    say("- PyTorch %s, torchvision %s; reference in float64 on %s; image %dx%d; seed %d; weights saved as .%s" % (
        torch.__version__, torchvision.__version__, args.ref_device, args.image_size, args.image_size, args.seed, args.format))
    say("- rel = max|got-ref|/max|ref|; tolerances %s; fp32 also needs every top-1 to agree" %
        ", ".join("%s %g" % kv for kv in TOLERANCE.items()))
    say()

    refs, margins = {}, {}
    for name in models:
        t0 = time.time()
        try:
            refs[name], own = prepare(name, args, args.work_dir)
        except Exception as e:
            say("%s: cannot build the reference: %s: %s" % (name, type(e).__name__, e))
            continue
        margins[name] = min(top1_margin(r) for r in refs[name].values())
        say("%s: state dict, inputs and float64 logits in %.1f s (max|ref| %.3g; smallest top-1 margin %.2g of it)" % (
            name, time.time() - t0, max(np.abs(r).max() for r in refs[name].values()), margins[name]))
        if own:
            say("%s: PyTorch's own error (rel, channels-last on %s): %s" % (
                name, dev, ", ".join("%s %.2e" % kv for kv in sorted(own.items()))))
    say()

    jobs = [(n, e, p, m == "compiled", b) for n in models if n in refs for e in args.engine_list for p in precisions
            for m in modes for b in args.batch_list]
    deadline = time.time() + args.budget if args.budget > 0 else 0
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        futs = [pool.submit(run_one, j, args, args.work_dir, deadline) for j in jobs]
        for f in concurrent.futures.as_completed(futs):
            job, got, err, took = f.result()
            results[job] = (got, err, took)
            print("  %s %s %s %s batch %d: %s (%.1f s)" % (job[0], job[1], job[2], "compiled" if job[3] else "eager", job[4],
                                                           "error" if err else "done", took), file=sys.stderr, flush=True)

    say("| model | engine | precision | mode | batch | rel | tolerance | top-1 | goinfer s | result |")
    say("|---|---|---|---|---:|---:|---:|---:|---:|---|")
    failures = []
    for name in models:
        if name not in refs:
            failures.append("%s: no reference" % name)
            continue
        for job in (j for j in jobs if j[0] == name):
            _, engine, precision, compiled, b = job
            got, err, took = results[job]
            mode = "compiled" if compiled else "eager"
            if err:
                verdict = "SKIP" if err.startswith("skipped") else "ERROR"
                say("| %s | %s | %s | %s | %d | | %g | | %.1f | %s |" % (name, engine, precision, mode, b, TOLERANCE[precision], took, verdict))
                failures.append("%s %s %s %s batch %d: %s" % (name, engine, precision, mode, b, err))
                continue
            rel, agree, ok, why = compare(got, refs[name][b], precision)
            say("| %s | %s | %s | %s | %d | %.2e | %g | %d/%d | %.1f | %s |" % (
                name, engine, precision, mode, b, rel, TOLERANCE[precision], agree, b, took, "pass" if ok else "FAIL"))
            if not ok:
                failures.append("%s %s %s %s batch %d: rel %.3g (tolerance %g), top-1 %d/%d%s" % (
                    name, engine, precision, mode, b, rel, TOLERANCE[precision], agree, b, "; " + why if why else ""))
    say()
    if failures:
        say("## %d of %d runs failed\n" % (len(failures), len(jobs)))
        for f in failures:
            say("- " + f.replace("\n", "\n    "))
    else:
        say("all %d runs pass" % len(jobs))
    say("\nlog: %s" % args.log)
    log.close()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
