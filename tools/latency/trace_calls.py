#!/usr/bin/env python3
"""Per-call durations of one goroutine's syscalls and cgo calls (CUDA
through purego) in a Go execution trace of `goinfer serve`, and the gaps
between consecutive calls, medians and p90 in microseconds.

Usage: go tool trace -d=parsed serve.trace > serve.txt
       python3 tools/latency/trace_calls.py serve.txt GOROUTINE_ID
(tools/http_trace_phases.py prints the connection goroutine's id first.)"""
import re, sys, collections, statistics
G=sys.argv[2]
evs=[]; cur=None; mode=None
for line in open(sys.argv[1]):
    if line.startswith("M="):
        m=re.match(r"M=(-?\d+) P=(-?\d+) G=(-?\d+) (\w+) Time=(\d+)(.*)", line)
        cur=None
        if m and m[4]=="StateTransition" and ("GoID=%s "%G) in m[6]:
            cur=dict(t=int(m[5]), tr=m[6].split()[1], stack=[]); evs.append(cur); mode=None
    elif cur is not None:
        if line.startswith("TransitionStack="): mode="t"
        elif line.startswith("Stack="): mode="s"
        elif line.startswith("\t") and not line.startswith("\t\t") and mode=="t":
            cur["stack"].append(line.strip().split(" @ ")[0])
# pair syscalls
calls=collections.defaultdict(list); gaps=collections.defaultdict(list)
prev_end=None; prev_name=None
seq=[]
for i,e in enumerate(evs):
    if e["tr"]=="Running->Syscall":
        name=next((x for x in e["stack"] if not re.search(r"purego|runtime|syscall\.|internal/poll|^net\.", x)), "?")
        # find end
        for f in evs[i+1:i+3]:
            if f["tr"].startswith("Syscall->"):
                d=(f["t"]-e["t"])/1e3
                seq.append((e["t"], name, d, f["t"]))
                break
for a,b in zip(seq,seq[1:]):
    calls[a[1]].append(a[2]); gaps[(a[1],b[1])].append((b[0]-a[3])/1e3)
for k,v in sorted(calls.items(), key=lambda kv:-len(kv[1]))[:25]:
    print("%-70s n=%5d med %7.1f p90 %7.1f"%(k[:70],len(v),statistics.median(v),sorted(v)[int(len(v)*.9)]))
print("gaps")
for k,v in sorted(gaps.items(), key=lambda kv:-len(kv[1]))[:25]:
    print("%-40s -> %-40s n=%5d med %7.1f"%(k[0][-40:],k[1][-40:],len(v),statistics.median(v)))
