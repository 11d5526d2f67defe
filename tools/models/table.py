#!/usr/bin/env python3
"""Side-by-side table of goinfer and PyTorch on torchvision models, from the
raw files tools/gpu_models.sh writes into one directory:

  goinfer-<model>-b<batch>.csv     `goinfer compute --csv` (one row)
  goinfer-<model>-b<batch>.log     its stderr, for a failed cell's error
  goinfer-<model>-b<batch>.status  its exit status (124: stopped by timeout)
  pytorch.csv                      `tools/pytorch_compute.py --models ... --csv`

Every figure is the median per-forward device time of the timed forwards
(img/s = batch / median). The goals and the PyTorch figures of 2026-11-24
are issue 13's. Usage:

    python3 tools/models/table.py --raw DIR --models resnet50,... --batches 256,1 \\
        --title "..." --output results/models/models-h200-2026-11-27.md
"""
import argparse
import csv
import os
import re
import sys

# Issue 13's targets: best PyTorch 2.11 at batch 256 (img/s) and its CUDA
# graph at batch 1 (ms), both measured on an H200 on 2026-11-24, and the goals.
ISSUE = {
    "resnet50": (17105, 40000, 0.90, 0.60),
    "mobilenet_v3_large": (62218, 80000, 0.69, 0.35),
    "efficientnet_b0": (34137, 45000, 0.94, 0.50),
    "regnet_y_800mf": (27016, 35000, 0.88, 0.50),
    "convnext_tiny": (18008, 23000, 0.72, 0.50),
    "vit_b_16": (10627, 13500, 0.66, 0.50),
    "densenet121": (10263, 13000, 1.75, 1.00),
}
MODES = (("eager", "eager"), ("cudagraph", "CUDA graph"), ("compile", "compile"))


