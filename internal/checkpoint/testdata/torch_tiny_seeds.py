"""Writes the small real-torch seeds of FuzzLoadPTH and FuzzUnpicklePTH.

Run from this directory with a Python that has torch:
    python3 torch_tiny_seeds.py

The fuzzers start from these instead of the golden checkpoints, which are
hundreds of times larger and make each execution (and each minimisation)
correspondingly slower. The state dict holds what torch writes and
goinfer must read: views sharing a storage (a transpose), a storage
offset, float16, bfloat16 and a float64 scalar. Its storages have the
sizes of the fuzz test's sample() dict (24, 6, 2 and 16 bytes), so that
its data.pkl loads against FuzzUnpicklePTH's fixed storages.
"""
import collections
import io
import os
import zipfile

import torch


def go_corpus(data: bytes) -> str:
    """The file format of go test's fuzz corpus, for one []byte value."""
    out = []
    for b in data:
        c = chr(b)
        if c == '"' or c == '\\':
            out.append('\\' + c)
        elif 0x20 <= b < 0x7f:
            out.append(c)
        else:
            out.append('\\x%02x' % b)
    return 'go test fuzz v1\n[]byte("%s")\n' % ''.join(out)


def main():
    w = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    sd = collections.OrderedDict()
    sd['w'] = w
    sd['wt'] = w.t()
    sd['h'] = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float16)[1:]
    sd['b'] = torch.tensor([[[1.5]]], dtype=torch.bfloat16)
    sd['d'] = torch.tensor([1.0, 2.0], dtype=torch.float64)[1]
    buf = io.BytesIO()
    torch.save(sd, buf)
    pth = buf.getvalue()
    with zipfile.ZipFile(io.BytesIO(pth)) as z:
        pkl = z.read([n for n in z.namelist() if n.endswith('/data.pkl')][0])
    name = 'torch-%s-tiny' % torch.__version__.split('+')[0]
    for target, data in (('FuzzLoadPTH', pth), ('FuzzUnpicklePTH', pkl)):
        path = os.path.join('fuzz', target, name)
        with open(path, 'w') as f:
            f.write(go_corpus(data))
        print(path, len(data), 'bytes')


if __name__ == '__main__':
    main()
