set -u
mkdir -p /tmp/s17 && xz -dc .bin/s17.tar.xz | tar xf - -C /tmp/s17
B=/tmp/s17/goinfer; T=/tmp/s17/cuda.test
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
grep -m1 "model name" /proc/cpuinfo >> $OUT/gpu.txt
echo "avx512: $(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')" >> $OUT/gpu.txt
sha256sum tools/kernels/graph.cu | tee -a $OUT/gpu.txt
G=""; for a in 80 86 89 90 100 120; do G="$G -gencode arch=compute_$a,code=sm_$a"; done
( SECONDS=0; /usr/local/cuda/bin/nvcc -t 16 -fatbin $G -gencode arch=compute_80,code=compute_80 -O3 -Xptxas -v -o /tmp/g.fatbin tools/kernels/graph.cu > $OUT/nvcc.log 2>&1; echo "nvcc all: rc=$? ${SECONDS}s" >> $OUT/nvcc.log ) &
NV=$!
# The cpu engine's AVX-512 paths (Winograd's new strides and masks) on this host's CPU.
for p in winograd; do ( cd internal/engine/cpu/$p && SECONDS=0; timeout 150 /tmp/s17/$p.test -test.v > /tmp/$p.log 2>&1; echo "$p rc=$? ${SECONDS}s"; grep -E "^(--- FAIL|--- SKIP|FAIL|ok|PASS)" /tmp/$p.log | head -20 ); done > $OUT/cpu-tests.log 2>&1
cat $OUT/cpu-tests.log | grep rc=
wait $NV; tail -1 $OUT/nvcc.log
grep -A1 "g_dwb_k7s1t14_f16\|g_dwb_k7s1t7_f16\|g_dwt_k7s1t7_f16" $OUT/nvcc.log | grep -B1 "registers" | grep -A1 "sm_90" | head -8 > $OUT/regs.txt
gzip -9nc /tmp/g.fatbin > $OUT/graph.fatbin.gz
K="--graph_kernels /tmp/g.fatbin"
( SECONDS=0; timeout 200 $T -graph_kernels /tmp/g.fatbin -test.run 'TestGraphGPUDepthwiseLowerings|TestGraphGPUFusedChecks|TestGraphGPUOps|TestGraphGPUAttentionKernels' -test.v > $OUT/test-ops.log 2>&1; echo "ops tests rc=$? ${SECONDS}s" >> $OUT/test-ops.log )
grep -E "^(--- |FAIL|ok|PASS)|relative error|panic|rc=" $OUT/test-ops.log | tail -12
C="compute --engine cuda --precisions fp16 --compile true --image_sizes 224 --input_dtype fp32"
for r in 1 2; do for m in convnext_tiny mobilenet_v3_large efficientnet_b0; do for ex in "" nodwsmem; do
  timeout 60 $B $C --arch $m --batch_sizes 256 --iters 40 --warmup 5 $K ${ex:+--graph_experiments $ex} > /tmp/c.log 2>&1
  echo "$m b256 ${ex:-new}: $(grep -E 'img/s|rror' /tmp/c.log | head -1)" | tee -a $OUT/ab-b256.log
  [ -z "$ex" ] && [ $r = 1 ] && grep "depthwise" /tmp/c.log >> $OUT/dwcands256.log
done; done; done
for m in convnext_tiny mobilenet_v3_large efficientnet_b0; do for ex in "" nodwsmem; do
  timeout 60 $B $C --arch $m --batch_sizes 1 --iters 200 --warmup 20 $K ${ex:+--graph_experiments $ex} > /tmp/c.log 2>&1
  echo "$m b1 ${ex:-new}: $(grep -E 'ms/forward|rror' /tmp/c.log | head -1)" | tee -a $OUT/ab-b1.log
  [ -z "$ex" ] && grep "depthwise" /tmp/c.log >> $OUT/dwcands1.log
done; done
timeout 60 $B $C --arch convnext_tiny --batch_sizes 256 --iters 20 --warmup 5 --profile $K > $OUT/prof-convnext-b256.log 2>&1
echo "total ${SECONDS}s"
