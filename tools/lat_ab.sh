#!/usr/bin/env bash
# Batch-1 latency A/B between two goinfer builds on a GPU host (issue #16):
# `bench --url` (batch 1, one in flight, 250x250 FP32 tensors in the
# messages) against BASE's and NEW's servers, which run side by side on
# their own ports so that every round alternates them on the same machine
# state (one autotuning shared through --tuning_cache, answers compared
# by lat_check.py): defaults, then both ends busy polling (serve --busy_poll
# $SERVER_POLL, bench --busy_poll $CLIENT_POLL), 3 rounds each; NEW's
# transport floor (BenchmarkTransportFloor: 750 KB up, 4 KB
# down over gRPC-Go and HTTP/1.1 with no goinfer code).
# Summary table of p50/p99 at the end.
#
# Usage from the repo root, with prebuilt binaries:
#   BASE=.bin/goinfer-base NEW=.bin/goinfer TEST=.bin/floor.test OUT=/tmp/out tools/lat_ab.sh
#
# IMAGE_SIZE sets the served and sent image size (224: 602 KB FP32
# tensors, the issue's workload; default 250, the reference's).
# BREAKDOWN=1 starts NEW's servers with --latency_breakdown and prints,
# after each of NEW's runs, the server's per-step medians
# (GET /debug/latency?reset=1). NEW_H2=1 adds a NEW server on 8030/8031
# with --grpc_transport h2grpc, benched each round with gRPC-Go's client
# (new_h2srv_grpc) and with the h2grpc client (new_h2_h2_grpc). POLL=0
# skips the busy-polling section; SERVE_FLAGS are added to every server
# (e.g. "--engine cpu" for a dry run without a GPU). POLL_ROUNDS: rounds
# of the polling section (default ROUNDS). The script's own elapsed time
# is printed at the end.
set -uo pipefail
BASE=${BASE:-.bin/goinfer-base}
NEW=${NEW:-.bin/goinfer}
TEST=${TEST:-}  # the transportfloor test binary
OUT=${OUT:-/tmp/out}
ITERS=${ITERS:-1000}
ROUNDS=${ROUNDS:-3}
SERVER_POLL=${SERVER_POLL:-200us}
CLIENT_POLL=${CLIENT_POLL:-2ms}
CKPT=${CKPT:-/tmp/models/resnet18-tv.pth}
export IMAGE_SIZE=${IMAGE_SIZE:-250}
BREAKDOWN=${BREAKDOWN:-0}
NEW_H2=${NEW_H2:-0}
POLL=${POLL:-1}
SERVE_FLAGS=${SERVE_FLAGS:-}
NEW_BD_FLAGS=""
[ "$BREAKDOWN" = 1 ] && NEW_BD_FLAGS="--latency_breakdown"
# Extra flags for NEW's servers (e.g. "--grpc_transport h2grpc") and for
# NEW's gRPC benches; NEW_GRPC_ALT, if set, adds a second NEW gRPC bench per
# round with those flags (e.g. "--grpc_transport h2grpc").
NEW_SERVE_FLAGS=${NEW_SERVE_FLAGS:-}
NEW_GRPC_FLAGS=${NEW_GRPC_FLAGS:-}
NEW_GRPC_ALT=${NEW_GRPC_ALT:-}
# The floor cases: gRPC-Go and HTTP/1.1, and the HTTP/2 transports that
# can beat gRPC-Go (net/http's h2c is slower and left out).
FLOOR_BENCH=${FLOOR_BENCH:-'TransportFloor$|TransportFloorH2/(grpcgo|h2grpc|raw)-server/(grpcgo|h2grpc|raw)-client'}
mkdir -p "$OUT" "$(dirname "$CKPT")"
log() { printf '\n### %s\n' "$*"; }
PY=${PY:-python3}
[ -z "${PY_SET:-}" ] && [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
[ -f "$CKPT" ] || $PY -c "
import torch, torchvision; torch.manual_seed(0)
torch.save(torchvision.models.resnet18().state_dict(), '$CKPT')" &
CKPT_JOB=$!

log "host"
uname -r; nproc; grep -m1 'model name' /proc/cpuinfo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null

if [ -n "$TEST" ]; then
  log "transport floor (the transportfloor test binary, -test.cpu $(nproc))"
  $TEST -test.run XXX -test.bench "$FLOOR_BENCH" -test.cpu "$(nproc)" -test.count 3 -test.benchtime ${BENCHTIME:-2000x} 2>&1 | grep -E 'p50|FAIL|panic'
fi
wait $CKPT_JOB

declare -A PIDS
start() { # name binary http-port grpc-port flags...
  local name=$1 bin=$2 hp=$3 gp=$4; shift 4
  echo "+ $name: ${bin##*/} serve --http 127.0.0.1:$hp --grpc 127.0.0.1:$gp $*"
  $bin serve --checkpoint "$CKPT" --image_size "$IMAGE_SIZE" --http 127.0.0.1:$hp --grpc 127.0.0.1:$gp $SERVE_FLAGS "$@" >"$OUT/serve-$name.log" 2>&1 &
  PIDS[$name]=$!
}
ready() { # http port
  for _ in $(seq 900); do curl -sf localhost:$1/v2/health/ready >/dev/null && return 0; sleep 0.1; done
  echo "server on $1 did not become ready"; return 1
}
stop_all() { for n in "${!PIDS[@]}"; do kill -TERM ${PIDS[$n]}; wait ${PIDS[$n]} 2>/dev/null; done; PIDS=(); }
bench() { # experiment binary url flags...
  local exp=$1 bin=$2 url=$3; shift 3
  echo "+ $exp: ${bin##*/} bench --url $url $*"
  $bin bench --results_dir "$OUT" --output_file latency.csv --experiment "$exp" --batch_size 1 --concurrency 1 --num_iters "$ITERS" --image_size "$IMAGE_SIZE" --url "$url" "$@" >"$OUT/last.log" 2>&1 || { echo "    FAILED"; tail -5 "$OUT/last.log"; }
  grep -E "^(p50|Server time|Client time|Errors)" "$OUT/last.log" | sed 's/^/    /'
}
breakdown() { # http port of a NEW server: its per-step medians since the last call
  [ "$BREAKDOWN" = 1 ] && curl -sf "localhost:$1/debug/latency?reset=1" | sed 's/^/    /'
}

# One autotuning for all servers: BASE's first start measures and fills
# the cache, the others read it, so that every server runs the same
# kernels (servers that autotune side by side can pick different ones).
TC=$OUT/tuning-cache
log "defaults: BASE on 8000/8001, NEW on 8010/8011 (and BASE --copy_streams=false on 8020), $ROUNDS rounds"
start base "$BASE" 8000 8001 --tuning_cache $TC
ready 8000
start new "$NEW" 8010 8011 --tuning_cache $TC $NEW_SERVE_FLAGS $NEW_BD_FLAGS
PORTS="8000 8010"
if [ "${ONESTREAM:-1}" = 1 ]; then
  start base_onestream "$BASE" 8020 8021 --copy_streams=false --tuning_cache $TC
  PORTS="$PORTS 8020"; ready 8020
fi
if [ "$NEW_H2" = 1 ]; then
  start new_h2 "$NEW" 8030 8031 --tuning_cache $TC --grpc_transport h2grpc $NEW_BD_FLAGS
  PORTS="$PORTS 8030"; ready 8030
fi
ready 8010
log "same answers: the other servers' logits vs BASE's (ports $PORTS)"
python3 "$(dirname "$0")/lat_check.py" $PORTS
breakdown 8010 >/dev/null; [ "$NEW_H2" = 1 ] && breakdown 8030 >/dev/null
for r in $(seq $ROUNDS); do
  bench base_http_r$r "$BASE" http://127.0.0.1:8000
  bench new_http_r$r "$NEW" http://127.0.0.1:8010; breakdown 8010
  [ "${ONESTREAM:-1}" = 1 ] && bench base_onestream_http_r$r "$BASE" http://127.0.0.1:8020
  bench base_grpc_r$r "$BASE" grpc://127.0.0.1:8001
  bench new_grpc_r$r "$NEW" grpc://127.0.0.1:8011 $NEW_GRPC_FLAGS; breakdown 8010
  [ -n "$NEW_GRPC_ALT" ] && { bench new_grpc_alt_r$r "$NEW" grpc://127.0.0.1:8011 $NEW_GRPC_ALT; breakdown 8010; }
  if [ "$NEW_H2" = 1 ]; then
    bench new_h2srv_grpc_r$r "$NEW" grpc://127.0.0.1:8031; breakdown 8030
    bench new_h2_h2_grpc_r$r "$NEW" grpc://127.0.0.1:8031 --grpc_transport h2grpc; breakdown 8030
  fi
done
stop_all
[ "$POLL" = 1 ] || SKIP_POLL=1

if [ -z "${SKIP_POLL:-}" ]; then
log "busy polling at both ends: serve --busy_poll $SERVER_POLL, bench --busy_poll $CLIENT_POLL, ${POLL_ROUNDS:-$ROUNDS} rounds"
start base "$BASE" 8000 8001 --busy_poll $SERVER_POLL --tuning_cache $TC
start new "$NEW" 8010 8011 --busy_poll $SERVER_POLL --tuning_cache $TC $NEW_SERVE_FLAGS $NEW_BD_FLAGS
[ "$NEW_H2" = 1 ] && { start new_h2 "$NEW" 8030 8031 --busy_poll $SERVER_POLL --tuning_cache $TC --grpc_transport h2grpc $NEW_BD_FLAGS; ready 8030; breakdown 8030 >/dev/null; }
ready 8000 && ready 8010
for r in $(seq ${POLL_ROUNDS:-$ROUNDS}); do
  bench base_poll_http_r$r "$BASE" http://127.0.0.1:8000 --busy_poll $CLIENT_POLL
  bench new_poll_http_r$r "$NEW" http://127.0.0.1:8010 --busy_poll $CLIENT_POLL; breakdown 8010
  bench base_poll_grpc_r$r "$BASE" grpc://127.0.0.1:8001 --busy_poll $CLIENT_POLL
  bench new_poll_grpc_r$r "$NEW" grpc://127.0.0.1:8011 --busy_poll $CLIENT_POLL $NEW_GRPC_FLAGS; breakdown 8010
  [ -n "$NEW_GRPC_ALT" ] && bench new_poll_grpc_alt_r$r "$NEW" grpc://127.0.0.1:8011 --busy_poll $CLIENT_POLL $NEW_GRPC_ALT
  [ "$NEW_H2" = 1 ] && { bench new_poll_h2_h2_grpc_r$r "$NEW" grpc://127.0.0.1:8031 --busy_poll $CLIENT_POLL --grpc_transport h2grpc; breakdown 8030; }
done
stop_all
fi

log "summary ($OUT/latency.csv)"
python3 - "$OUT/latency.csv" <<'PY'
import csv, sys, re, statistics
rows = list(csv.DictReader(open(sys.argv[1])))
ms = lambda v: "%.3f" % (float(v) * 1e3)
print("| experiment | p50 ms | p90 ms | p99 ms |")
print("|---|---|---|---|")
groups = {}
for r in rows:
    print("| %s | %s | %s | %s |" % (r["experiment"], ms(r["p50_latency"]), ms(r["p90_latency"]), ms(r["p99_latency"])))
    groups.setdefault(re.sub(r"_r\d+$", "", r["experiment"]), []).append(r)
print("\n| configuration | p50 ms per round | median p50 | median p99 |")
print("|---|---|---|---|")
for g, rs in groups.items():
    p50 = [float(r["p50_latency"]) for r in rs]
    p99 = [float(r["p99_latency"]) for r in rs]
    print("| %s | %s | %s | %s |" % (g, " / ".join(ms(v) for v in p50), ms(statistics.median(p50)), ms(statistics.median(p99))))
PY
echo "elapsed ${SECONDS}s"
