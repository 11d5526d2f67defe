#!/usr/bin/env python3
"""Checks a server's classification against its own raw logits.

Sends each image once asking for the model's logits and once for the
classification extension on the probabilities output (on the cuda engine
ranked on the GPU: softmax and top-k after the forward), and checks that
the k classes are the softmax's best k of the logits, in order, with their
probabilities.

    classify_check.py --server http://127.0.0.1:18620 --model M [--k 3] IMAGE...
"""
import argparse
import base64
import json
import math
import sys
import urllib.request


def infer(url, model, img, outputs):
    body = {"inputs": [{"name": "image", "datatype": "BYTES", "shape": [1], "data": [base64.b64encode(img).decode()]}],
            "outputs": outputs}
    req = urllib.request.Request(f"{url}/v2/models/{model}/infer", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)["outputs"][0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("images", nargs="+")
    a = ap.parse_args()
    bad = 0
    for f in a.images:
        img = open(f, "rb").read()
        logits = infer(a.server, a.model, img, [{"name": "logits"}])["data"]
        m = max(logits)
        e = [math.exp(v - m) for v in logits]
        p = [v / sum(e) for v in e]
        want = sorted(range(len(p)), key=lambda c: (-p[c], c))[: a.k]
        got = infer(a.server, a.model, img, [{"name": "probabilities", "parameters": {"classification": a.k}}])["data"]
        got = [(int(s.split(":")[1]), float(s.split(":")[0])) for s in got]
        ok = [c for c, _ in got] == want and all(abs(v - p[c]) < 2e-6 for c, v in got)
        bad += not ok
        print(f"{f}: {'ok' if ok else 'MISMATCH'} got {got} want {[(c, round(p[c], 6)) for c in want]}")
    print(f"{len(a.images) - bad}/{len(a.images)} classifications match the softmax of the logits")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
