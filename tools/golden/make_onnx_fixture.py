#!/usr/bin/env python3
"""Writes testdata/golden/tiny_cnn.onnx, a tiny convolutional classifier with
random weights exported by PyTorch's TorchScript ONNX exporter (opset 13,
dynamic batch), with a fixed input and PyTorch's float64 logits for it:

    /usr/bin/python3 tools/golden/make_onnx_fixture.py --out testdata/golden

It needs torch (1.13 here) and onnx, both on the CPU. The model covers the
ops `goinfer model inspect` counts MACs for (Conv, grouped Conv, Gemm) and
a few around them (Relu, MaxPool, GlobalAveragePool, Flatten); batch norms
are folded into the convolutions by the exporter.
"""
import argparse
import os

import numpy as np
import onnx
import torch
import torch.nn as nn


class TinyCNN(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.dw = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.pool = nn.MaxPool2d(2)
        self.pw = nn.Sequential(nn.Conv2d(8, 16, 1), nn.ReLU())
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.pw(self.pool(self.dw(self.stem(x))))
        return self.fc(torch.flatten(self.gap(x), 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="testdata/golden")
    ap.add_argument("--seed", type=int, default=12)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    m = TinyCNN()
    # Non-trivial batch-norm statistics, so that folding them matters.
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
            mod.weight.data.uniform_(0.5, 1.5)
            mod.bias.data.uniform_(-0.2, 0.2)
    m.eval()
    x = torch.rand(2, 3, 16, 16) * 2 - 1
    path = os.path.join(args.out, "tiny_cnn.onnx")
    torch.onnx.export(m, x, path, input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=13, do_constant_folding=True)
    onnx.checker.check_model(onnx.load(path))
    with torch.no_grad():
        ref = m.double()(x.double())
    np.save(os.path.join(args.out, "tiny_cnn.input.npy"), x.numpy().astype(np.float32))
    np.save(os.path.join(args.out, "tiny_cnn.logits.npy"), ref.numpy())
    print(path, os.path.getsize(path), "bytes; logits", ref.shape)


if __name__ == "__main__":
    main()
