#!/bin/bash
# gpu-bs1 device run 2: b1/b256 base (main 4aeb3d8) vs new (PTX JIT, then nvcc fatbin via
# GOINFER_CUDA_GRAPH_KERNELS), profiles, GPU tests + parity + memcheck with the fatbin.
set -u
B=.bin/gpu-bs1
T0=$(date +%s)
L=$OUT/l; mkdir -p $L
el() { echo $(( $(date +%s) - T0 )); }
log() { echo "$(el) s: $*" | tee -a $OUT/summary.txt; }
xz -dc $B/bins.tar.xz | tar x -C $B || { log "unpack failed"; exit 1; }
chmod +x $B/goinfer $B/goinfer-base $B/cuda.test
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.memory,power.limit --format=csv > $L/gpu.txt 2>&1
NVCC=/usr/local/cuda/bin/nvcc
g=(); for a in 80 86 89 90 100 120; do g+=(-gencode arch=compute_$a,code=sm_$a); done
( $NVCC --threads 0 -fatbin "${g[@]}" -gencode arch=compute_80,code=compute_80 -O3 -o $OUT/graph.fatbin $B/graph.cu > $L/nvcc.log 2>&1; echo "nvcc rc=$? at $(el) s" >> $L/nvcc.log ) &
NV=$!
PY=/opt/torch/.venv/bin/python3; [ -x $PY ] || PY=python3
comp() { # bin model batch tag [extra]
  local bin=$1 m=$2 b=$3 tag=$4; shift 4
  timeout 60 $B/$bin compute --arch $m --engine cuda --precisions fp16 --compile true --batch_sizes $b --image_sizes 224 --input_dtype fp32 --iters 50 --warmup 10 --output $L/$tag-$m-b$b.md "$@" > /dev/null 2>$L/$tag-$m-b$b.err
  log "$tag $m b$b: $(grep '^| cuda' $L/$tag-$m-b$b.md | awk -F'|' '{print $8, "ms, compile", $11, "s"}')"
}
M4="efficientnet_b0 mobilenet_v3_large regnet_y_800mf convnext_tiny"
for m in $M4; do comp goinfer-base $m 1 base; comp goinfer $m 1 ptx; done
for m in $M4; do comp goinfer-base $m 256 base; comp goinfer $m 256 ptx; done
while kill -0 $NV 2>/dev/null && [ $(el) -lt 110 ]; do sleep 1; done
log "nvcc: $(tail -1 $L/nvcc.log)"
if [ -s $OUT/graph.fatbin ] && ! kill -0 $NV 2>/dev/null; then
  export GOINFER_CUDA_GRAPH_KERNELS=$PWD/$OUT/graph.fatbin
  case $OUT in /*) export GOINFER_CUDA_GRAPH_KERNELS=$OUT/graph.fatbin;; esac
  for m in $M4; do comp goinfer $m 1 fat; comp goinfer $m 256 fat; done
  for m in efficientnet_b0 mobilenet_v3_large convnext_tiny; do comp goinfer $m 1 fatprof --profile; done
else
  kill $NV 2>/dev/null; log "no fatbin: correctness on the PTX"
fi
( cd internal/engine/cuda && GOINFER_GRAPH_PRECISIONS=fp32,fp16 GOINFER_GRAPH_MODELS=mobilenet_v3_large,efficientnet_b0,regnet_y_800mf,convnext_tiny timeout 85 ../../../$B/cuda.test -test.run 'TestGraphGPU|TestGolden|TestInputDTypes' -test.skip TestGraphGPUSpeed -test.v > $L/gputest.log 2>&1; echo "rc=$?" >> $L/gputest.log ) &
T1=$!
( timeout 85 $PY tools/models/parity.py --goinfer $B/goinfer --engines cuda --precisions fp32,fp16 --models mobilenet_v3_large,efficientnet_b0,regnet_y_800mf,convnext_tiny --jobs 3 --budget 70 --log $L/parity.log > $L/parity.out 2>&1; echo "rc=$?" >> $L/parity.out ) &
T2=$!
( for m in convnext_tiny efficientnet_b0; do timeout 45 /usr/local/cuda/bin/compute-sanitizer --tool memcheck $B/goinfer compute --arch $m --engine cuda --precisions fp16 --compile true --batch_sizes 1 --image_sizes 64 --input_dtype fp32 --iters 2 --warmup 1 > $L/memcheck-$m.log 2>&1; echo "rc=$?" >> $L/memcheck-$m.log; done ) &
T3=$!
wait $T1; log "gpu tests: $(tail -1 $L/gputest.log) $(grep -c -- '--- FAIL' $L/gputest.log) FAIL lines"
wait $T2; log "parity: $(tail -1 $L/parity.out) $(grep -c FAIL $L/parity.log) FAIL rows"
wait $T3; log "memcheck: $(grep -h 'ERROR SUMMARY' $L/memcheck-*.log | tr '\n' ' ') $(tail -qn1 $L/memcheck-*.log | tr '\n' ' ')"
[ -s $OUT/graph.fatbin ] && gzip -9n $OUT/graph.fatbin
tar czf $OUT/logs.tgz -C $OUT l
rm -rf $L
ls -la $OUT >> $OUT/summary.txt
