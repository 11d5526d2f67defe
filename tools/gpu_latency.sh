#!/usr/bin/env bash
# Latency benchmarks on a GPU machine: batch-1 requests at concurrency 1,
# in process (`goinfer bench`, several fresh processes, since each autotunes
# anew) and through `goinfer serve` over loopback gRPC and HTTP, plus 64
# concurrent clients; the server runs with --pprof and a CPU profile and an
# execution trace of it are taken during the gRPC runs. With the test
# binaries present it first runs the Go micro-benchmarks behind the design
# (goroutine hand-offs, the server's own protocol cost).
#
# Usage (on the GPU machine, from the repo root, with prebuilt binaries):
#   CGO_ENABLED=0 go build -o .bin/goinfer ./cmd/goinfer
#   CGO_ENABLED=0 go test -c -o .bin/backend.test ./internal/backend   # optional
#   CGO_ENABLED=0 go test -c -o .bin/server.test ./internal/server     # optional
#   GOINFER=.bin/goinfer OUT=/tmp/out RUNS=5 tools/gpu_latency.sh [sections...]
# Sections: micro inprocess serve (default: all), and not by default:
# protocol (batch 1, one in flight, tensors in the messages: HTTP with the
# lean and the net/http client, gRPC with the default transport sizes and
# with gRPC-Go's own flow-control windows, both with FP16 tensors (serve
# --input_dtype fp16), $RUNS rounds; with
# .bin/server.test, the protocol micro-benchmarks at 1, 2 and 16 cores),
# breakdown (the server's own time per request from its /metrics, against
# what the client measures),
# uint8 (the server's engine takes raw pixels, clients send UINT8: a quarter
# of the bytes), shm (tensors through system shared memory: serve
# --allow_shared_memory, bench --shared_memory system) and overload (256 clients against a queue of 64 images for
# $OVERLOAD_SECONDS).
# Rows go to $OUT/latency.csv.
set -uo pipefail
B=${GOINFER:-.bin/goinfer}
OUT=${OUT:-/tmp/out}
RUNS=${RUNS:-5}
ITERS=${ITERS:-2000}
CKPT=${CKPT:-/tmp/models/resnet18-tv.pth}
mkdir -p "$OUT" "$(dirname "$CKPT")"
OVERLOAD_SECONDS=${OVERLOAD_SECONDS:-20}
sections=${*:-micro inprocess serve}
has() { [[ " $sections " == *" $1 "* ]]; }
log() { printf '\n### %s\n' "$*"; }
[ -f "$CKPT" ] || python3 -c "
import torch, torchvision; torch.manual_seed(0)
torch.save(torchvision.models.resnet18().state_dict(), '$CKPT')"

bench() { # experiment, then flags
  local exp=$1; shift
  echo "+ goinfer bench --experiment $exp $*"
  $B bench --results_dir "$OUT" --output_file latency.csv --experiment "$exp" "$@" >"$OUT/last.log" 2>&1 || { echo "    FAILED"; tail -5 "$OUT/last.log"; }
  grep -E "^(Average latency|p50|Throughput|Server|Refused|Errors)" "$OUT/last.log" | sed 's/^/    /'
}

if has micro; then
  if [ -x .bin/backend.test ]; then
    log "goroutine hand-offs through four stages and back (BenchmarkHandoff)"
    .bin/backend.test -test.run '^$' -test.bench Handoff -test.benchtime 20000x | grep Benchmark
  fi
  if [ -x .bin/server.test ]; then
    log "the server's own cost: 250x250 FP32 requests answered at once (BenchmarkProtocol)"
    .bin/server.test -test.run '^$' -test.bench 'Protocol|GRPCBuffers' -test.benchtime 2000x | grep Benchmark
  fi
fi

if has inprocess; then
  log "in process: batch 1, concurrency 1, $RUNS fresh processes of $ITERS requests"
  for r in $(seq "$RUNS"); do
    bench "inprocess_c1_run$r" --checkpoint "$CKPT" --batch_size 1 --concurrency 1 --num_iters "$ITERS"
  done
  bench inprocess_c1_trace --checkpoint "$CKPT" --batch_size 1 --concurrency 1 --num_iters 1000 \
    --profile --profile_file "$OUT/trace-bs1-c1.json"
