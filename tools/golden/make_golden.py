#!/usr/bin/env python3
"""Writes goinfer's golden test data: small ResNets with torchvision's key
names, random weights and batch-norm statistics, saved as .pth and
.safetensors, fixed inputs, and float64 reference logits computed by PyTorch.

Run on a machine with PyTorch and safetensors (the GPU machine has both):

    python3 tools/golden/make_golden.py --out testdata/golden

The models are written here rather than taken from torchvision so that the
base width can shrink (torchvision fixes the stem at 64 channels); the module
names match torchvision's, so the state dicts have the same keys.
"""
import argparse
import json
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Basic(nn.Module):
    expansion = 1

    def __init__(self, cin, width, stride, groups=1, wpg=64):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.out = width
        self.downsample = None
        if stride != 1 or cin != width:
            self.downsample = nn.Sequential(nn.Conv2d(cin, width, 1, stride, bias=False), nn.BatchNorm2d(width))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        s = x if self.downsample is None else self.downsample(x)
        return F.relu(y + s)


class Bottle(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride, groups=1, wpg=64):
        super().__init__()
        width = planes * wpg // 64 * groups
        self.out = planes * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, self.out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(self.out)
        self.downsample = None
        if stride != 1 or cin != self.out:
            self.downsample = nn.Sequential(nn.Conv2d(cin, self.out, 1, stride, bias=False), nn.BatchNorm2d(self.out))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        s = x if self.downsample is None else self.downsample(x)
        return F.relu(y + s)


class Net(nn.Module):
    def __init__(self, block, layers, base, classes, groups=1, wpg=64):
        super().__init__()
        self.conv1 = nn.Conv2d(3, base, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(base)
        cin = base
        for i, n in enumerate(layers):
            blocks = []
            for b in range(n):
                blk = block(cin, base << i, 2 if (i > 0 and b == 0) else 1, groups, wpg)
                blocks.append(blk)
                cin = blk.out
            setattr(self, "layer%d" % (i + 1), nn.Sequential(*blocks))
        self.nstages = len(layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        for i in range(self.nstages):
            x = getattr(self, "layer%d" % (i + 1))(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def randomize(net, gen, calib):
    """Random affine BN parameters and running statistics calibrated on a
    random batch (then perturbed), so activations keep a sane scale."""
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=gen))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=gen))
                m.momentum = None  # cumulative average over the calibration pass
                m.reset_running_stats()
        net.train()
        net(calib)
        net.eval()
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                std = m.running_var.sqrt()
                m.running_mean.add_(0.1 * std * torch.randn(std.shape, generator=gen))
                m.running_var.mul_(0.8 + 0.45 * torch.rand(std.shape, generator=gen))
                m.num_batches_tracked.fill_(7)


def reference(net, x):
    net64 = net.double().eval()
    with torch.no_grad():
        y = net64(torch.from_numpy(x).double()).numpy()
    net.float()
    return y


def save_case(out, name, net, inputs, manifest, half=None):
    import safetensors.torch as st
    sd = {k: v.detach().clone().contiguous() for k, v in net.state_dict().items()}
    files = {}
    torch.save(sd, os.path.join(out, name + ".pth"))
    files["pth"] = name + ".pth"
    st.save_file(sd, os.path.join(out, name + ".safetensors"))
    files["safetensors"] = name + ".safetensors"
    refs = []
    for i, x in enumerate(inputs):
        xn = "%s_input%d.npy" % (name, i)
        rn = "%s_ref%d.npy" % (name, i)
        np.save(os.path.join(out, xn), x)
        np.save(os.path.join(out, rn), reference(net, x))
        refs.append({"input": xn, "reference": rn})
    manifest.append({"name": name, "files": files, "cases": refs})
    if half is not None:
        # The same model stored in reduced precision; its reference is
        # computed from the rounded weights, so it checks the dtype decoding.
        hsd = {k: (v.to(half) if v.is_floating_point() else v) for k, v in sd.items()}
        tag = {torch.float16: "f16", torch.bfloat16: "bf16"}[half]
        hname = name + "_" + tag
        st.save_file(hsd, os.path.join(out, hname + ".safetensors"))
        net.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in hsd.items()})
        x = inputs[0]
        np.save(os.path.join(out, hname + "_ref0.npy"), reference(net, x))
        manifest.append({"name": hname, "files": {"safetensors": hname + ".safetensors"},
                         "cases": [{"input": "%s_input0.npy" % name, "reference": hname + "_ref0.npy"}]})


def image_case(out, gen, manifest):
    """A synthetic photo-like image, and torchvision's eval transform of it."""
    from PIL import Image
    import torchvision.transforms as T
    h, w = 240, 320
    yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    noise = torch.rand((h, w, 3), generator=gen).numpy()
    img = np.stack([np.sin(9 * xx) * 0.5 + 0.5, yy, (xx * yy) ** 0.5], -1) * 0.8 + 0.2 * noise
    img = Image.fromarray((img * 255).round().astype(np.uint8), "RGB")
    # The resized, cropped uint8 pixels (HWC) are stored rather than the
    # normalized float tensor: resizing is the hard part, normalizing is
    # (x/255 - mean)/std, and uint8 is a quarter of the size.
    tf = T.Compose([T.Resize(256), T.CenterCrop(224)])
    entries = []
    for ext in ("png", "jpg"):
        fn = "image." + ext
        img.save(os.path.join(out, fn), quality=95) if ext == "jpg" else img.save(os.path.join(out, fn))
        x = np.asarray(tf(Image.open(os.path.join(out, fn)).convert("RGB")), dtype=np.uint8)
        np.save(os.path.join(out, "image_%s_u8.npy" % ext), x)
        entries.append({"image": fn, "pixels_hwc_u8": "image_%s_u8.npy" % ext,
                        "transform": "Resize(256) CenterCrop(224), PIL bilinear"})
    manifest.append({"name": "images", "images": entries})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="testdata/golden")
    ap.add_argument("--full", default="", help="also write a full-size torchvision resnet18 (.pth + reference) here")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    gen = torch.Generator().manual_seed(20261121)
    torch.manual_seed(20261121)
    manifest = []

    net = Net(Basic, [2, 2, 2, 2], 8, 10)
    randomize(net, gen, torch.randn(4, 3, 64, 64, generator=gen))
    inputs = [torch.randn(2, 3, 64, 64, generator=gen).numpy(), torch.randn(3, 3, 45, 37, generator=gen).numpy()]
    save_case(args.out, "resnet18_w8", net, inputs, manifest, half=torch.float16)

    net = Net(Bottle, [1, 2, 1, 1], 4, 7, groups=2, wpg=64)
    randomize(net, gen, torch.randn(4, 3, 64, 64, generator=gen))
    inputs = [torch.randn(2, 3, 56, 56, generator=gen).numpy()]
    save_case(args.out, "bottleneck_w4_g2", net, inputs, manifest, half=torch.bfloat16)

    image_case(args.out, gen, manifest)
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)

    if args.full:
        import torchvision
        os.makedirs(args.full, exist_ok=True)
        net = torchvision.models.resnet18(weights=None)
        randomize(net, gen, torch.randn(8, 3, 224, 224, generator=gen))
        sd = net.state_dict()
        torch.save(sd, os.path.join(args.full, "resnet18_random.pth"))
        x = torch.randn(3, 3, 224, 224, generator=gen).numpy()
        np.save(os.path.join(args.full, "resnet18_input.npy"), x)
        np.save(os.path.join(args.full, "resnet18_ref.npy"), reference(net, x))
    print("wrote", args.out, sorted(os.listdir(args.out)))


if __name__ == "__main__":
    main()
