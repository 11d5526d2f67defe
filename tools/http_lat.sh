#!/usr/bin/env bash
# Where batch-1 HTTP/gRPC latency goes between two processes on a GPU host
# (issue #16), and what busy polling and socket buffers change. Runs
# `goinfer bench --url` (batch 1, one in flight, 250x250 FP32 tensors in the
# messages) against `goinfer serve`, printing with each run the server's own
# phases per request (goinfer_request_phase_seconds_total from /metrics:
# read = head parsed to body received, infer = batcher + device, reply) and
# the client's (sending, waiting for the answer's first byte).
#
# Usage, on the GPU machine from the repo root, with prebuilt binaries:
#   GOINFER=.bin/goinfer MAIN=.bin/goinfer-main OUT=/tmp/out tools/http_lat.sh [sections...]
# Sections: env (host facts), main (MAIN's server and client, as a baseline,
# then the same with every other CPU kept busy by nice 19 spinners: tells
# whether idle-CPU wake-ups cost), phases (GOINFER's server: phases and Go
# execution traces of server and client), poll (busy polling on either
# side, socket buffers), and not by default: base (MAIN, one run of each
# protocol), profile (the server's CPU profile during an HTTP run),
# affinity (server and client on separate halves of the CPUs), poll2
# (longer server polling, GOMAXPROCS=4), final (both ends polling, 3
# rounds). Default: env main phases poll.
set -uo pipefail
B=${GOINFER:-.bin/goinfer}
MAIN=${MAIN:-.bin/goinfer-main}
OUT=${OUT:-/tmp/out}
ITERS=${ITERS:-1000}
CKPT=${CKPT:-/tmp/models/resnet18-tv.pth}
mkdir -p "$OUT" "$(dirname "$CKPT")"
sections=${*:-env main phases poll}
has() { [[ " $sections " == *" $1 "* ]]; }
log() { printf '\n### %s\n' "$*"; }
PY=python3
[ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
[ -f "$CKPT" ] || $PY -c "
import torch, torchvision; torch.manual_seed(0)
torch.save(torchvision.models.resnet18().state_dict(), '$CKPT')"

if has env; then
  log "host"
  uname -r; nproc; grep -m1 'model name' /proc/cpuinfo; grep -c hypervisor /proc/cpuinfo | sed 's/^/cpus with hypervisor flag: /'
  echo "cpuidle driver: $(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo none)"
  for s in /sys/devices/system/cpu/cpu0/cpuidle/state*; do [ -d "$s" ] && echo "  $(cat $s/name) latency $(cat $s/latency) us"; done
  echo "governor: $(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo none)"
  echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
  lscpu 2>/dev/null | grep -E "^(Thread|Core|Socket|NUMA node\(s\)|L3|L2)" 
  echo "cpu0 shares its LLC with: $(cat /sys/devices/system/cpu/cpu0/cache/index3/shared_cpu_list 2>/dev/null || echo ?)"
  for k in kernel/sched_autogroup_enabled kernel/preempt net/ipv4/tcp_rmem net/ipv4/tcp_wmem net/core/rmem_max net/core/wmem_max net/core/busy_poll; do
    echo "$k: $(cat /proc/sys/$k 2>/dev/null || echo -)"; done
fi

# bench prints its latency line and our phase lines; server phases come
# from /metrics around the run.
phases() { curl -s localhost:8000/metrics | awk '
  /^goinfer_request_phase_seconds_total/ && /protocol="http"/ { match($0, /phase="[a-z]+"/); p[substr($0, RSTART+7, RLENGTH-8)] = $2 }
  /^goinfer_request_duration_seconds_count/ && /protocol="http"/ { c = $2 }
  END { printf "%s %s %s %s\n", p["read"]+0, p["infer"]+0, p["reply"]+0, c+0 }'; }
bench() { # binary, experiment, then flags
  local bin=$1 exp=$2; shift 2
  local before after
  before=$(phases)
  echo "+ ${bin##*/} bench --experiment $exp $*"
  $bin bench --results_dir "$OUT" --output_file latency.csv --experiment "$exp" --batch_size 1 --concurrency 1 --num_iters "$ITERS" "$@" >"$OUT/last.log" 2>&1 || { echo "    FAILED"; tail -5 "$OUT/last.log"; }
  grep -E "^(p50|Server time|Client time|Errors)" "$OUT/last.log" | sed 's/^/    /'
  after=$(phases)
  python3 -c "
b, a = [float(x) for x in '$before'.split()], [float(x) for x in '$after'.split()]
n = a[3] - b[3]
if n > 0 and a[0] > b[0]:
    print('    server phases per HTTP request: read %.3f ms, infer %.3f ms, reply %.3f ms (%d requests)' % tuple([(a[i] - b[i]) / n * 1e3 for i in range(3)] + [n]))"
}
start_server() { # binary, log name, then serve flags
  local bin=$1 log=$OUT/$2.log; shift 2
  echo "+ ${bin##*/} serve $*"
  $bin serve --checkpoint "$CKPT" "$@" >"$log" 2>&1 &
  SERVER=$!
  for _ in $(seq 600); do curl -sf localhost:8000/v2/health/ready >/dev/null && return 0; sleep 0.1; done
  echo "server did not become ready"; tail -5 "$log"; return 1
}
stop_server() { kill -TERM $SERVER; wait $SERVER; }
spinners() { # start nice 19 busy loops on all CPUs but two
  SPIN=()
  for _ in $(seq $(( $(nproc) - 2 ))); do nice -n 19 bash -c 'while :; do :; done' & SPIN+=($!); done
}
unspin() { for p in "${SPIN[@]}"; do kill $p; done; wait "${SPIN[@]}" 2>/dev/null; }

if has base; then
  log "baseline on this machine: MAIN's server and client (defaults)"
  start_server "$MAIN" serve_base
  bench "$MAIN" base_http --url http://127.0.0.1:8000
  bench "$MAIN" base_grpc --url grpc://127.0.0.1:8001
  stop_server
fi

if has main; then
  log "baseline: MAIN's server and client (defaults)"
  start_server "$MAIN" serve_main
  for r in 1 2; do
    bench "$MAIN" "main_http_r$r" --url http://127.0.0.1:8000
    bench "$MAIN" "main_grpc_r$r" --url grpc://127.0.0.1:8001
  done
  log "the same while nice 19 busy loops keep $(( $(nproc) - 2 )) CPUs from idling"
  spinners
  bench "$MAIN" main_http_spinners --url http://127.0.0.1:8000
  bench "$MAIN" main_grpc_spinners --url grpc://127.0.0.1:8001
  unspin
  log "client with GOMAXPROCS=1, then 2"
  GOMAXPROCS=1 bench "$MAIN" main_http_client_procs1 --url http://127.0.0.1:8000
  GOMAXPROCS=2 bench "$MAIN" main_http_client_procs2 --url http://127.0.0.1:8000
  stop_server
fi

if has phases; then
  log "phases: GOINFER's server and client (defaults), Go execution traces of both"
  start_server "$B" serve_phases --pprof 127.0.0.1:6060
  bench "$B" phases_http --url http://127.0.0.1:8000
  bench "$B" phases_grpc --url grpc://127.0.0.1:8001
  (sleep 0.5; curl -s -o "$OUT/server-http.trace" "localhost:6060/debug/pprof/trace?seconds=0.5") &
  TR=$!
  bench "$B" phases_http_traced --url http://127.0.0.1:8000 --num_iters 2000 --exec_trace "$OUT/client-http.trace"
  wait $TR
  stop_server
fi

if has poll; then
  log "busy polling and socket buffers (GOINFER)"
  start_server "$B" serve_poll
  bench "$B" default_http --url http://127.0.0.1:8000
  bench "$B" clientpoll_http --url http://127.0.0.1:8000 --busy_poll 2ms
  bench "$B" clientpoll_grpc --url grpc://127.0.0.1:8001 --busy_poll 2ms
  bench "$B" clientbuf_http --url http://127.0.0.1:8000 --socket_buffer_bytes 4194304
  stop_server
  for spin in 50us 200us; do
    start_server "$B" serve_poll_$spin --busy_poll $spin
    bench "$B" serverpoll${spin}_http --url http://127.0.0.1:8000
    bench "$B" serverpoll${spin}_grpc --url grpc://127.0.0.1:8001
    bench "$B" bothpoll${spin}_http --url http://127.0.0.1:8000 --busy_poll 2ms
    bench "$B" bothpoll${spin}_grpc --url grpc://127.0.0.1:8001 --busy_poll 2ms
    stop_server
  done
  start_server "$B" serve_buf --socket_buffer_bytes 4194304
  bench "$B" bothbuf_http --url http://127.0.0.1:8000 --socket_buffer_bytes 4194304
  bench "$B" bothbuf_grpc --url grpc://127.0.0.1:8001 --socket_buffer_bytes 4194304
  stop_server
fi

if has profile; then
  log "the server's CPU profile during an HTTP run (defaults)"
  start_server "$B" serve_profile --pprof 127.0.0.1:6060
  bench "$B" prof_warm --url http://127.0.0.1:8000 --num_iters 300
  (sleep 0.3; curl -s -o "$OUT/server-http.pprof" "localhost:6060/debug/pprof/profile?seconds=2") &
  PR=$!
  bench "$B" prof_http --url http://127.0.0.1:8000 --num_iters 4000
  wait $PR
  stop_server
fi

if has affinity; then
  # Server on CPUs 0-7, client on 8-15: neither's wake-ups can land on
  # the other's CPU.
  half=$(( $(nproc) / 2 ))
  S="0-$((half - 1))" C="$half-$(( $(nproc) - 1 ))"
  log "server pinned to CPUs $S, client to $C"
  taskset -c $S true || { echo "no taskset"; }
  start_server "taskset -c $S $B" serve_aff
  bench "taskset -c $C $B" aff_http --url http://127.0.0.1:8000
  bench "taskset -c $C $B" aff_grpc --url grpc://127.0.0.1:8001
  bench "taskset -c $C $B" aff_clientpoll_http --url http://127.0.0.1:8000 --busy_poll 2ms
  stop_server
  start_server "taskset -c $S $B" serve_aff_poll --busy_poll 1ms
  bench "taskset -c $C $B" aff_bothpoll_http --url http://127.0.0.1:8000 --busy_poll 2ms
  bench "taskset -c $C $B" aff_bothpoll_grpc --url grpc://127.0.0.1:8001 --busy_poll 2ms
  stop_server
fi

if has poll2; then
  log "server --busy_poll 1ms, unpinned; GOMAXPROCS=4 server"
  start_server "$B" serve_poll1ms --busy_poll 1ms
  bench "$B" serverpoll1ms_http --url http://127.0.0.1:8000
  bench "$B" bothpoll1ms_http --url http://127.0.0.1:8000 --busy_poll 2ms
  bench "$B" bothpoll1ms_grpc --url grpc://127.0.0.1:8001 --busy_poll 2ms
  stop_server
  GOMAXPROCS=4 start_server "$B" serve_poll1ms_procs4 --busy_poll 1ms
  bench "$B" procs4_bothpoll1ms_http --url http://127.0.0.1:8000 --busy_poll 2ms
  bench "$B" procs4_bothpoll1ms_grpc --url grpc://127.0.0.1:8001 --busy_poll 2ms
  stop_server
fi

if has final; then
  log "busy polling at both ends (serve --busy_poll ${SERVER_POLL:=200us}, bench --busy_poll ${CLIENT_POLL:=2ms}), 3 rounds"
  start_server "$B" serve_final --busy_poll $SERVER_POLL
  for r in 1 2 3; do
    bench "$B" final_http_r$r --url http://127.0.0.1:8000 --busy_poll $CLIENT_POLL
    bench "$B" final_grpc_r$r --url grpc://127.0.0.1:8001 --busy_poll $CLIENT_POLL
  done
  stop_server
fi

log "summary ($OUT/latency.csv)"
python3 - "$OUT/latency.csv" <<'PY'
import csv, sys
f = lambda r, k: ("%.3f" % (float(r[k]) * 1e3)) if r.get(k) else "-"
print("| experiment | min ms | p50 ms | p90 ms | p99 ms |")
print("|---|---|---|---|---|")
for r in csv.DictReader(open(sys.argv[1])):
    print("| %s | %s | %s | %s | %s |" % (r["experiment"], f(r, "min_latency"), f(r, "p50_latency"), f(r, "p90_latency"), f(r, "p99_latency")))
PY
