#!/usr/bin/env bash
# goinfer against PyTorch on the models of issue 13, side by side in one
# session on one GPU: `goinfer compute` (cuda engine, fp16, compiled, input
# already on the GPU in fp32) for each model at batch 256 and batch 1, then
# tools/pytorch_compute.py --models (eager fp16 channels-last, the same in a
# CUDA graph, torch.compile mode="reduce-overhead") for the same cells, then
# one table (tools/models/table.py) with the issue's goals and the ratio
# goinfer / best PyTorch.
#
# Usage (on the GPU machine, from the repo root, with the binary built by
# `CGO_ENABLED=0 go build -o .bin/goinfer ./cmd/goinfer`):
#   tools/gpu_models.sh
# writes results/models/models-<gpu>-<date>.md and its raw files (goinfer's
# CSV, report with per-layer profile and log per model and batch; PyTorch's
# CSV, table and log) under results/models/models-<gpu>-<date>/.
#
# Time: everything within BUDGET seconds (default 470, for a 10-minute
# command with a margin). goinfer runs first, each cell within GOINFER_LIMIT
# seconds (default 45) and all of them within GOINFER_BUDGET (default 200);
# PyTorch gets what is left: its eager and CUDA-graph cells of every model
# first, torch.compile cells last, each compile within COMPILE_LIMIT seconds
# (default 60; a model whose compile passes it, or that would start after
# the budget, has its compile cells skipped, and its cell says so). A
# compile is measured at COMPILE_BATCHES (default 256: the issue's batch-1
# goal is against PyTorch's CUDA graph).
#
# Environment (defaults in brackets): GOINFER [.bin/goinfer], PYTHON
# [/opt/torch/.venv/bin/python3 where it exists, else python3], MODELS
# [the issue's seven], BATCHES [256,1: throughput, then latency], IMAGE
# [224], ENGINE [cuda], PRECISION [fp16], INPUT_DTYPE [fp32: general graphs
# convert it on the GPU; fp16 only for the ResNet path], ITERS [100], WARMUP [10], PROFILE_BATCHES [256:
# goinfer's per-layer profile at these batch sizes], OUT [results/models],
# PYARGS (more tools/pytorch_compute.py flags).
# To try it on a machine without a GPU (tiny and wrong, but every step runs):
#   ENGINE=cpu PRECISION=fp32 INPUT_DTYPE=fp32 IMAGE=64 BATCHES=2,1 MODELS=resnet18,mobilenet_v3_large \
#     ITERS=3 WARMUP=1 PYARGS="--device cpu --dtype fp32" PYTHON=/usr/bin/python3 OUT=/tmp/models tools/gpu_models.sh
set -uo pipefail
B=${GOINFER:-.bin/goinfer}
PY=${PYTHON:-python3}
[ -z "${PYTHON:-}" ] && [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3  # the GPU machine's PyTorch
MODELS=${MODELS:-resnet50,mobilenet_v3_large,efficientnet_b0,regnet_y_800mf,convnext_tiny,vit_b_16,densenet121}
BATCHES=${BATCHES:-256,1}
IMAGE=${IMAGE:-224}
ENGINE=${ENGINE:-cuda}
PRECISION=${PRECISION:-fp16}
# General graphs on the cuda engine take float32 input (converted on the GPU);
# only the ResNet path reads fp16 input.
INPUT_DTYPE=${INPUT_DTYPE:-fp32}
ITERS=${ITERS:-100}
WARMUP=${WARMUP:-10}
PROFILE_BATCHES=${PROFILE_BATCHES:-256}
BUDGET=${BUDGET:-470}
GOINFER_BUDGET=${GOINFER_BUDGET:-200}
GOINFER_LIMIT=${GOINFER_LIMIT:-45}
COMPILE_LIMIT=${COMPILE_LIMIT:-60}
COMPILE_BATCHES=${COMPILE_BATCHES:-256}
OUT=${OUT:-results/models}
PYARGS=${PYARGS:-}

start=$(date +%s)
elapsed() { echo $(($(date +%s) - start)); }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
slug=$(printf '%s' "${gpu:-cpu}" | tr 'A-Z' 'a-z' | sed -E 's/nvidia //; s/[^a-z0-9]+/-/g; s/^-|-$//g')
day=$(date -u +%F)
raw=$OUT/models-$slug-$day
mkdir -p "$raw"
[ -x "$B" ] || { echo "$B: not built (CGO_ENABLED=0 go build -o .bin/goinfer ./cmd/goinfer)"; exit 1; }

{
  echo "- date: $(date -u '+%F %H:%M UTC'); GPU: ${gpu:-none}"
  nvidia-smi --query-gpu=driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv 2>/dev/null | sed 's/^/    /'
  echo "- goinfer: \`$B compute --arch MODEL --engine $ENGINE --precisions $PRECISION --compile true --batch_sizes B --image_sizes $IMAGE --input_dtype $INPUT_DTYPE --iters $ITERS --warmup $WARMUP\` (one process per model and batch; --profile at batch $PROFILE_BATCHES)"
} >"$raw/preamble.md"

IFS=, read -ra models <<<"$MODELS"
IFS=, read -ra batches <<<"$BATCHES"
echo "### goinfer compute ($ENGINE, $PRECISION, compiled), raw files in $raw"
for m in "${models[@]}"; do
  for bs in "${batches[@]}"; do
    stem=$raw/goinfer-$m-b$bs
    rm -f "$stem.csv" "$stem.md"
    left=$((GOINFER_BUDGET - $(elapsed)))
    if [ "$left" -le 0 ]; then
      echo "skipped: GOINFER_BUDGET of $GOINFER_BUDGET s spent" >"$stem.log"; echo 1 >"$stem.status"
      echo "  $m batch $bs: skipped (budget)"; continue
    fi
    limit=$((left < GOINFER_LIMIT ? left : GOINFER_LIMIT))
    prof=()
    [[ ",$PROFILE_BATCHES," == *",$bs,"* ]] && prof=(--profile)
    timeout -k 5 "$limit" "$B" compute --arch "$m" --engine "$ENGINE" --precisions "$PRECISION" --compile true \
      --batch_sizes "$bs" --image_sizes "$IMAGE" --input_dtype "$INPUT_DTYPE" --iters "$ITERS" --warmup "$WARMUP" \
      "${prof[@]}" --csv "$stem.csv" --output "$stem.md" >/dev/null 2>"$stem.log"
    rc=$?
    echo $rc >"$stem.status"
    printf '  %s batch %s (%s s, exit %s): %s\n' "$m" "$bs" "$(elapsed)" "$rc" \
      "$(grep -E 'img/s|^compute:|^goinfer' "$stem.log" | tail -1 | cut -c1-200)"
  done
done

left=$((BUDGET - $(elapsed) - 15))
echo "### PyTorch ($(elapsed) s in; budget left ${left} s)"
echo "- PyTorch: \`tools/pytorch_compute.py --models $MODELS --batches $BATCHES --compile_batches $COMPILE_BATCHES --image_size $IMAGE --compile_limit $COMPILE_LIMIT --budget $left --iters $ITERS --warmup $WARMUP $PYARGS\`" >>"$raw/preamble.md"
$PY tools/pytorch_compute.py --models "$MODELS" --batches "$BATCHES" --modes eager,cudagraph,compile \
  --compile_batches "$COMPILE_BATCHES" --image_size "$IMAGE" --compile_limit "$COMPILE_LIMIT" --budget "$left" \
  --iters "$ITERS" --warmup "$WARMUP" $PYARGS --csv "$raw/pytorch.csv" --output "$raw/pytorch.md" \
  >/dev/null 2>"$raw/pytorch.log"
echo "  exit $? after $(elapsed) s; $(grep -c img/s "$raw/pytorch.log") cells measured"
[ -f "$raw/pytorch.md" ] && sed -nE '1s/^## (.*)/- \1/p; s/^- (cuDNN|fp16|bf16|fp32)/- \1/p' "$raw/pytorch.md" >>"$raw/preamble.md"

md=$OUT/models-$slug-$day.md
$PY tools/models/table.py --raw "$raw" --models "$MODELS" --batches "$BATCHES" --image "$IMAGE" --preamble "$raw/preamble.md" \
  --title "goinfer against PyTorch, torchvision models: ${gpu:-no GPU} ($ENGINE engine, $PRECISION, ${IMAGE}x$IMAGE)" --output "$md"
echo "wrote $md after $(elapsed) s"