fi

start_server() { # log file (without .log), then serve flags
  local log=$1.log; shift
  $B serve --checkpoint "$CKPT" "$@" >"$log" 2>&1 &
  SERVER=$!
  for _ in $(seq 300); do curl -sf localhost:8000/v2/health/ready >/dev/null && return 0; sleep 0.1; done
  echo "server did not become ready"; tail -5 "$log"; return 1
}
stop_server() {
  grep -E "VmHWM" /proc/$SERVER/status | sed 's/^/    server /'
  kill -TERM $SERVER; wait $SERVER; echo "    server exit status: $?"
}

if has serve; then
  log "goinfer serve over loopback (defaults), --pprof on 127.0.0.1:6060"
  start_server "$OUT/serve" --pprof 127.0.0.1:6060
  (sleep 1; curl -s -o "$OUT/serve-grpc-c1.trace" "localhost:6060/debug/pprof/trace?seconds=1") &
  PROF=$!
  bench grpc_c1 --url grpc://127.0.0.1:8001 --batch_size 1 --concurrency 1 --num_iters "$ITERS"
  wait $PROF
  bench http_c1 --url http://127.0.0.1:8000 --batch_size 1 --concurrency 1 --num_iters "$ITERS"
  for r in $(seq 2 "$RUNS"); do
    bench "grpc_c1_run$r" --url grpc://127.0.0.1:8001 --batch_size 1 --concurrency 1 --num_iters "$ITERS"
    bench "http_c1_run$r" --url http://127.0.0.1:8000 --batch_size 1 --concurrency 1 --num_iters "$ITERS"
  done
  (sleep 1; curl -s -o "$OUT/serve-grpc-c64.pprof" "localhost:6060/debug/pprof/profile?seconds=2") &
  PROF=$!
  bench grpc_c64 --url grpc://127.0.0.1:8001 --batch_size 1 --concurrency 64 --num_iters 40000
  wait $PROF
  bench http_c64 --url http://127.0.0.1:8000 --batch_size 1 --concurrency 64 --num_iters 40000
  for k in 4 64; do
    bench grpc_c64_conns$k --url grpc://127.0.0.1:8001 --batch_size 1 --concurrency 64 --num_iters 40000 --connections $k
  done
  stop_server
  log "the same without the pinned request pool (--pinned_memory_pool_bytes 0)"
  start_server "$OUT/serve_nopin" --pinned_memory_pool_bytes 0
  bench grpc_c1_nopin --url grpc://127.0.0.1:8001 --batch_size 1 --concurrency 1 --num_iters "$ITERS"
  bench http_c1_nopin --url http://127.0.0.1:8000 --batch_size 1 --concurrency 1 --num_iters "$ITERS"
  bench grpc_c64_nopin --url grpc://127.0.0.1:8001 --batch_size 1 --concurrency 64 --num_iters 40000
  stop_server
fi

if has protocol; then
  if [ -x .bin/server.test ]; then
    log "the protocols' own cost at 1, 2 and 16 cores: 250x250 FP32 answered at once, one in flight"
    .bin/server.test -test.run '^$' -test.bench 'Protocol$/^(http|grpc)$/^c1$|ProtocolDType|HTTPClient/.*/c1$|GRPCWindow/.*/c1$|RoundTripFloor' \
      -test.cpu 1,2,16 -test.benchtime 2000x | grep Benchmark
  fi
  c1="--batch_size 1 --concurrency 1 --num_iters $ITERS"
  log "batch 1, one in flight, tensors in the messages: $RUNS rounds on one server (defaults)"
  start_server "$OUT/serve_protocol"
  for r in $(seq "$RUNS"); do
    bench "http_lean_c1_run$r" --url http://127.0.0.1:8000 $c1 --http_client lean
    bench "http_nethttp_c1_run$r" --url http://127.0.0.1:8000 $c1 --http_client nethttp
    bench "grpc_c1_run$r" --url grpc://127.0.0.1:8001 $c1
  done
  stop_server
  log "FP16 tensors in the messages (375 KB): serve --input_dtype fp16, clients --input_dtype fp16"
  start_server "$OUT/serve_protocol_fp16" --input_dtype fp16
  for r in $(seq "$RUNS"); do
    bench "grpc_c1_fp16_run$r" --url grpc://127.0.0.1:8001 $c1 --input_dtype fp16
    bench "http_lean_c1_fp16_run$r" --url http://127.0.0.1:8000 $c1 --input_dtype fp16
  done
  stop_server
  log "gRPC with gRPC-Go's own flow-control windows at both ends (--grpc_window_bytes 0)"
  start_server "$OUT/serve_protocol_window0" --grpc_window_bytes 0
  for r in $(seq "$RUNS"); do
    bench "grpc_c1_window0_run$r" --url grpc://127.0.0.1:8001 $c1 --grpc_window_bytes 0
  done
  stop_server
