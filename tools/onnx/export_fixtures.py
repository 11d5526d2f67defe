#!/usr/bin/env python3
"""Exports small torchvision classifiers to ONNX with random weights, with
PyTorch's float64 logits for one input, to check goinfer's ONNX import
against: the same architectures users deploy (MobileNet, EfficientNet,
RegNet, ConvNeXt, ViT, DenseNet, ShuffleNet, SqueezeNet; the ResNets have
their own fixtures), narrowed
so that a model is a few hundred KB and runs in a test.

    python3 tools/onnx/export_fixtures.py OUT [--exporter torchscript|dynamo|both]

writes OUT/<exporter>/<name>.onnx, <name>.input.npy (float32 [2,3,S,S]) and
<name>.logits.npy (float64 [2,classes], the model run in float64). --static
exports with the batch fixed at 1 (torch.onnx.export's default without
dynamic axes); the input and logits still hold two images. The
torch.export-based exporter (dynamo) needs torch >= 2.5 and onnxscript; the
TorchScript one runs with Debian's torch 1.13 too.
"""
import argparse
import os
import sys

import numpy as np
import torch
import torchvision
from torchvision.models import (convnext, densenet, efficientnet, mobilenetv2, mobilenetv3, regnet,
                                shufflenetv2, squeezenet, vision_transformer)

CLASSES = 10


def models():
    """name -> (constructor, image size)."""
    def mnv3(arch):
        cfg, last = mobilenetv3._mobilenet_v3_conf(arch, width_mult=0.25)
        return lambda: mobilenetv3.MobileNetV3(cfg, last, num_classes=CLASSES)

    def effnet(arch, width, depth):
        def make():
            cfg, last = efficientnet._efficientnet_conf(arch, width_mult=width, depth_mult=depth)
            return efficientnet.EfficientNet(cfg, 0.2, num_classes=CLASSES, last_channel=last)
        return make

    def regnet_y():
        p = regnet.BlockParams.from_init_params(depth=4, w_0=8, w_a=8.0, w_m=2.0, group_width=8, se_ratio=0.25)
        return regnet.RegNet(p, num_classes=CLASSES)

    def regnet_x():
        p = regnet.BlockParams.from_init_params(depth=4, w_0=8, w_a=8.0, w_m=2.0, group_width=8)
        return regnet.RegNet(p, num_classes=CLASSES)

    def convnext_t():
        C = convnext.CNBlockConfig
        return convnext.ConvNeXt([C(8, 16, 1), C(16, 32, 1), C(32, None, 1)], num_classes=CLASSES, layer_scale=0.5)

    return {
        "mobilenet_v2": (lambda: mobilenetv2.MobileNetV2(num_classes=CLASSES, width_mult=0.25), 48),
        "mobilenet_v3_small": (mnv3("mobilenet_v3_small"), 48),
        "mobilenet_v3_large": (mnv3("mobilenet_v3_large"), 48),
        "efficientnet_b0": (effnet("efficientnet_b0", 0.25, 0.25), 48),
        "regnet_y": (regnet_y, 48),
        "regnet_x": (regnet_x, 48),
        "convnext": (convnext_t, 48),
        "vit": (lambda: vision_transformer.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                                             hidden_dim=16, mlp_dim=32, num_classes=CLASSES), 32),
        "densenet": (lambda: densenet.DenseNet(growth_rate=4, block_config=(2, 2, 2, 2), num_init_features=8,
                                               num_classes=CLASSES), 48),
        "shufflenet_v2": (lambda: shufflenetv2.ShuffleNetV2([2, 2, 2], [8, 16, 32, 64, 128], num_classes=CLASSES), 48),
        "squeezenet1_1": (lambda: squeezenet.SqueezeNet("1_1", num_classes=CLASSES), 48),
    }


def randomize(m, seed):
    """Random weights and batch-norm statistics, so that no layer is an
    identity that would hide a wrong import."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (1.0 / max(1, p[0].numel()) ** 0.5 if p.dim() > 1 else 0.2))
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.copy_(torch.randn(mod.running_mean.shape, generator=g) * 0.1)
                mod.running_var.copy_(torch.rand(mod.running_var.shape, generator=g) + 0.5)
                mod.weight.copy_(torch.rand(mod.weight.shape, generator=g) + 0.5)


def export(m, x, path, exporter, opset, static=False):
    if exporter == "dynamo":
        batch = torch.export.Dim("batch", min=1, max=1024)
        prog = torch.onnx.export(m, (x,), dynamo=True, input_names=["image"], output_names=["logits"],
                                 dynamic_shapes=({0: batch},))
        prog.save(path)
    else:
        kw = {"dynamo": False} if hasattr(torch.onnx, "ONNXProgram") else {}
        if static:  # torch.onnx.export's default: the traced batch of 1 fixed in the graph
            torch.onnx.export(m, x[:1], path, input_names=["image"], output_names=["logits"], opset_version=opset, **kw)
        else:
            torch.onnx.export(m, x, path, input_names=["image"], output_names=["logits"], opset_version=opset,
                              dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}}, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--exporter", default="torchscript", choices=["torchscript", "dynamo", "both"])
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--opset", type=int, default=13, help="opset of the TorchScript exporter")
    ap.add_argument("--dir", default="", help="subdirectory name (default: the exporter's)")
    ap.add_argument("--static", action="store_true", help="TorchScript export with the batch fixed at 1 (no dynamic axes)")
    a = ap.parse_args()
    exporters = ["torchscript", "dynamo"] if a.exporter == "both" else [a.exporter]
    print(f"torch {torch.__version__} torchvision {torchvision.__version__}")
    only = set(filter(None, a.only.split(",")))
    for ex in exporters:
        d = os.path.join(a.out, a.dir or ex)
        os.makedirs(d, exist_ok=True)
        for i, (name, spec) in enumerate(sorted(models().items())):
            if spec is None or (only and name not in only):
                continue
            make, size = spec
            torch.manual_seed(i)
            m = make().eval()
            randomize(m, i)
            x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(100 + i))
            with torch.no_grad():
                ref = m.double()(x.double()).numpy()
            m = m.float()
            path = os.path.join(d, name + ".onnx")
            try:
                export(m, x, path, ex, a.opset, a.static)
            except Exception as e:  # report and go on: one exporter bug must not hide the rest
                print(f"{ex} {name}: export failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}", file=sys.stderr)
                continue
            np.save(os.path.join(d, name + ".input.npy"), x.numpy())
            np.save(os.path.join(d, name + ".logits.npy"), ref)
            print(f"{ex} {name}: {os.path.getsize(path)} bytes, input {list(x.shape)}, logits {list(ref.shape)}")


if __name__ == "__main__":
    main()
