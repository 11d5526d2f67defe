#!/usr/bin/env python3
"""Preprocessing parity with torchvision (issue #14).

The reference is torchvision's ImageNet evaluation transform on PIL images,

    PIL.Image.open(f).convert("RGB") -> Resize(256) (bilinear, antialiased)
    -> CenterCrop(224) -> ToTensor() -> Normalize(ImageNet mean, std)

and the float64 logits of testdata/golden/resnet18_w8.pth (a ResNet-18 of
base width 8 and 10 classes with seeded random weights, written by
tools/golden/make_golden.py, which goinfer loads as any ResNet checkpoint).

Two modes:

  parity.py --out DIR FILE...
      writes DIR/parity_pixels.npy (uint8 [N, 224, 224, 3]: the resized,
      cropped pixels, from which ToTensor and Normalize give the float
      tensor exactly), DIR/parity_logits.npy (float64 [N, 10]) and
      DIR/parity.json (the files in order, library versions). With
      --out testdata/parity and testdata/photos/*, this is the fixture of
      internal/preprocess's TestTorchvisionParity and cmd/goinfer's
      TestPredictTorchvisionParity.

  parity.py --ref DIR --server URL [--report FILE] [--title TEXT]
      sends each file of DIR/parity.json to a goinfer server of the same
      checkpoint through its image input (KServe v2 JSON, base64), one
      image per request, asks for the raw logits, and compares them with
      DIR/parity_logits.npy: max|got-ref|/max|ref| and top-1 per image.
      Writes a Markdown report; exits 1 if any image misses --tol or top-1.

Run with Debian's /usr/bin/python3 here (torch 1.13, torchvision 0.14,
PIL with libjpeg-turbo) or the GPU machine's python3 (PyTorch 2.x).
"""
import argparse
import base64
import json
import os
import sys
import time
import urllib.error
import urllib.request

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CHECKPOINT = os.path.join(ROOT, "testdata", "golden", "resnet18_w8.pth")
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def model():
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tools", "golden"))
    from make_golden import Basic, Net
    net = Net(Basic, [2, 2, 2, 2], 8, 10)
    net.load_state_dict(torch.load(CHECKPOINT, map_location="cpu"))
    return net.double().eval()


def pixels(path):
    """torchvision's Resize(256) and CenterCrop(224) of the PIL image, HWC uint8."""
    import torchvision.transforms as T
    from PIL import Image
    with Image.open(path) as im:
        rgb = im.convert("RGB")
    return np.asarray(T.Compose([T.Resize(256), T.CenterCrop(224)])(rgb), dtype=np.uint8)


def tensor(px):
    """ToTensor and Normalize, in float32 as torchvision computes them."""
    import torch
    import torchvision.transforms as T
    x = T.ToTensor()(px)  # HWC uint8 -> CHW float32 / 255
    return T.Normalize(MEAN, STD)(x)


def full_transform(path, px):
    """torchvision's whole transform of the file, the model's input; warns
    if it is not Normalize(ToTensor(px)) (what the Go test assumes of the
    stored pixels)."""
    import torchvision.transforms as T
    from PIL import Image
    with Image.open(path) as im:
        full = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)])(im.convert("RGB"))
    if not np.array_equal(full.numpy(), tensor(px).numpy()):
        print(f"warning: {path}: Normalize(ToTensor(pixels)) differs from the composed transform", file=sys.stderr)
    return full


def versions():
    import PIL
    import torch
    import torchvision
    from PIL import features
    return {"torch": torch.__version__, "torchvision": torchvision.__version__, "PIL": PIL.__version__,
            "libjpeg_turbo": features.version("libjpeg_turbo") if features.check("libjpeg_turbo") else None}