fi

server_ms() { # protocol: cumulative seconds and count of goinfer_request_duration_seconds
  curl -s localhost:8000/metrics | awk -v p="protocol=\"$1\"" '
    /^goinfer_request_duration_seconds_sum/ && index($1, p) {s=$2}
    /^goinfer_request_duration_seconds_count/ && index($1, p) {c=$2}
    END {print s+0, c+0}'
}
breakdown() { # experiment, protocol, then bench flags
  local exp=$1 proto=$2; shift 2
  read -r s0 c0 < <(server_ms "$proto")
  bench "$exp" "$@"
  read -r s1 c1 < <(server_ms "$proto")
  python3 -c "
s0, c0, s1, c1 = $s0, $c0, $s1, $c1
print('    server time per request (handler entry to answer, mean): %.3f ms over %d requests' % ((s1 - s0) / max(c1 - c0, 1) * 1e3, c1 - c0))"
}

if has breakdown; then
  log "where the time goes: the server's own time per request (/metrics) against the client's"
  start_server "$OUT/serve_breakdown"
  breakdown grpc_c1_bd grpc --url grpc://127.0.0.1:8001 --batch_size 1 --concurrency 1 --num_iters "$ITERS"
  breakdown http_c1_bd http --url http://127.0.0.1:8000 --batch_size 1 --concurrency 1 --num_iters "$ITERS"
  breakdown grpc_c64_bd grpc --url grpc://127.0.0.1:8001 --batch_size 1 --concurrency 64 --num_iters 40000
  breakdown http_c64_bd http --url http://127.0.0.1:8000 --batch_size 1 --concurrency 64 --num_iters 40000
  stop_server
fi

if has uint8; then
  log "UINT8 pixels: goinfer serve --input_dtype uint8, clients send UINT8 (188 KB per image)"
  start_server "$OUT/serve_u8" --input_dtype uint8
  for r in $(seq "$RUNS"); do
    bench "grpc_c1_u8_run$r" --url grpc://127.0.0.1:8001 --batch_size 1 --concurrency 1 --num_iters "$ITERS" --input_dtype uint8
    bench "http_c1_u8_run$r" --url http://127.0.0.1:8000 --batch_size 1 --concurrency 1 --num_iters "$ITERS" --input_dtype uint8
  done
  bench grpc_c64_u8 --url grpc://127.0.0.1:8001 --batch_size 1 --concurrency 64 --num_iters 40000 --input_dtype uint8
  stop_server
fi

if has shm; then
  log "system shared memory: serve --allow_shared_memory, clients --shared_memory system (FP32 tensors)"
  start_server "$OUT/serve_shm" --allow_shared_memory
  # The same image through shared memory (the GPU DMAs from the client's
  # page-locked region) and in the request body must give the same logits.
  python3 - <<'PY'
