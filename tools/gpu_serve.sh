#!/usr/bin/env bash
# Serving benchmarks on a GPU machine: `goinfer serve` on loopback, driven by
# `goinfer bench --url` over gRPC and HTTP (binary tensor data), side by side
# with the in-process pipeline; then a bounded overload run.
#
# Usage (on the GPU machine, from the repo root, with a prebuilt binary):
#   GOINFER=.bin/goinfer OUT=/tmp/out tools/gpu_serve.sh
# Rows go to $OUT/serve.csv, the server logs to $OUT/serve*.log.
set -uo pipefail
B=${GOINFER:-.bin/goinfer}
OUT=${OUT:-/tmp/out}
CKPT=${CKPT:-/tmp/models/resnet18-tv.pth}
OVERLOAD_SECONDS=${OVERLOAD_SECONDS:-30}
mkdir -p "$OUT" "$(dirname "$CKPT")"
[ -f "$CKPT" ] || python3 -c "
import torch, torchvision; torch.manual_seed(0)
torch.save(torchvision.models.resnet18().state_dict(), '$CKPT')"

bench() { # experiment, then flags
  local exp=$1; shift
  echo "+ goinfer bench --experiment $exp $*"
  $B bench --results_dir "$OUT" --output_file serve.csv --experiment "$exp" "$@" >"$OUT/last.log" 2>&1 || echo "    (exit $?)"
  grep -E "^(Average latency|p50|Throughput|Server|Refused|Errors)" "$OUT/last.log" | sed 's/^/    /'
}

start_server() { # log file, then serve flags
  local log=$1; shift
  $B serve --checkpoint "$CKPT" "$@" >"$log" 2>&1 &
  SERVER=$!
  for _ in $(seq 300); do
    curl -sf localhost:8000/v2/health/ready >/dev/null && return 0
    sleep 0.1
  done
  echo "server did not become ready"; tail -20 "$log"; return 1
}

stop_server() {
  grep -E "VmHWM|VmRSS" /proc/$SERVER/status | sed 's/^/    server /'
  kill -TERM $SERVER; wait $SERVER; echo "    server exit status: $?"
}

echo "### in-process pipeline, batch 1, concurrency 1 (for comparison)"
bench inprocess_c1 --checkpoint "$CKPT" --batch_size 1 --concurrency 1 --num_iters 2000

echo "### goinfer serve (defaults: compiled fp16, dynamic batching up to 64, 2 ms delay)"
start_server "$OUT/serve.log" || exit 1
curl -s localhost:8000/v2/models/resnet18-tv | head -c 400; echo
bench grpc_c1 --url grpc://127.0.0.1:8001 --batch_size 1 --concurrency 1 --num_iters 2000
bench http_c1 --url http://127.0.0.1:8000 --batch_size 1 --concurrency 1 --num_iters 2000
bench grpc_c64 --url grpc://127.0.0.1:8001 --batch_size 1 --concurrency 64 --num_iters 40000
bench http_c64 --url http://127.0.0.1:8000 --batch_size 1 --concurrency 64 --num_iters 40000
curl -s localhost:8000/metrics | grep -E "^goinfer_(batch_size|requests_total)" | head -20
stop_server

echo "### overload: queue of 64 images, 256 clients in flight for ~${OVERLOAD_SECONDS} s"
start_server "$OUT/serve_overload.log" --max_queue 64 || exit 1
t0=$(date +%s.%N)
bench overload --url grpc://127.0.0.1:8001 --batch_size 1 --concurrency 256 --num_iters $((OVERLOAD_SECONDS * 9000))
echo "    overload run took $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
stop_server

echo "### summary ($OUT/serve.csv)"
python3 - "$OUT/serve.csv" <<'EOF'
import csv, sys
f = lambda r, k, s=1: ("%.4g" % (float(r[k]) * s)) if r.get(k) else "-"
print("| experiment | engine | bs | mode | img/s | avg ms | p50 ms | p99 ms |")
print("|---|---|---|---|---|---|---|---|")
for r in csv.DictReader(open(sys.argv[1])):
    print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (r["experiment"], r["engine"], r["batch_size"], r["mode"],
          f(r, "throughput"), f(r, "average_latency", 1e3), f(r, "p50_latency", 1e3), f(r, "p99_latency", 1e3)))
EOF
