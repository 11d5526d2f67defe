#!/usr/bin/env bash
# End-to-end pipeline benchmarks on a GPU machine, goinfer and PyTorch side by
# side in one session: the reference workload (fp32 host tensors of
# [bs,3,250,250], 100 requests, flood) through `goinfer bench`, the
# reference's own method (tools/pytorch_pipeline.py --variant reference) and a
# skilled PyTorch pipeline (--variant fast). Also checks that PyTorch reads a
# .pth goinfer wrote and that the cpu engine predicts a full-size torchvision
# ResNet-18 within 1e-4 of PyTorch's float64 logits.
#
# Usage (on the GPU machine, from the repo root, with a prebuilt binary):
#   GOINFER=.bin/goinfer OUT=/tmp/out tools/gpu_pipeline.sh [sections...]
# Sections: checks goinfer pytorch (default: all), and not by default tuning
# (cold start with and without --tuning_cache: bench at batch 256, 32 and 1,
# then the time goinfer serve takes to report ready). Rows go to
# $OUT/pipeline.csv.
set -uo pipefail
B=${GOINFER:-.bin/goinfer}
OUT=${OUT:-/tmp/out}
M=/tmp/models
mkdir -p "$OUT" "$M"
sections=${*:-checks goinfer pytorch}
has() { [[ " $sections " == *" $1 "* ]]; }
log() { printf '\n### %s\n' "$*"; }

if [ ! -f $M/resnet18-tv.pth ]; then
  python3 - <<'EOF'
import torch, torchvision
torch.manual_seed(0)
torch.save(torchvision.models.resnet18().state_dict(), "/tmp/models/resnet18-tv.pth")
EOF
  # The reference loads this name from its model_dir; no network here, so
  # the PyTorch scripts get the same random weights under it.
  cp $M/resnet18-tv.pth $M/resnet18-f37072fd.pth
fi
CK="--checkpoint $M/resnet18-tv.pth"

if has checks; then
  log "doctor"
  $B doctor
  log "PyTorch reads a .pth goinfer wrote"
  $B model init --arch resnet18 --seed 3 --out /tmp/goinfer_r18.pth
  python3 - <<'EOF'
import torch, torchvision
sd = torch.load("/tmp/goinfer_r18.pth", weights_only=True)
m = torchvision.models.resnet18()
print("load_state_dict:", m.load_state_dict(sd))
m.eval()
with torch.no_grad():
    y = m(torch.randn(2, 3, 224, 224))
print("torch.load of goinfer's .pth: OK,", len(sd), "tensors, logits finite:", bool(torch.isfinite(y).all()))
EOF
  log "cpu engine on a full-size torchvision ResNet-18 (PyTorch float64 reference)"
  [ -f /tmp/full/resnet18_ref.npy ] || python3 tools/golden/make_golden.py --out /tmp/golden_unused --full /tmp/full >/dev/null
  for c in --no-compile --compile; do
    $B predict --engine cpu $c --checkpoint /tmp/full/resnet18_random.pth --input /tmp/full/resnet18_input.npy --output /tmp/full/got.npy --topk 1
    python3 -c "
import numpy as np
g=np.load('/tmp/full/got.npy'); r=np.load('/tmp/full/resnet18_ref.npy')
print('cpu engine $c: max|got-ref|/max|ref| = %.3g (tolerance 1e-4)' % (np.abs(g-r).max()/np.abs(r).max()))"
  done
fi

bench() { # label, then bench flags
  local exp=$1; shift
  echo "+ goinfer bench --experiment $exp $*"
  $B bench $CK --results_dir "$OUT" --output_file pipeline.csv --experiment "$exp" "$@" >"$OUT/last.log" 2>&1 \
    || { echo "FAILED"; cat "$OUT/last.log"; }
  grep -E "^(Warmup latency|Average latency|Throughput|Average GPU|p50)" "$OUT/last.log" | sed 's/^/    /'
}

if has goinfer; then
  log "goinfer: the CHANGELOG's experiments at batch 256 and 32 (compiled fp16)"
  for bs in 256 32; do
    bench original --batch_size $bs --no-copy_streams --num_workers 1
    for w in 1 2 3 4; do bench workers$w --batch_size $bs --num_workers $w; done
  done
  log "goinfer: batch 1"
  bench bs1_concurrency1 --batch_size 1 --concurrency 1 --num_iters 1000
  bench bs1_flood --batch_size 1 --num_iters 1000
  log "goinfer: eager cold start, uint8 input, long run"
  bench eager --batch_size 256 --no-compile
  bench uint8_input --batch_size 256 --input_dtype uint8
  bench long_run --batch_size 256 --num_iters 1000
  bench profile --batch_size 32 --num_iters 20 --profile --profile_file "$OUT/trace_bs32.json"
fi

if has pytorch; then
  log "PyTorch: the reference's method (4 workers, no compile)"
  for bs in 1 32 256; do
    python3 tools/pytorch_pipeline.py --variant reference --batch_size $bs --model_dir $M --csv "$OUT/pipeline.csv" 2>&1 | grep -v Warning
  done
  log "PyTorch: skilled pipeline (fp16 channels-last, two streams), eager and CUDA graph"
  for bs in 1 32 256; do
    python3 tools/pytorch_pipeline.py --variant fast --batch_size $bs --model_dir $M --csv "$OUT/pipeline.csv" 2>&1 | grep -v Warning
    python3 tools/pytorch_pipeline.py --variant fast --cuda_graph --batch_size $bs --model_dir $M --csv "$OUT/pipeline.csv" 2>&1 | grep -v Warning
  done
fi

if has tuning; then
  log "cold start with a tuning cache (--tuning_cache; a fresh directory, then reused)"
  TC=$(mktemp -d)
  for bs in 256 32 1; do
    bench nocache_bs$bs --batch_size $bs
    for run in first second third; do bench cache_${run}_bs$bs --batch_size $bs --tuning_cache "$TC"; done
    bench nocache2_bs$bs --batch_size $bs
  done
  ready() { # label, then serve flags: seconds until /v2/health/ready answers 200
    local l=$1; shift
    local t0 t1
    t0=$(date +%s.%N)
    $B serve $CK "$@" >"$OUT/serve_$l.log" 2>&1 &
    local s=$!
    for _ in $(seq 1500); do curl -sf localhost:8000/v2/health/ready >/dev/null && break; sleep 0.02; done
    t1=$(date +%s.%N)
    echo "    goinfer serve $*: ready after $(python3 -c "print(round($t1 - $t0, 2))") s"
    kill -TERM $s; wait $s
  }
  rm -rf "$TC"; mkdir -p "$TC"
  ready nocache
  for run in first second third; do ready cache_$run --tuning_cache "$TC"; done
  ready nocache2
  rm -rf "$TC"
fi

log "summary ($OUT/pipeline.csv)"
python3 - "$OUT/pipeline.csv" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
f = lambda r, k, s=1: ("%.4g" % (float(r[k]) * s)) if r.get(k) else "-"
print("| experiment | engine | bs | compile | workers | mode | img/s | avg lat ms | p50 ms | p99 ms | warmup s | gpu util % |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        r["experiment"], r["engine"], r["batch_size"], r["compile"], r["num_workers"], r["mode"],
        f(r, "throughput"), f(r, "average_latency", 1e3), f(r, "p50_latency", 1e3), f(r, "p99_latency", 1e3),
        f(r, "warmup_latency"), f(r, "gpu_util")))
EOF
