#!/usr/bin/env bash
# Verifies a merged tree on one GPU in one device call: the seed workload's
# compiled cold start (no tuning cache) at batch 256 and 32, ResNet-50 and
# ResNet-18 compute at batch 1 and 256, the cuda engine's GPU tests in fp32
# and fp16, compute-sanitizer memcheck of a small MobileNetV3 and
# EfficientNet, and parity against PyTorch float64 for the issue-13 models.
#
# Build here (no Go on the GPU machine):
#   CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o .bin/v/goinfer ./cmd/goinfer
#   CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o .bin/v/cuda.test ./internal/engine/cuda
#   xz -T2 -6 .bin/v/goinfer .bin/v/cuda.test
# then on the GPU machine, from the repo root (carry .bin/v):
#   BIN=.bin/v tools/gpu_verify.sh [steps]
# Steps (default all): coldstart compute test memcheck parity. About 450 s
# in all; PARITY_BUDGET (default 200) bounds the parity runs. Logs go to OUT
# (default /tmp/verify); a summary is printed.
set -uo pipefail
BIN=$(cd "${BIN:-.bin/v}" && pwd)
OUT=${OUT:-/tmp/verify}
MODELS=${MODELS:-resnet50,mobilenet_v3_large,efficientnet_b0,regnet_y_800mf,convnext_tiny,vit_b_16,densenet121}
PARITY_BUDGET=${PARITY_BUDGET:-200}
steps=" ${*:-coldstart compute test memcheck parity} "
mkdir -p "$OUT"
(cd "$BIN" && for f in *.xz; do [ -e "$f" ] && xz -d -f -T4 "$f"; done; chmod +x goinfer cuda.test 2>/dev/null)
PY=/opt/torch/.venv/bin/python3
[ -x $PY ] || PY=python3
G=$BIN/goinfer
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
has() { [[ $steps == *" $1 "* ]]; }

if has coldstart; then
  # The first run on a fresh machine reads the libraries from disk: not counted.
  $G bench --engine cuda --batch_size 32 --num_iters 3 >/dev/null 2>&1
  echo "=== cold start: bench --engine cuda, seeded weights, no tuning cache"
  for bs in 256 32; do
    for r in 1 2; do
      t0=$(date +%s.%N)
      timeout 60 $G bench --engine cuda --batch_size $bs --phases --results_dir "$OUT/cs" --output_file cs.csv >"$OUT/cs-$bs-$r.log" 2>&1
      echo "batch $bs run $r: wall $(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t0}") s"
      grep -iE "warmup latency|throughput" "$OUT/cs-$bs-$r.log" | head -3
    done
  done
fi
if has compute; then
  echo "=== compute (fp16, compiled, fp32 input on the GPU)"
  for m in resnet50 resnet18; do
    timeout 90 $G compute --arch $m --engine cuda --precisions fp16 --compile true --batch_sizes 1,256 \
      --image_sizes 224 --input_dtype fp32 --iters 100 --warmup 10 --output "$OUT/compute-$m.md" >"$OUT/compute-$m.log" 2>&1
    echo "$m rc=$?"; grep -E "^\| cuda" "$OUT/compute-$m.md"
  done
fi
if has test; then
  echo "=== cuda engine GPU tests"
  (cd internal/engine/cuda && GOINFER_EXPECT_GPU=1 GOINFER_GRAPH_PRECISIONS=fp32,fp16 timeout 300 "$BIN/cuda.test" \
    -test.run 'TestGraphGPU|TestGolden|TestInputDTypes' -test.timeout 295s >"$OUT/cuda_test.log" 2>&1; echo "rc=$?")
  grep -E "^(--- FAIL|FAIL|ok|PASS)" "$OUT/cuda_test.log" | head -20
fi
if has memcheck; then
  echo "=== compute-sanitizer memcheck, batch 2 at 64 px"
  for m in mobilenet_v3_large efficientnet_b0; do
    timeout 60 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --print-limit 3 $G compute --arch $m --engine cuda \
      --precisions fp16 --compile true --batch_sizes 2 --image_sizes 64 --iters 2 --warmup 1 2>&1 | grep -E "ERROR SUMMARY|Invalid" | head -4 | sed "s/^/$m: /"
  done
fi
if has parity; then
  echo "=== parity vs PyTorch float64 (fp32, fp16; eager and compiled; batch 1 and 3)"
  timeout $((PARITY_BUDGET + 60)) $PY tools/models/parity.py --goinfer $G --engines cuda --precisions fp32,fp16 \
    --models "$MODELS" --jobs 4 --budget "$PARITY_BUDGET" --log "$OUT/parity.log" >"$OUT/parity.out" 2>&1
  echo "rc=$?"; grep -E "FAIL|runs|pass" "$OUT/parity.out" | tail -12
fi
