#!/usr/bin/env python3
"""Writes small224.onnx: a model that takes [N, 3, 224, 224] FP32 images and
reads every pixel (a 4x4 stride-4 convolution to 8 channels, ReLU, global
average pool, linear to 1000 logits) but computes little, so that serving
it on the cpu engine shows the server's own time per request with the
issue's 602 KB input (tools/lat_ab.sh SERVE_FLAGS="--engine cpu" dry runs).
Seeded: the same file every time.

Usage: lat_small_model.py [OUT]   (default small224.onnx)
"""
import sys

import torch
import torch.nn as nn


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 4, stride=4)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 1000)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.stem(x))), 1))


torch.manual_seed(0)
out = sys.argv[1] if len(sys.argv) > 1 else "small224.onnx"
torch.onnx.export(Small().eval(), torch.randn(1, 3, 224, 224), out, input_names=["input"], output_names=["logits"],
                  dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, opset_version=13)
print("wrote", out)
