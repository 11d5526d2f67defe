#!/usr/bin/env python3
"""Sends the same random FP32 tensors (IMAGE_SIZE, default 250), one at a time (so each runs
inline on an idle device), to several goinfer servers and compares their
logits: a change to the device path must not change the answers.

Usage: lat_check.py PORT [PORT...]   (HTTP ports on 127.0.0.1)
"""
import array, json, os, random, struct, sys, urllib.request

SIZE = int(os.environ.get("IMAGE_SIZE", "250"))

def model_name(port):
    req = urllib.request.Request("http://127.0.0.1:%d/v2/repository/index" % port, data=b"{}", method="POST")
    with urllib.request.urlopen(req) as r:
        return json.load(r)[0]["name"]

def infer(port, data):
    head = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, SIZE, SIZE],
                                   "parameters": {"binary_data_size": len(data)}}],
                       "outputs": [{"name": "logits", "parameters": {"binary_data": True}}]}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v2/models/%s/infer" % (port, model_name(port)), data=head + data,
                                 headers={"Inference-Header-Content-Length": str(len(head)),
                                          "Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(req) as r:
        body = r.read()
        n = int(r.headers["Inference-Header-Content-Length"])
    raw = body[n:]
    return struct.unpack("<%df" % (len(raw) // 4), raw)

ports = [int(p) for p in sys.argv[1:]]
rng = random.Random(7)
worst = 0.0
for i in range(8):
    x = array.array("f", (rng.gauss(0, 1) for _ in range(3 * SIZE * SIZE))).tobytes()
    outs = [infer(p, x) for p in ports]
    ref = outs[0]
    scale = max(abs(v) for v in ref)
    for p, o in zip(ports[1:], outs[1:]):
        d = max(abs(a - b) for a, b in zip(ref, o)) / scale
        worst = max(worst, d)
        if o.index(max(o)) != ref.index(max(ref)):
            print("input %d: port %d's top class %d differs from port %d's %d" % (i, p, o.index(max(o)), ports[0], ref.index(max(ref))))
print("logits of ports %s vs %d: worst relative difference %.2e over 8 inputs (%s)" % (ports[1:], ports[0], worst, "OK" if worst < 1e-3 else "DIFFER"))
