#!/usr/bin/env python3
"""How far nvJPEG's inverse DCT is from libjpeg's (PIL's decoder).

The imagegpu test TestNvJPEGDecodes, run with GOINFER_IDCT_DUMP=DIR, writes
the luma plane nvJPEG decodes of each JPEG as DIR/NAME.WxH.BACKEND.y. Luma
goes through no upsampling or colour conversion, so comparing it with the
luma libjpeg decodes (PIL's draft mode YCbCr: libjpeg's output before its
colour conversion) isolates the IDCT and its rounding.

    idct_diff.py --dump DIR --report FILE.md JPEGDIR...
"""
import argparse
import glob
import os

import numpy as np
from PIL import Image


def libjpeg_luma(path):
    im = Image.open(path)
    if im.mode == "L":
        return np.asarray(im)
    im.draft("YCbCr", im.size)
    if im.mode != "YCbCr":
        return None
    return np.asarray(im)[:, :, 0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("dirs", nargs="+")
    a = ap.parse_args()
    rows = []
    tot = {}
    for f in sorted(glob.glob(os.path.join(a.dump, "*.y"))):
        name, size, backend = os.path.basename(f)[:-2].rsplit(".", 2)
        w, h = map(int, size.split("x"))
        path = next((os.path.join(d, name) for d in a.dirs if os.path.exists(os.path.join(d, name))), None)
        if path is None:
            continue
        ref = libjpeg_luma(path)
        got = np.fromfile(f, np.uint8)
        if ref is None or got.size != w * h or ref.shape != (h, w):
            rows.append(f"| {name} | {backend} | n/a | n/a | n/a |")
            continue
        d = got.reshape(h, w).astype(int) - ref.astype(int)
        nz = np.count_nonzero(d)
        t = tot.setdefault(backend, [0, 0, 0])
        t[0] += nz
        t[1] += d.size
        t[2] = max(t[2], int(np.abs(d).max()))
        rows.append(f"| {name} | {backend} | {100 * nz / d.size:.2f}% | {int(np.abs(d).max())} | {d.mean():+.4f} |")
    import PIL
    out = ["# nvJPEG's luma vs libjpeg's (the IDCT alone)", "",
           f"PIL {PIL.__version__}; nvJPEG luma from `TestNvJPEGDecodes` (GOINFER_IDCT_DUMP); libjpeg luma from PIL's draft('YCbCr').", ""]
    for b, t in sorted(tot.items()):
        out.append(f"- **{b}**: {100 * t[0] / max(t[1], 1):.2f}% of {t[1]} luma samples differ, by at most {t[2]} level(s)")
    out += ["", "| image | backend | samples that differ | max abs diff | mean diff |", "|---|---|---|---|---|"] + rows
    with open(a.report, "w") as fh:
        fh.write("\n".join(out) + "\n")
    print("\n".join(out[:8]))


if __name__ == "__main__":
    main()
