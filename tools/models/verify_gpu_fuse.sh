#!/usr/bin/env bash
# One-call GPU A/B of the cuda engine's general-graph fusions, on by default
# since 2026-11-27; each row turns some off with --graph_experiments
# (noidentity, noprologue, nofindmath: engine.Options.GraphExperiments,
# internal/engine/cuda/graphprologue.go): "identity" (convolutions with an
# activation cuDNN's fused call lacks run that call with the identity, bias
# fused, then the activation), "prologue" (the expansion's SiLU / hard
# swish / ReLU6 applied by graph.cu's depthwise kernels as they load) and
# "findmath" (unfused convolutions run under the math type cudnnFind
# measured their algorithm with).
#
# From the repository root on the GPU machine:
#
#   GOINFER=path/to/goinfer [GOINFER_MAIN=path/to/main/goinfer] [CUDA_TEST=cuda.test] OUT=dir \
#     [BUDGET=480] [FATBIN=1] [GRAPH_CU=path/to/graph.cu] [PARITY_PY=...] tools/models/verify_gpu_fuse.sh
#
# writes into $OUT:
#   ab.log, ab-*.md   goinfer compute (fp16, 224, --profile) of mobilenet_v3_large
#                     and efficientnet_b0 at batch 256 and 1, each fusion alone
#                     in turn (batch 256: off, findmath, identity, prologue,
#                     identity+prologue, all three = the default; batch 1:
#                     off, all), main's
#                     binary first if given
#   find.log          cudnnFind's ranking of every convolution
#                     (--graph_experiments findlog), mobilenet_v3_large batch 256:
#                     why the unfused expansions ran the plain implicit GEMM
#   gputest.log       with CUDA_TEST: TestGraphGPUDepthwiseLowerings
#   parity.log        tools/models/parity.py, fp32 and fp16, eager and compiled,
#                     batch 1 and 3, the defaults
#   memcheck.log      compute-sanitizer memcheck, batch 2, 64 pixels, all on
#   graph.fatbin.gz, graph.sha256.line   with FATBIN=1 and nvcc: the fatbin of
#                     tools/kernels/graph.cu to commit (else the PTX is JIT-
#                     compiled at the first load, about 15 s, cached after)
set -uo pipefail
: "${GOINFER:?set GOINFER to the branch binary}"
: "${OUT:?set OUT to the output directory}"
BUDGET="${BUDGET:-480}"
start=$SECONDS
left() { echo $((BUDGET - (SECONDS - start))); }
py=/opt/torch/.venv/bin/python3
[[ -x $py ]] || py=python3
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$OUT/gpu.txt" 2>&1

if [[ "${FATBIN:-0}" == 1 ]]; then
  nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
  if [[ -x $nvcc ]]; then
    gencode=()
    for a in 80 86 89 90 100 120; do gencode+=(-gencode "arch=compute_$a,code=sm_$a"); done
    timeout 300 "$nvcc" -fatbin "${gencode[@]}" -gencode arch=compute_80,code=compute_80 -O3 \
      -o "$OUT/graph.fatbin" "${GRAPH_CU:-tools/kernels/graph.cu}" >"$OUT/nvcc.log" 2>&1 &&
      gzip -9nf "$OUT/graph.fatbin" &&
      echo "$(sha256sum "${GRAPH_CU:-tools/kernels/graph.cu}" | cut -d' ' -f1) graph.fatbin" >"$OUT/graph.sha256.line"
  else
    echo "no nvcc" >"$OUT/nvcc.log"
  fi
fi

# The first load JIT-compiles the PTX when the fatbin is stale; the driver
# caches it for the runs after.
timeout 120 "$GOINFER" compute --arch mobilenet_v3_large --engine cuda --precisions fp16 --compile false \
  --batch_sizes 1 --image_sizes 64 --input_dtype fp32 --iters 2 --warmup 1 >"$OUT/warm.log" 2>&1

run() { # label binary fuse model batch
  local label=$1 bin=$2 fuse=$3 m=$4 b=$5
  [[ $(left) -gt 30 ]] || { echo "skipped $label $m b$b: budget" >>"$OUT/ab.log"; return; }
  local flag=()
  [[ -n $fuse ]] && flag=(--graph_experiments "$fuse")
  echo "== $label $m b$b experiments=$fuse" >>"$OUT/ab.log"
  timeout 90 "$bin" compute --arch "$m" --engine cuda --precisions fp16 --compile true "${flag[@]}" \
    --batch_sizes "$b" --image_sizes 224 --input_dtype fp32 --iters 100 --warmup 10 --profile \
    --output "$OUT/ab-$label-$m-b$b.md" >>"$OUT/ab.log" 2>&1
}
for m in mobilenet_v3_large efficientnet_b0; do
  for b in 256 1; do
    [[ -n "${GOINFER_MAIN:-}" ]] && run main "$GOINFER_MAIN" "" "$m" "$b"
    run off "$GOINFER" noidentity,noprologue,nofindmath "$m" "$b"
    if [[ $b == 256 ]]; then
      run findmath "$GOINFER" noidentity,noprologue "$m" "$b"
      run identity "$GOINFER" noprologue,nofindmath "$m" "$b"
      run prologue "$GOINFER" noidentity,nofindmath "$m" "$b"
      run both "$GOINFER" nofindmath "$m" "$b"
    fi
    run all "$GOINFER" "" "$m" "$b"
  done
done
grep -h "^==\|ms/forward\|^skipped" "$OUT"/ab.log >"$OUT/ab-summary.txt"

timeout 60 "$GOINFER" compute --arch mobilenet_v3_large --engine cuda --precisions fp16 --graph_experiments findlog \
  --compile true --batch_sizes 256 --image_sizes 224 --input_dtype fp32 --iters 5 --warmup 2 >"$OUT/find.log" 2>&1

if [[ -n "${CUDA_TEST:-}" && $(left) -gt 90 ]]; then
  # The package's depthwise GPU test (every lowering forced, with and
  # without the opt-in changes), a binary of `go test -c ./internal/engine/cuda`.
  timeout 120 "$CUDA_TEST" -test.run 'TestGraphGPUDepthwiseLowerings' -test.v >"$OUT/gputest.log" 2>&1
  echo "exit $?" >>"$OUT/gputest.log"
fi

if [[ $(left) -gt 60 ]]; then
  timeout $(($(left) - 40)) "$py" "${PARITY_PY:-tools/models/parity.py}" --engines cuda \
    --precisions fp32,fp16 --models mobilenet_v3_large,efficientnet_b0 --goinfer "$GOINFER" --jobs 4 \
    --budget $(($(left) - 60)) --log "$OUT/parity.log" >"$OUT/parity.out" 2>&1
fi

san="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
if [[ -x $san && $(left) -gt 20 ]]; then
  for m in mobilenet_v3_large efficientnet_b0; do
    timeout $(($(left) / 2)) "$san" --tool memcheck --error-exitcode 9 \
      "$GOINFER" compute --arch "$m" --engine cuda --precisions fp16 --compile true --batch_sizes 2 \
      --image_sizes 64 --input_dtype fp32 --iters 2 --warmup 1 >>"$OUT/memcheck.log" 2>&1
    echo "memcheck $m exit $?" >>"$OUT/memcheck.log"
  done
fi
cd "$OUT" && tar czf ../verify-gpu-fuse.tgz . && mv ../verify-gpu-fuse.tgz .
