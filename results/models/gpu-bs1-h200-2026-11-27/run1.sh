#!/bin/bash
# gpu-bs1 device run 1: b1 A/B (base = main 4aeb3d8, new = gpu-bs1), b256 check,
# b1 profiles, GPU tests + parity + memcheck, graph.fatbin via nvcc.
set -u
B=.bin/gpu-bs1
T0=$(date +%s)
L=$OUT/l; mkdir -p $L
log() { echo "$(( $(date +%s) - T0 )) s: $*" | tee -a $OUT/summary.txt; }
xz -dc $B/bins.tar.xz | tar x -C $B || { log "unpack failed"; exit 1; }
chmod +x $B/goinfer $B/goinfer-base $B/cuda.test
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.memory,power.limit --format=csv > $L/gpu.txt 2>&1
log "unpacked"
NVCC=/usr/local/cuda/bin/nvcc
g=(); for a in 80 86 89 90 100 120; do g+=(-gencode arch=compute_$a,code=sm_$a); done
( nice -n 10 $NVCC --threads 0 -fatbin "${g[@]}" -gencode arch=compute_80,code=compute_80 -O3 -o $OUT/graph.fatbin $B/graph.cu > $L/nvcc.log 2>&1; echo "nvcc rc=$?" >> $L/nvcc.log; gzip -9n $OUT/graph.fatbin ) &
NV=$!
PY=/opt/torch/.venv/bin/python3; [ -x $PY ] || PY=python3
comp() { # bin model batch tag [extra]
  local bin=$1 m=$2 b=$3 tag=$4; shift 4
  local out
  out=$(timeout 60 $B/$bin compute --arch $m --engine cuda --precisions fp16 --compile true --batch_sizes $b --image_sizes 224 --input_dtype fp32 --iters 50 --warmup 10 --output $L/$tag-$m-b$b.md "$@" 2>$L/$tag-$m-b$b.err | grep "ms/forward")
  log "$tag $m b$b: $out"
}
M3="efficientnet_b0 mobilenet_v3_large regnet_y_800mf"
for r in 1 2; do for m in $M3; do comp goinfer-base $m 1 base$r; comp goinfer $m 1 new$r; done; done
for m in $M3; do comp goinfer-base $m 256 base; comp goinfer $m 256 new; done
for m in efficientnet_b0 mobilenet_v3_large regnet_y_800mf convnext_tiny vit_b_16 densenet121 resnet50; do comp goinfer $m 1 prof --profile; done
log "timing done"
# correctness, concurrently
( cd internal/engine/cuda && GOINFER_GRAPH_PRECISIONS=fp32,fp16 GOINFER_GRAPH_MODELS=mobilenet_v3_large,efficientnet_b0,regnet_y_800mf timeout 100 ../../../$B/cuda.test -test.run 'TestGraphGPU|TestGolden|TestInputDTypes' -test.skip TestGraphGPUSpeed -test.v > $L/gputest.log 2>&1; echo "rc=$?" >> $L/gputest.log ) &
T1=$!
( timeout 100 $PY tools/models/parity.py --goinfer $B/goinfer --engines cuda --precisions fp32,fp16 --models mobilenet_v3_large,efficientnet_b0,regnet_y_800mf --jobs 3 --budget 80 --log $L/parity.log > $L/parity.out 2>&1; echo "rc=$?" >> $L/parity.out ) &
T2=$!
( timeout 90 /usr/local/cuda/bin/compute-sanitizer --tool memcheck $B/goinfer compute --arch efficientnet_b0 --engine cuda --precisions fp16 --compile false --batch_sizes 2 --image_sizes 64 --input_dtype fp32 --iters 2 --warmup 1 > $L/memcheck.log 2>&1; echo "rc=$?" >> $L/memcheck.log ) &
T3=$!
wait $T1; log "gpu tests: $(tail -1 $L/gputest.log) $(grep -c -- '--- FAIL' $L/gputest.log) FAIL lines"
wait $T2; log "parity: $(tail -1 $L/parity.out)"
wait $T3; log "memcheck: $(grep -E 'ERROR SUMMARY' $L/memcheck.log) $(tail -1 $L/memcheck.log)"
while kill -0 $NV 2>/dev/null && [ $(( $(date +%s) - T0 )) -lt 228 ]; do sleep 2; done
kill -0 $NV 2>/dev/null && { log "nvcc still running, killed"; kill $NV; }
log "nvcc: $(tail -1 $L/nvcc.log)"
tar czf $OUT/logs.tgz -C $OUT l
ls -la $OUT >> $OUT/summary.txt
