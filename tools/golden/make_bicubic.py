#!/usr/bin/python3
"""Writes testdata/golden/image_png_bicubic_*.npy: what PIL's
Image.resize(size, BICUBIC) makes of testdata/golden/image.png (RGB,
uint8, [H, W, 3]), downscaled (antialiased) and upscaled, for imageproc's
bicubic resampling test. Run from the repository root with /usr/bin/python3
(Pillow 9)."""
import numpy as np
from PIL import Image

SRC = "testdata/golden/image.png"
OUT = "testdata/golden/image_png_bicubic_{}x{}.npy"


def main():
    img = Image.open(SRC).convert("RGB")
    # A downscale by an odd factor (the stretched filter) and an upscale of
    # a corner (negative lobes overshooting, clamped to 0..255).
    cases = [(img, (73, 55)), (img.crop((0, 0, 40, 30)), (97, 61))]
    for src, (w, h) in cases:
        out = np.asarray(src.resize((w, h), Image.BICUBIC), dtype=np.uint8)
        np.save(OUT.format(w, h), out)
        print(OUT.format(w, h), out.shape)


if __name__ == "__main__":
    main()
