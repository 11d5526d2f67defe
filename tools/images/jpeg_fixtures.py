#!/usr/bin/env python3
"""Writes the small JPEG fixtures of internal/jpeg's tests and what PIL
decodes from them.

usage: tools/images/jpeg_fixtures.py [--out testdata/jpeg]

Each fixture is a crop of a committed photo (odd sizes, so partial MCUs and
blocks occur) encoded by libjpeg-turbo's cjpeg (Debian's libjpeg-turbo-progs)
or PIL in one coding variant: baseline and progressive, 4:4:4 / 4:2:2 /
4:2:0 / 4:4:0 / 4:1:1, gray, restart intervals, CMYK and YCCK (also
subsampled), very low and very high quality. want.json maps each file (and the committed photos) to the
SHA-256 of PIL's Image.open(f).convert("RGB").tobytes(), the pixels
torchvision starts from, with the size and PIL's mode.
"""
import argparse
import hashlib
import io
import json
import os
import subprocess
import sys

import PIL
from PIL import Image

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

# name: (source crop (x, y, w, h), cjpeg arguments); None arguments = PIL.
CJPEG = {
    "base_420.jpg": ((200, 120, 61, 43), ["-quality", "90", "-sample", "2x2"]),
    "base_422.jpg": ((200, 120, 61, 43), ["-quality", "90", "-sample", "2x1"]),
    "base_444.jpg": ((200, 120, 61, 43), ["-quality", "90", "-sample", "1x1"]),
    "base_440.jpg": ((200, 120, 61, 43), ["-quality", "90", "-sample", "1x2"]),
    "base_411.jpg": ((200, 120, 61, 43), ["-quality", "90", "-sample", "4x1"]),
    "base_gray.jpg": ((100, 80, 45, 37), ["-quality", "90", "-grayscale"]),
    "base_q5.jpg": ((150, 150, 40, 33), ["-quality", "5", "-sample", "2x2"]),
    "base_q100.jpg": ((150, 150, 40, 33), ["-quality", "100", "-sample", "1x1"]),
    "base_optimized.jpg": ((10, 240, 50, 30), ["-quality", "85", "-optimize"]),
    "restart_rows.jpg": ((200, 120, 61, 43), ["-quality", "90", "-restart", "1"]),
    "restart_3blocks.jpg": ((200, 120, 61, 43), ["-quality", "90", "-sample", "1x1", "-restart", "3B"]),
    "prog_420.jpg": ((200, 120, 61, 43), ["-quality", "90", "-progressive"]),
    "prog_444.jpg": ((200, 120, 61, 43), ["-quality", "95", "-sample", "1x1", "-progressive"]),
    "prog_gray.jpg": ((100, 80, 45, 37), ["-quality", "90", "-grayscale", "-progressive"]),
    "prog_restart.jpg": ((200, 120, 61, 43), ["-quality", "90", "-progressive", "-restart", "2B"]),
}
SOURCE = "testdata/photos/chelsea_444.jpg"


def rgb_digest(path):
    with Image.open(path) as im:
        mode = im.mode
        rgb = im.convert("RGB")
    return {"width": rgb.width, "height": rgb.height, "mode": mode,
            "sha256": hashlib.sha256(rgb.tobytes()).hexdigest()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "testdata", "jpeg"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    src = Image.open(os.path.join(ROOT, SOURCE)).convert("RGB")
    for name, ((x, y, w, h), opts) in CJPEG.items():
        ppm = io.BytesIO()
        src.crop((x, y, x + w, y + h)).save(ppm, "PPM")
        out = subprocess.run(["cjpeg", *opts], input=ppm.getvalue(), capture_output=True, check=True).stdout
        with open(os.path.join(args.out, name), "wb") as f:
            f.write(out)
    crop = src.crop((60, 200, 113, 241))
    crop.convert("CMYK").save(os.path.join(args.out, "cmyk.jpg"), quality=90)
    crop.convert("CMYK").save(os.path.join(args.out, "cmyk_prog.jpg"), quality=90, progressive=True)
    # PIL's subsampling=2 makes the first component 2x2 and leaves the
    # others 1x1: a subsampled 4-component file.
    crop.convert("CMYK").save(os.path.join(args.out, "cmyk_420.jpg"), quality=90, subsampling=2)
    # No encoder here writes YCCK, so flip the Adobe transform flag of the
    # CMYK files from 0 to 2: libjpeg (and so PIL) then reads the same
    # planes as Y, Cb, Cr, K, which exercises the YCCK conversion all the same.
    for src_name, name in (("cmyk.jpg", "ycck.jpg"), ("cmyk_420.jpg", "ycck_420.jpg")):
        with open(os.path.join(args.out, src_name), "rb") as f:
            data = bytearray(f.read())
        i = data.index(b"Adobe")
        assert data[i + 11] == 0, "expected Adobe transform 0"
        data[i + 11] = 2
        with open(os.path.join(args.out, name), "wb") as f:
            f.write(data)
    want = {"versions": {"PIL": PIL.__version__}, "files": {}}
    files = sorted(os.listdir(args.out))
    for name in files:
        if name.endswith(".jpg"):
            want["files"]["testdata/jpeg/" + name] = rgb_digest(os.path.join(args.out, name))
    photos = os.path.join(ROOT, "testdata", "photos")
    for name in sorted(os.listdir(photos)):
        if name.endswith(".jpg"):
            want["files"]["testdata/photos/" + name] = rgb_digest(os.path.join(photos, name))
    with open(os.path.join(args.out, "want.json"), "w") as f:
        json.dump(want, f, indent=1)
        f.write("\n")
    print("wrote", len(want["files"]), "references to", args.out, file=sys.stderr)


if __name__ == "__main__":
    main()