def read_pytorch(path):
    """(model, batch, mode) -> row of tools/pytorch_compute.py's CSV."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for r in csv.DictReader(f):
            out[(r["model"], int(r["batch"]), r["mode"])] = r
    return out


def read_goinfer(raw, model, batch):
    """The goinfer cell: (median ms, compile s, error, device)."""
    stem = os.path.join(raw, "goinfer-%s-b%d" % (model, batch))
    status = ""
    if os.path.exists(stem + ".status"):
        status = open(stem + ".status").read().strip()
    if os.path.exists(stem + ".csv"):
        with open(stem + ".csv") as f:
            for r in csv.DictReader(f):
                if int(r["batch"]) == batch:
                    return float(r["p50_ms"]), float(r["compile_s"]), "", r["device"]
    if status in ("124", "137"):
        return None, None, "stopped by its time limit", ""
    err = "no result"
    if os.path.exists(stem + ".log"):
        lines = [l.strip() for l in open(stem + ".log", errors="replace") if l.strip()]
        # A failed cell's line ("compute: cuda fp16 compile=true 224x224
        # batch 256: ERROR"), else the command's last word ("goinfer compute: ERROR").
        cells = [l for l in lines if re.match(r"compute: \S+ \S+ compile=", l)]
        if cells:
            err = cells[-1].split(": ", 2)[-1]
        elif lines:
            err = lines[-1]
    if status and status != "0" and not err.startswith("skipped"):
        err = "exit status %s: %s" % (status, err)
    return None, None, err, ""


def cell_text(s):
    return s.replace("|", "\\|").replace("\n", " ")[:100]


def ratio_note(have, goal, higher_better):
    if have is None:
        return "-"
    if (have >= goal) if higher_better else (have <= goal):
        return "met"
    if higher_better:
        return "missed: %.0f%% short" % (100 * (goal - have) / goal)
    return "missed: %.0f%% over" % (100 * (have - goal) / goal)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--raw", required=True, help="directory of the raw files")
    ap.add_argument("--models", required=True)
    ap.add_argument("--batches", default="256,1", help="the throughput batch, then the latency batch")
    ap.add_argument("--image", type=int, default=224, help="image size measured (the issue's figures are for 224)")
    ap.add_argument("--title", default="goinfer against PyTorch on torchvision models")
    ap.add_argument("--preamble", default="", help="file whose text goes under the title (commands, device)")
    ap.add_argument("--output", default="", help="markdown file (default: stdout only)")
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m]
    big, small = (int(b) for b in args.batches.split(","))
    pt = read_pytorch(os.path.join(args.raw, "pytorch.csv"))

    lines = ["# %s" % args.title, ""]
    if args.preamble and os.path.exists(args.preamble):
        lines += [open(args.preamble).read().rstrip(), ""]
    lines += ["Median device time per forward over the timed forwards (img/s = batch / median); "
              "PyTorch best = the fastest of its modes measured here; ratio > 1: goinfer is faster. "
              "Goals and the issue's PyTorch column: issue 13 (PyTorch 2.11, H200, 2026-11-24). "
              "A cell that did not run says why.", ""]

    def table(batch, throughput):
        unit = "img/s" if throughput else "ms"
        lines.append("## Batch %d (%s, %s is better)\n" % (batch, unit, "higher" if throughput else "lower"))
        lines.append("| model | PyTorch eager | PyTorch CUDA graph | PyTorch compile | best PyTorch | goinfer | goinfer / best PyTorch "
                     "| issue's PyTorch | goal | vs goal |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for m in models:
            row = "| %s |" % m
            best, best_mode = None, ""
            for mode, _ in MODES:
                r = pt.get((m, batch, mode))
                if r is None:
                    row += " - |"
                elif r["error"]:
                    row += " %s |" % cell_text(r["error"])
                else:
                    ms = float(r["ms_median"])
                    v = batch * 1000.0 / ms if throughput else ms
                    row += " %.0f |" % v if throughput else " %.3f |" % v
                    if best is None or (v > best if throughput else v < best):
                        best, best_mode = v, mode
            row += (" %s (%s) |" % (("%.0f" % best) if throughput else ("%.3f" % best), best_mode)) if best is not None else " - |"
            ms, _, err, _ = read_goinfer(args.raw, m, batch)
            g = None
            if ms is None:
                row += " %s |" % cell_text(err)
            else:
                g = batch * 1000.0 / ms if throughput else ms
                row += " %.0f |" % g if throughput else " %.3f |" % g
            if g is not None and best is not None:
                row += " %.2fx |" % ((g / best) if throughput else (best / g))
            else:
                row += " - |"
            # The issue's figures are for 224x224 images at batch 256 and 1.
            ref = ISSUE.get(m) if args.image == 224 and batch == (256 if throughput else 1) else None
            if ref is None:
                row += " - | - | - |"
            else:
                pref, goal = (ref[0], ref[1]) if throughput else (ref[2], ref[3])
                fmt = "%.0f" if throughput else "%.2f"
                row += " %s | %s %s | %s |" % (fmt % pref, ">=" if throughput else "<=", fmt % goal, ratio_note(g, goal, throughput))
            lines.append(row)
        lines.append("")

    table(big, True)
    table(small, False)

    lines.append("## Compile time, batch %d (s)\n" % big)
    lines.append("The issue's bound: under 5 s per model and batch size for goinfer. PyTorch's: torch.compile's first three calls "
                 "(compile, warm-up, CUDA graph recording); CUDA graph: warm-up and capture.\n")
    lines.append("| model | goinfer compile | torch.compile | PyTorch CUDA graph capture |")
    lines.append("|---|---:|---:|---:|")
    for m in models:
        _, cs, err, _ = read_goinfer(args.raw, m, big)
        row = "| %s | %s |" % (m, "%.2f" % cs if cs is not None else cell_text(err))
        for mode in ("compile", "cudagraph"):
            r = pt.get((m, big, mode))
            row += " %s |" % ("-" if r is None else cell_text(r["error"]) if r["error"] else r["compile_s"])
        lines.append(row)
    lines.append("")
    profiles = [m for m in models if os.path.exists(os.path.join(args.raw, "goinfer-%s-b%d.md" % (m, big)))]
    if profiles:
        lines.append("goinfer's own reports (per-layer profiles where measured): " + ", ".join(
            "[%s](%s/goinfer-%s-b%d.md)" % (m, os.path.basename(os.path.normpath(args.raw)), m, big) for m in profiles) + ".")
        lines.append("")
    md = "\n".join(lines)
    print(md)
    if args.output:
        with open(args.output, "w") as f:
            f.write(md)


if __name__ == "__main__":
    sys.exit(main())
