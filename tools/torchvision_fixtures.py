#!/usr/bin/python3
"""Generates testdata/torchvision: tiny torchvision classifiers (narrow
widths, small images, random weights and batch-norm statistics) saved as
.pth or .safetensors state dicts, with an input batch and the float64
logits PyTorch computes for it. internal/torchvision's TestFixtures builds
the same configurations in Go and compares.

Run with /usr/bin/python3 (torch 1.13, torchvision 0.14) from the
repository root:  /usr/bin/python3 tools/torchvision_fixtures.py
"""
import json
import os
import struct
import sys
from functools import partial

import numpy as np
import torch
import torchvision.models as M
from torchvision.models import convnext, densenet, efficientnet, mobilenetv2, mobilenetv3, regnet, resnet
from torchvision.models import shufflenetv2, squeezenet, vision_transformer

OUT = "testdata/torchvision"


def fixtures():
    """name -> (constructor, image size, file format). The Go test holds the
    same configurations under the same names."""
    f = {}
    f["mobilenet_v2"] = (lambda: mobilenetv2.MobileNetV2(num_classes=10, width_mult=0.25,
                                                         inverted_residual_setting=[[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 2, 2]]), 32, "pth")
    bneck = partial(mobilenetv3.InvertedResidualConfig, width_mult=1.0)
    v3 = [bneck(8, 3, 8, 8, True, "RE", 2, 1), bneck(8, 3, 24, 16, False, "RE", 2, 1),
          bneck(16, 5, 32, 16, True, "HS", 1, 1), bneck(16, 3, 48, 24, True, "HS", 1, 1)]
    f["mobilenet_v3"] = (lambda: mobilenetv3.MobileNetV3(v3, 32, num_classes=10), 32, "safetensors")
    f["vit"] = (lambda: vision_transformer.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                                             hidden_dim=32, mlp_dim=48, num_classes=10), 32, "safetensors")
    return f


def randomize(model, gen):
    """Random weights, and batch-norm statistics away from 0 and 1, so that
    every tensor of the state dict matters."""
    with torch.no_grad():
        for name, p in model.state_dict().items():
            if not p.is_floating_point():
                continue
            if name.endswith("running_var") or (p.dim() == 1 and name.endswith("weight")):
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            elif p.dim() <= 1:
                p.copy_((torch.rand(p.shape, generator=gen) - 0.5) * 0.2)
            else:
                fan_in = p[0].numel() if p.dim() > 1 else 1
                bound = (3.0 / max(fan_in, 1)) ** 0.5
                p.copy_((torch.rand(p.shape, generator=gen) * 2 - 1) * bound)


def save_safetensors(path, sd):
    dtypes = {torch.float32: "F32", torch.int64: "I64", torch.float16: "F16"}
    header, blobs, off = {}, [], 0
    for k, t in sd.items():
        b = t.contiguous().numpy().tobytes()
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


def main():
    torch.manual_seed(0)
    os.makedirs(OUT, exist_ok=True)
    manifest = {}
    for i, (name, (ctor, size, fmt)) in enumerate(sorted(fixtures().items())):
        gen = torch.Generator().manual_seed(1000 + i)
        model = ctor().eval()
        randomize(model, gen)
        sd = model.state_dict()
        path = f"{OUT}/{name}.{fmt}"
        if fmt == "pth":
            torch.save(sd, path)
        else:
            save_safetensors(path, sd)
        # float32-representable input, so float32 and float64 runs see the same values.
        x = (torch.rand((2, 3, size, size), generator=gen) * 4 - 2).float()
        with torch.no_grad():
            y = model.double()(x.double())
        np.save(f"{OUT}/{name}.input.npy", x.numpy())
        np.save(f"{OUT}/{name}.logits.npy", y.numpy())
        params = sum(p.numel() for p in model.parameters())
        manifest[name] = {"file": os.path.basename(path), "image_size": size, "params": params}
        print(f"{name}: {params} parameters, {os.path.getsize(path)} bytes", file=sys.stderr)
    with open(f"{OUT}/manifest.json", "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
