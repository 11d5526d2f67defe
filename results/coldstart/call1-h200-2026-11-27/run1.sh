#!/usr/bin/env bash
# Device call 1 (cold-start branch): per-phase breakdown of the default
# compiled bench's cold start, main vs this branch, alternating.
set -u
D=$(cd "$(dirname "$0")" && pwd)
B=/tmp/cs
mkdir -p $B && xz -dc "$D/bins.tar.xz" | tar -x -C $B
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu.txt 2>&1
# The first run on a fresh machine reads the libraries from disk: not counted.
$B/goinfer-base doctor > $OUT/doctor.txt 2>&1
$B/goinfer-base bench --engine cuda --num_iters 5 > $OUT/prime.log 2>&1
run() {
  local label=$1 bin=$2; shift 2
  echo "### $label $bin $*"
  local t0=$(date +%s.%N)
  env "$@" GOINFER_PHASES=1 $B/$bin bench --engine cuda --results_dir $OUT --output_file runs.csv --experiment $label 2>&1
  echo "### wall $label $(awk "BEGIN{print $(date +%s.%N) - $t0}") s"
}
for r in 1 2 3 4; do
  run base$r goinfer-base
  run phases$r goinfer-phases
  run new$r goinfer-new
  run newall$r goinfer-new GOINFER_CUDA_TUNE_ALL=1
done > $OUT/runs.log 2>&1
grep -E "^###|Warmup latency|Throughput|Load time|Compile time" $OUT/runs.log | tail -80
