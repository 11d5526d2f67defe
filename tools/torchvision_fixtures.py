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
from torchvision.models import (convnext, densenet, efficientnet, maxvit, mobilenetv2, mobilenetv3, regnet, resnet,
                                shufflenetv2, squeezenet, swin_transformer, vision_transformer)

OUT = "testdata/torchvision"


def fixtures():
    """name -> (constructor, image size, format). The format is "pth" or
    "safetensors" for a saved state dict of random weights, or "hash" for
    weights that internal/torchvision's RandomStateDictFor computes too
    (seeded hashes, see fill_hashed), so that nothing but the input and the
    logits is committed. The Go test holds the same configurations under
    the same names."""
    f = {}
    f["mobilenet_v2"] = (lambda: mobilenetv2.MobileNetV2(num_classes=10, width_mult=0.25,
                                                         inverted_residual_setting=[[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 2, 2]]), 32, "pth")
    bneck = partial(mobilenetv3.InvertedResidualConfig, width_mult=1.0)
    v3 = [bneck(8, 3, 8, 8, True, "RE", 2, 1), bneck(8, 3, 24, 16, False, "RE", 2, 1),
          bneck(16, 5, 32, 16, True, "HS", 1, 1), bneck(16, 3, 48, 24, True, "HS", 1, 1)]
    f["mobilenet_v3"] = (lambda: mobilenetv3.MobileNetV3(v3, 32, num_classes=10), 32, "safetensors")
    f["vit"] = (lambda: vision_transformer.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                                             hidden_dim=32, mlp_dim=48, num_classes=10), 32, "safetensors")
    mb = partial(efficientnet.MBConvConfig, width_mult=0.5, depth_mult=0.5)
    f["efficientnet"] = (lambda: efficientnet.EfficientNet(
        [mb(1, 3, 1, 16, 16, 1), mb(6, 5, 2, 16, 24, 3), mb(4, 3, 1, 24, 24, 2)], 0.2, num_classes=10), 32, "safetensors")
    fu = efficientnet.FusedMBConvConfig
    f["efficientnet_v2"] = (lambda: efficientnet.EfficientNet(
        [fu(1, 3, 1, 8, 8, 2), fu(4, 3, 2, 8, 16, 2), efficientnet.MBConvConfig(4, 3, 2, 16, 24, 2)], 0.2,
        num_classes=10, last_channel=48, norm_layer=partial(torch.nn.BatchNorm2d, eps=1e-3)), 32, "pth")
    f["regnet_y"] = (lambda: regnet.RegNet(regnet.BlockParams.from_init_params(depth=4, w_0=8, w_a=8.5, w_m=2.0, group_width=4, se_ratio=0.25),
                                           stem_width=8, num_classes=10), 32, "safetensors")
    f["regnet_x"] = (lambda: regnet.RegNet(regnet.BlockParams.from_init_params(depth=5, w_0=8, w_a=6.3, w_m=2.2, group_width=8),
                                           stem_width=8, num_classes=10), 32, "pth")
    f["convnext"] = (lambda: convnext.ConvNeXt([convnext.CNBlockConfig(8, 16, 1), convnext.CNBlockConfig(16, None, 2)], num_classes=10), 32, "safetensors")
    f["densenet"] = (lambda: densenet.DenseNet(growth_rate=4, block_config=(2, 3), num_init_features=8, bn_size=2, num_classes=10), 32, "pth")
    f["shufflenet_v2"] = (lambda: shufflenetv2.ShuffleNetV2([2, 1, 2], [8, 16, 32, 64, 96], num_classes=10), 64, "safetensors")
    f["squeezenet1_0"] = (lambda: squeezenet.SqueezeNet("1_0", num_classes=10), 61, "hash")
    f["squeezenet1_1"] = (lambda: squeezenet.SqueezeNet("1_1", num_classes=10), 47, "hash")
    f["resnet18"] = (lambda: M.resnet18(num_classes=10), 40, "hash")
    f["resnext"] = (lambda: resnet.ResNet(resnet.Bottleneck, [1, 2, 1, 1], groups=4, width_per_group=4, num_classes=10), 40, "hash")
    f["mnasnet0_5"] = (lambda: M.mnasnet0_5(num_classes=10), 32, "hash")
    f["mnasnet0_5_v1"] = (mnasnet_v1, 32, "hash")
    f["inception_v3"] = (lambda: M.Inception3(num_classes=10, aux_logits=True, transform_input=True, init_weights=False), 75, "hash")
    f["swin"] = (lambda: swin_transformer.SwinTransformer(patch_size=[4, 4], embed_dim=8, depths=[2, 2], num_heads=[2, 4],
                                                           window_size=[4, 4], num_classes=10), 36, "hash")
    f["swin_v2"] = (lambda: swin_transformer.SwinTransformer(patch_size=[4, 4], embed_dim=8, depths=[2, 2], num_heads=[2, 4],
                                                              window_size=[4, 4], num_classes=10,
                                                              block=swin_transformer.SwinTransformerBlockV2,
                                                              downsample_layer=swin_transformer.PatchMergingV2), 36, "hash")
    f["maxvit"] = (lambda: maxvit.MaxVit(input_size=(32, 32), stem_channels=8, partition_size=2, block_channels=[16, 16],
                                         block_layers=[1, 2], head_dim=8, stochastic_depth_prob=0.0, num_classes=10), 32, "hash")
    f["googlenet"] = (lambda: M.GoogLeNet(num_classes=10, aux_logits=False, transform_input=True, init_weights=False), 33, "hash")
    return f


