#!/usr/bin/env python3
"""Writes the photographs goinfer's image tests use, from scikit-image's
sample data (real photographs, public domain or CC0), in the variants an
image service meets: baseline JPEG at quality 90, grayscale, progressive,
CMYK, 4:4:4 and PNG with alpha. Run with Debian's python3 (python3-skimage,
python3-pil):

    /usr/bin/python3 tools/images/make_photos.py testdata/photos

and, with --bench DIR --count N, N JPEGs of 500x375 at quality 90 cut from
the same photographs (the size of the image-throughput benchmarks). The
sample photographs are smoother than camera pictures (~42 KB at that size);
--grain 11 adds Gaussian sensor noise that brings them to ~77 KB, the size
of the photographs the issue's PyTorch figures were measured on.
"""
import argparse
import io
import os

import numpy as np
from PIL import Image

try:
    from skimage import data
except ImportError:  # e.g. the GPU machine: start from the committed fixtures
    data = None

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "testdata", "photos")


def photos():
    if data is None:
        names = {"astronaut": "astronaut.jpg", "coffee": "coffee.jpg",
                 "chelsea": "chelsea_444.jpg", "rocket": "rocket_progressive.jpg"}
        return {k: np.asarray(Image.open(os.path.join(FIXTURES, f)).convert("RGB"))
                for k, f in names.items()}
    return {
        "astronaut": data.astronaut(),
        "coffee": data.coffee(),
        "chelsea": data.chelsea(),
        "rocket": data.rocket(),
    }


def save(img, path, **kw):
    img.save(path, **kw)
    print(f"{path}: {os.path.getsize(path)} bytes, {img.size[0]}x{img.size[1]} {img.mode}")


def fixtures(out):
    os.makedirs(out, exist_ok=True)
    ph = photos()
    save(Image.fromarray(ph["astronaut"]), f"{out}/astronaut.jpg", quality=90)
    save(Image.fromarray(ph["coffee"]), f"{out}/coffee.jpg", quality=90)
    save(Image.fromarray(ph["chelsea"]), f"{out}/chelsea_444.jpg", quality=90, subsampling=0)
    save(Image.fromarray(data.camera()), f"{out}/camera_gray.jpg", quality=90)
    save(Image.fromarray(ph["rocket"]), f"{out}/rocket_progressive.jpg", quality=85, progressive=True)
    save(Image.fromarray(ph["chelsea"]).convert("CMYK"), f"{out}/chelsea_cmyk.jpg", quality=90)
    rgba = Image.fromarray(ph["coffee"]).resize((200, 133)).convert("RGBA")
    a = np.array(rgba)
    a[..., 3] = np.linspace(0, 255, a.shape[1], dtype=np.uint8)[None, :]
    save(Image.fromarray(a), f"{out}/coffee_alpha.png")


def bench(out, count, grain):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    srcs = list(photos().values())
    for i in range(count):
        src = srcs[i % len(srcs)]
        h, w = src.shape[:2]
        # A random 4:3 window, scaled to 500x375: each file differs.
        cw = int(min(w, h * 4 / 3) * rng.uniform(0.7, 1.0))
        ch = cw * 3 // 4
        x, y = rng.integers(0, w - cw + 1), rng.integers(0, h - ch + 1)
        img = Image.fromarray(src[y:y + ch, x:x + cw]).resize((500, 375), Image.BICUBIC)
        if grain > 0:
            px = np.asarray(img).astype(np.float32) + rng.normal(0, grain, (375, 500, 3))
            img = Image.fromarray(np.clip(px, 0, 255).astype(np.uint8))
        img.save(f"{out}/img{i:04d}.jpg", quality=90)
    sizes = [os.path.getsize(f"{out}/img{i:04d}.jpg") for i in range(count)]
    print(f"{count} JPEGs 500x375 q90 in {out}: mean {np.mean(sizes)/1000:.1f} KB")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--bench", action="store_true", help="write benchmark JPEGs instead of the fixtures")
    ap.add_argument("--count", type=int, default=64)
    ap.add_argument("--grain", type=float, default=0, help="sensor-noise sigma in 8-bit levels (bench only)")
    a = ap.parse_args()
    bench(a.out, a.count, a.grain) if a.bench else fixtures(a.out)
