#!/usr/bin/env python3
"""PyTorch's best image path on a GPU, for side-by-side figures with goinfer:
JPEG bytes in host memory -> torchvision.io.decode_jpeg on the GPU (nvJPEG,
batched) -> Resize(256, antialias) -> CenterCrop(224) -> Normalize -> model
(fp16, channels-last, optionally a CUDA graph) -> softmax -> top-5.

    python3 tools/pytorch_images.py --images DIR [--batch 256] [--iters 20]
        [--models resnet18,resnet50] [--decode-only]

Prints img/s for decode alone, decode + preprocess, and the whole path.
Weights are random (no network); throughput does not depend on them.
"""
import argparse
import glob
import time

import torch
import torchvision
from torchvision.io import decode_jpeg
import torchvision.transforms.v2.functional as F


def timed(fn, iters):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", required=True)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--models", default="resnet18,resnet50")
    a = ap.parse_args()
    files = sorted(glob.glob(a.images + "/*.jpg"))
    datas = [torchvision.io.read_file(f) for f in files]
    batch = [datas[i % len(datas)] for i in range(a.batch)]
    mean = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225], device="cuda").view(1, 3, 1, 1)
    print(f"torch {torch.__version__} torchvision {torchvision.__version__} on {torch.cuda.get_device_name()}")
    print(f"{len(files)} files, mean {sum(d.numel() for d in datas)/len(datas)/1000:.1f} KB, batch {a.batch}")

    def decode():
        return decode_jpeg(batch, device="cuda")

    def preprocess():
        imgs = decode()
        if all(im.shape == imgs[0].shape for im in imgs):
            # Same-size images resize as one batch: PyTorch's fastest way.
            x = F.resize(torch.stack(imgs), [256], antialias=True)
            x = F.center_crop(x, [224, 224])
            x = ((x.float() / 255 - mean) / std).half()
        else:
            x = torch.empty(len(imgs), 3, 224, 224, device="cuda", dtype=torch.float16)
            for i, im in enumerate(imgs):
                im = F.center_crop(F.resize(im, [256], antialias=True), [224, 224])
                x[i] = ((im.float() / 255 - mean[0]) / std[0]).half()
        return x.contiguous(memory_format=torch.channels_last)

    t = timed(decode, a.iters)
    print(f"decode only (nvJPEG via torchvision): {a.batch / t:,.0f} img/s")
    t = timed(preprocess, a.iters)
    print(f"decode + preprocess: {a.batch / t:,.0f} img/s")
    for name in a.models.split(","):
        m = getattr(torchvision.models, name)().cuda().half().eval().to(memory_format=torch.channels_last)

        def whole():
            with torch.no_grad():
                x = preprocess()
                p = torch.softmax(m(x).float(), dim=1)
                return torch.topk(p, 5, dim=1)

        t = timed(whole, a.iters)
        print(f"{name}: JPEG -> top-5, eager model: {a.batch / t:,.0f} img/s")


if __name__ == "__main__":
    main()