def make(out, files):
    import torch
    os.makedirs(out, exist_ok=True)
    net = model()
    pxs, logits = [], []
    for f in files:
        px = pixels(f)
        x = full_transform(f, px)
        with torch.no_grad():
            y = net(x.double().unsqueeze(0))[0].numpy()
        pxs.append(px)
        logits.append(y)
        print(f"{os.path.basename(f)}: top-1 {int(np.argmax(y))}", file=sys.stderr)
    np.save(os.path.join(out, "parity_pixels.npy"), np.stack(pxs))
    np.save(os.path.join(out, "parity_logits.npy"), np.stack(logits))
    meta = {"files": [os.path.relpath(os.path.abspath(f), os.path.abspath(ROOT)) for f in files],
            "checkpoint": "testdata/golden/resnet18_w8.pth",
            "transform": "PIL convert(RGB), Resize(256) bilinear antialias, CenterCrop(224), ToTensor, Normalize(ImageNet)",
            "versions": versions()}
    with open(os.path.join(out, "parity.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
        fh.write("\n")


def infer(url, data, model_name):
    body = json.dumps({"inputs": [{"name": "image", "datatype": "BYTES", "shape": [1],
                                   "data": [base64.b64encode(data).decode()]}],
                       "outputs": [{"name": "logits"}]}).encode()
    req = urllib.request.Request(f"{url}/v2/models/{model_name}/infer", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        ans = json.load(r)
    out = [o for o in ans["outputs"] if o["name"] == "logits"][0]
    return np.asarray(out["data"], dtype=np.float64)


def wait_ready(url, seconds=600):
    """Waits for the server to answer ready (it may still be starting)."""
    deadline = time.time() + seconds
    while True:
        try:
            with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.time() > deadline:
            raise SystemExit(f"{url} was not ready within {seconds} s")
        time.sleep(0.5)


def compare(ref, url, name, report, title, tol, root, notes):
    with open(os.path.join(ref, "parity.json")) as fh:
        meta = json.load(fh)
    want = np.load(os.path.join(ref, "parity_logits.npy"))
    wait_ready(url)
    rows, worst, agree = [], 0.0, 0
    for i, f in enumerate(meta["files"]):
        path = f if os.path.isabs(f) else os.path.join(root, f)
        w = want[i]
        try:
            with open(path, "rb") as fh:
                got = infer(url, fh.read(), name)
        except urllib.error.HTTPError as e:
            # A refused image fails the check but not the report.
            msg = " ".join(e.read().decode(errors="replace")[:200].split()).replace("|", "\\|")
            rows.append((os.path.basename(f), float("nan"), f"error {e.code}: {msg}", int(np.argmax(w)), False, False))
            worst = float("inf")
            continue
        rel = float(np.max(np.abs(got - w)) / np.max(np.abs(w)))
        t1 = int(np.argmax(got)) == int(np.argmax(w))
        # The order of the five best, a finer check than top-1 alone
        # (informational: not part of the pass criterion).
        t5 = list(np.argsort(-got)[:5]) == list(np.argsort(-w)[:5])
        worst, agree = max(worst, rel), agree + t1
        rows.append((os.path.basename(f), rel, int(np.argmax(got)), int(np.argmax(w)), t1, t5))
    ok = worst <= tol and agree == len(rows)
    lines = [f"# {title}", "",
             f"goinfer server {url} (model {name}, testdata/golden/resnet18_w8.pth, fp32) against torchvision's "
             f"CPU transform ({meta['transform']}) and float64 PyTorch logits of the same checkpoint.", "",
             f"Reference libraries: {json.dumps(meta['versions'])}", ""] + [n + "\n" for n in notes] + [
             f"**{len(rows)} images: max rel. error {worst:.3g} (tolerance {tol:g}), top-1 identical on "
             f"{agree}/{len(rows)}: {'PASS' if ok else 'FAIL'}**; top-5 in the same order on "
             f"{sum(r[5] for r in rows)}/{len(rows)}", "",
             "| image | max\\|got-ref\\|/max\\|ref\\| | top-1 goinfer | top-1 torchvision | same | top-5 order same |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r[0]} | {r[1]:.3g} | {r[2]} | {r[3]} | {'yes' if r[4] else '**no**'} | {'yes' if r[5] else 'no'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if report:
        os.makedirs(os.path.dirname(os.path.abspath(report)), exist_ok=True)
        with open(report, "w") as fh:
            fh.write(text)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="write the references of FILEs into this directory")
    ap.add_argument("--ref", help="a directory written by --out, to check a server against")
    ap.add_argument("--server", help="goinfer server URL (http://host:port) serving resnet18_w8.pth with --images")
    ap.add_argument("--model", default="resnet18_w8", help="the served model's name (with --server)")
    ap.add_argument("--report", help="Markdown report file (with --server)")
    ap.add_argument("--note", action="append", default=[], help="a paragraph for the report (repeatable)")
    ap.add_argument("--title", default="Preprocessing parity with torchvision")
    ap.add_argument("--tol", type=float, default=1e-2, help="max|got-ref|/max|ref| allowed per image (with --server)")
    ap.add_argument("--root", default=ROOT, help="directory the relative file names of parity.json are under")
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    if a.out:
        if not a.files:
            ap.error("--out needs image FILEs")
        make(a.out, a.files)
        return 0
    if a.ref and a.server:
        return compare(a.ref, a.server.rstrip("/"), a.model, a.report, a.title, a.tol, a.root, a.note)
    ap.error("want --out DIR FILE..., or --ref DIR --server URL")


if __name__ == "__main__":
    sys.exit(main())
