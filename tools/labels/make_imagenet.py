#!/usr/bin/python3
"""Writes internal/labels/imagenet.txt: ImageNet-1k's class names, one per
line in class-index order, as torchvision's pretrained classifiers name them.

Run from the repository root with the Python that has torchvision:
    /usr/bin/python3 tools/labels/make_imagenet.py
"""
import sys

import torchvision

names = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.meta["categories"]
if len(names) != 1000 or any("\n" in n or not n.strip() for n in names):
    sys.exit("unexpected category list from torchvision")
with open("internal/labels/imagenet.txt", "w", encoding="utf-8") as f:
    for n in names:
        f.write(n + "\n")
print(f"wrote {len(names)} names (torchvision {torchvision.__version__})")
