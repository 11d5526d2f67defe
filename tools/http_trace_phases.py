#!/usr/bin/env python3
"""Per-request timeline of batch-1 HTTP requests in a Go execution trace of
`goinfer serve` (/debug/pprof/trace, as tools/http_lat.sh takes it), one
request in flight on one keep-alive connection.

Usage: go tool trace -d=parsed server-http.trace > server.txt
       python3 tools/http_trace_phases.py server.txt

It follows the goroutine with the most events (the connection's), splits
its events into requests at each wake-up from a network wait, and prints
the median, p10 and p90 of each step in microseconds: the wake-up to the
head's read, that read, the Go code between the head and the body's first
read, the body's read syscalls, the CUDA calls up to the wait for the
device, that wait, and the answer's writes."""
import collections
import re
import statistics
import sys


def parse(path):
    evs, cur = [], None
    for line in open(path):
        if line.strip() and not line.startswith((" ", "\t", "Stack=", "TransitionStack=")):
            m = re.match(r"M=(-?\d+) P=(-?\d+) G=(-?\d+) (\w+) Time=(\d+)(.*)", line)
            cur = None
            if m and m[4] == "StateTransition":
                cur = dict(t=int(m[5]), rest=m[6].strip(), stack=[])
                evs.append(cur)
        elif cur is not None and line.startswith("\t") and not line.startswith("\t\t"):
            cur["stack"].append(line.strip().split(" @ ")[0])
    return evs


def main():
    evs = parse(sys.argv[1])
    gid = collections.Counter(re.match(r"GoID=(\d+)", e["rest"])[1] for e in evs if e["rest"].startswith("GoID=")).most_common(1)[0][0]
    g = [e for e in evs if e["rest"].startswith("GoID=%s " % gid)]
    has = lambda e, k: any(k in x for x in e["stack"])
    top = lambda e: next((x for x in e["stack"] if not re.search(r"purego|syscall|poll\.|runtime", x)), "")
    reqs, cur = [], []
    for e in g:
        if "Waiting->Runnable" in e["rest"] and cur and "network" in cur[-1]["rest"] and len(cur) > 30:
            reqs.append(cur)
            cur = []
        cur.append(e)
    us = lambda a, b: (b - a) / 1e3
    rows = []
    for r in reqs:
        sc = [(a, b) for a, b in zip(r, r[1:]) if "Running->Syscall" in a["rest"] and "Syscall->Running" in b["rest"]]
        reads = [x for x in sc if "netFD).Read" in top(x[0])]
        body = [x for x in reads[1:] if has(x[0], "readFullIncremental")]
        cuda = [x for x in sc if "cuda" in top(x[0])]
        sync = [x for x in cuda if "EventSynchronize" in top(x[0])]
        writes = [x for x in sc if "netFD).Write" in top(x[0])]
        if not (reads and body and cuda and sync and writes):
            continue
        head = reads[0]
        rows.append({
            "wake to the head's read": us(r[0]["t"], head[0]["t"]),
            "head read (syscall)": us(head[0]["t"], head[1]["t"]),
            "Go code, head to body read": us(head[1]["t"], body[0][0]["t"]),
            "body read syscalls": sum(us(a["t"], b["t"]) for a, b in body),
            "body reads (count)": len(body),
            "body in to first CUDA call": us(body[-1][1]["t"], cuda[0][0]["t"]),
            "CUDA calls up to the wait": us(cuda[0][0]["t"], sync[0][0]["t"]),
            "wait for the device": us(sync[0][0]["t"], sync[0][1]["t"]),
            "device done to first write": us(sync[0][1]["t"], writes[0][0]["t"]),
            "answer writes (syscalls)": sum(us(a["t"], b["t"]) for a, b in writes),
            "wake to answer written": us(r[0]["t"], writes[-1][1]["t"]),
        })
    print("goroutine %s, %d requests" % (gid, len(rows)))
    print("| step | median us | p10 | p90 |\n|---|---:|---:|---:|")
    for k in rows[0]:
        v = sorted(x[k] for x in rows)
        print("| %s | %.1f | %.1f | %.1f |" % (k, statistics.median(v), v[len(v) // 10], v[9 * len(v) // 10]))


if __name__ == "__main__":
    main()