import json, os, struct, urllib.request, random
n = 3 * 250 * 250 * 4
random.seed(1)
img = struct.pack("<%df" % (n // 4), *[random.gauss(0, 1) for _ in range(n // 4)])
path = "/dev/shm/goinfer-gpucheck"
with open(path, "wb") as f:
    f.write(img + bytes(4000))
def post(url, body, hdr=None):
    req = urllib.request.Request("http://127.0.0.1:8000" + url, data=body, headers=hdr or {"Content-Type": "application/json"})
    return urllib.request.urlopen(req).read()
model = json.loads(post("/v2/repository/index", b"{}"))[0]["name"]
try:
    post("/v2/systemsharedmemory/region/check/register", json.dumps({"key": "/goinfer-gpucheck", "byte_size": n + 4000}).encode())
    shm = lambda off, size: {"shared_memory_region": "check", "shared_memory_offset": off, "shared_memory_byte_size": size}
    for _ in range(2):  # the first request page-locks the region
        post("/v2/models/%s/infer" % model, json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, 250, 250], "parameters": shm(0, n)}],
            "outputs": [{"name": "logits", "parameters": shm(n, 4000)}]}).encode())
    with open(path, "rb") as f:
        f.seek(n); a = struct.unpack("<1000f", f.read(4000))
    hdr = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, 250, 250], "parameters": {"binary_data_size": n}}]})
    r = json.loads(post("/v2/models/%s/infer" % model, hdr.encode() + img, {"Inference-Header-Content-Length": str(len(hdr)), "Content-Type": "application/octet-stream"}))
    b = r["outputs"][0]["data"]
    print("    shared memory vs request body: max |diff| of 1000 logits = %.3g (logits ~%.3g)" % (max(abs(x - y) for x, y in zip(a, b)), max(abs(x) for x in b)))
    post("/v2/systemsharedmemory/region/check/unregister", b"")
finally:
    os.remove(path)
PY
  for r in $(seq "$RUNS"); do
    bench "grpc_c1_shm_run$r" --url grpc://127.0.0.1:8001 --batch_size 1 --concurrency 1 --num_iters "$ITERS" --shared_memory system
    bench "http_c1_shm_run$r" --url http://127.0.0.1:8000 --batch_size 1 --concurrency 1 --num_iters "$ITERS" --shared_memory system
    bench "grpc_c1_run$r" --url grpc://127.0.0.1:8001 --batch_size 1 --concurrency 1 --num_iters "$ITERS"
    bench "http_c1_run$r" --url http://127.0.0.1:8000 --batch_size 1 --concurrency 1 --num_iters "$ITERS"
  done
  # The gauges while the clients' regions are registered.
  (sleep 1; curl -s localhost:8000/metrics | grep -E '^goinfer_shared_memory_(regions|pinned_bytes)' >"$OUT/shm_gauges.txt") &
  GAUGES=$!
  bench grpc_c64_shm --url grpc://127.0.0.1:8001 --batch_size 1 --concurrency 64 --num_iters 40000 --shared_memory system
  wait $GAUGES
  sed 's/^/    during the run: /' "$OUT/shm_gauges.txt"
  bench http_c64_shm --url http://127.0.0.1:8000 --batch_size 1 --concurrency 64 --num_iters 40000 --shared_memory system
  echo "    objects left in /dev/shm: $(ls /dev/shm | grep -c '^goinfer-' || true)"
  stop_server
fi

if has overload; then
  log "overload: queue of 64 images, 256 clients in flight for ~${OVERLOAD_SECONDS} s"
  start_server "$OUT/serve_overload" --max_queue 64
  t0=$(date +%s.%N)
  bench overload --url grpc://127.0.0.1:8001 --batch_size 1 --concurrency 256 --num_iters $((OVERLOAD_SECONDS * 12000))
  echo "    took $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  stop_server
fi

log "summary ($OUT/latency.csv)"
python3 - "$OUT/latency.csv" <<'EOF'
import csv, sys
f = lambda r, k, s=1: ("%.4g" % (float(r[k]) * s)) if r.get(k) else "-"
print("| experiment | bs | mode | img/s | min ms | p50 ms | p90 ms | p99 ms |")
print("|---|---|---|---|---|---|---|---|")
for r in csv.DictReader(open(sys.argv[1])):
    print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (r["experiment"], r["batch_size"], r["mode"], f(r, "throughput"),
          f(r, "min_latency", 1e3), f(r, "p50_latency", 1e3), f(r, "p90_latency", 1e3), f(r, "p99_latency", 1e3)))
EOF