def mnasnet_v1():
    """mnasnet0_5 as torchvision loads its published (version 1) weights:
    loading a version-1 state dict swaps in the fixed 32/16 stem."""
    m = M.mnasnet0_5(num_classes=10)
    sd = m.state_dict()
    meta = getattr(sd, "_metadata")
    meta[""]["version"] = 1
    v1 = M.mnasnet0_5(num_classes=10)
    try:
        v1.load_state_dict(sd)
    except RuntimeError:
        pass  # the shapes of the old stem differ; the modules are swapped now
    return v1


MASK = 0xFFFFFFFF


def fnv1a32(s):
    h = 0x811C9DC5
    for c in s.encode():
        h = ((h ^ c) * 0x01000193) & MASK
    return h


def mix32(x):
    x = x.astype(np.uint64)
    x ^= x >> np.uint64(16)
    x = (x * np.uint64(0x7FEB352D)) & np.uint64(MASK)
    x ^= x >> np.uint64(15)
    x = (x * np.uint64(0x846CA68B)) & np.uint64(MASK)
    x ^= x >> np.uint64(16)
    return x


def fill_hashed(model, seed):
    """The weights of internal/torchvision.RandomStateDictFor: element i of
    tensor key is u = mix32(fnv1a32(f"{seed}:{key}") ^ (i * 0x9E3779B1)) / 2^32,
    mapped to 0.5 + u (running variances, 1-D norm scales), 0.2u - 0.1
    (other 1-D tensors) or (2u - 1) * sqrt(3 / fan_in)."""
    with torch.no_grad():
        for key, p in model.state_dict().items():
            if not p.is_floating_point() or key.endswith("relative_coords_table"):
                if key.endswith("num_batches_tracked"):
                    p.zero_()
                continue  # fixed buffers (Swin's relative position index and coordinates) keep their content
            base = np.uint64(fnv1a32(f"{seed}:{key}"))
            i = np.arange(p.numel(), dtype=np.uint64)
            u = mix32(base ^ ((i * np.uint64(0x9E3779B1)) & np.uint64(MASK))).astype(np.float64) / 2.0**32
            if key.endswith(".running_var") or (p.dim() == 1 and key.endswith(".weight")):
                scale, shift = 1.0, 0.5
            elif p.dim() <= 1:
                scale, shift = 0.2, -0.1
            else:
                bound = (3.0 / float(np.prod(p.shape[1:]))) ** 0.5
                scale, shift = 2 * bound, -bound
            v = (u * scale + shift).astype(np.float32)
            p.copy_(torch.from_numpy(v.reshape(tuple(p.shape))))


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
    for name, (ctor, size, fmt) in sorted(fixtures().items()):
        # Seeds follow the name, so adding a fixture leaves the others alone.
        seed = fnv1a32(name) & 0xFFFF
        gen = torch.Generator().manual_seed(seed)
        model = ctor().eval()
        entry = {"image_size": size}
        if fmt == "hash":
            entry["seed"] = seed
            fill_hashed(model, entry["seed"])
        else:
            randomize(model, gen)
            path = f"{OUT}/{name}.{fmt}"
            entry["file"] = os.path.basename(path)
            if fmt == "pth":
                torch.save(model.state_dict(), path)
            else:
                save_safetensors(path, model.state_dict())
        # float32-representable input, so float32 and float64 runs see the same values.
        # Two images, or one for the widest models, whose float64 evaluation
        # in Go dominates the test's time.
        batch = 1 if name in ("inception_v3", "resnet18", "googlenet") else 2
        x = (torch.rand((batch, 3, size, size), generator=gen) * 4 - 2).float()
        with torch.no_grad():
            y = model.double()(x.double())
        np.save(f"{OUT}/{name}.input.npy", x.numpy())
        np.save(f"{OUT}/{name}.logits.npy", y.numpy())
        params = sum(p.numel() for p in model.parameters())
        entry["params"] = params
        manifest[name] = entry
        print(f"{name}: {params} parameters, {fmt}", file=sys.stderr)
    with open(f"{OUT}/manifest.json", "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
