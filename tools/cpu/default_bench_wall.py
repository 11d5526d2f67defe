#!/usr/bin/env python3
"""Wall time of the default `goinfer bench` (cpu engine), phase by phase.

Usage: default_bench_wall.py ROUNDS BINARY [BINARY...]

Runs each binary's `bench --results_dir /tmp/default-bench-rd` (the default
workload otherwise) ROUNDS times, alternating the binaries so that a noisy
machine hits them alike, and prints per run: wall time (binary start to
exit), child CPU time, the phases seen on stderr (generating the request
tensors, waiting for the warmup answer, flood and exit) and bench's own
figures, then per binary the range and median of its wall times and the
ratio of the first binary's median to each one's (alternating runs on a
noisy machine compare; single runs do not).
"""
import re
import resource
import statistics
import subprocess
import sys
import time


walls = {}


def run(binary):
    t0 = time.time()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.Popen([binary, "bench", "--results_dir", "/tmp/default-bench-rd"],
                         stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    marks = {}
    for line in p.stderr:
        for key, prefix in (("gen", "generating"), ("send", "warmup:"), ("warm", "warmup answered")):
            if line.startswith(prefix):
                marks[key] = time.time() - t0
    out = p.stdout.read()
    if p.wait() != 0:
        sys.exit(f"{binary} failed")
    wall = time.time() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru.ru_utime - ru0.ru_utime) + (ru.ru_stime - ru0.ru_stime)

    def fig(name):
        return float(re.search(re.escape(name) + r": ([0-9.]+)", out).group(1))

    walls.setdefault(binary, []).append(wall)
    print(f"{binary} wall {wall:.2f} s, cpu {cpu:.2f} s | generate {marks['send'] - marks['gen']:.2f}, "
          f"warmup {marks['warm'] - marks['send']:.2f}, flood+exit {wall - marks['warm']:.2f} | "
          f"load {fig('Load time'):.3f} compile {fig('Compile time'):.3f} warmup {fig('Warmup latency'):.3f} "
          f"throughput {fig('Throughput (exclude warmup)'):.1f} img/s", flush=True)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    for _ in range(int(sys.argv[1])):
        for b in sys.argv[2:]:
            run(b)
    base = statistics.median(walls[sys.argv[2]])
    for b, w in walls.items():
        med = statistics.median(w)
        print(f"{b}: wall {min(w):.2f}-{max(w):.2f} s, median {med:.2f} s over {len(w)} runs; "
              f"{base / med:.2f}x the first binary's median", flush=True)


if __name__ == "__main__":
    main()
