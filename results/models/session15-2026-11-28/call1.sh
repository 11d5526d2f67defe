set -u
cd .bin/s15 && xz -dc bins.tar.xz | tar xf - && cd ../..
B=.bin/s15/goinfer; T=.bin/s15/cuda.test
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
gunzip -c internal/engine/cuda/kernels/graph.fatbin.gz > /tmp/base.fatbin
SECONDS=0
NV="/usr/local/cuda/bin/nvcc -t 8 -fatbin -gencode arch=compute_90,code=sm_90 -O3"
$NV -o /tmp/new.fatbin tools/kernels/graph.cu > $OUT/nvcc.log 2>&1 &
$NV -DATTN_DB=0 -o /tmp/skip.fatbin tools/kernels/graph.cu >> $OUT/nvcc.log 2>&1 &
wait; echo "nvcc: ${SECONDS}s" | tee -a $OUT/nvcc.log; ls -la /tmp/*.fatbin
( timeout 120 $T -graph_kernels /tmp/new.fatbin -test.run 'TestGraphGPUAttentionKernels|TestGraphGPUFusedChecks' -test.v > $OUT/test-attn.log 2>&1; echo "attn tests rc=$?" >> $OUT/test-attn.log )
grep -E "^(--- |FAIL|ok|PASS)|panic|rc=" $OUT/test-attn.log | tail -8
for r in 1 2; do for v in base skip new; do
  $B compute --arch vit_b_16 --engine cuda --precisions fp16 --compile true --batch_sizes 256 --image_sizes 224 --input_dtype fp32 --iters 60 --warmup 6 --graph_kernels /tmp/$v.fatbin > /tmp/c.log 2>&1
  echo "vit b256 $v: $(grep -E 'img/s|rror' /tmp/c.log | head -1)" | tee -a $OUT/ab.log
  $B compute --arch vit_b_16 --engine cuda --precisions fp16 --compile true --batch_sizes 1 --image_sizes 224 --input_dtype fp32 --iters 300 --warmup 30 --graph_kernels /tmp/$v.fatbin > /tmp/c.log 2>&1
  echo "vit b1 $v: $(grep -E 'img/s|rror' /tmp/c.log | head -1)" | tee -a $OUT/ab.log
done; done
$B compute --arch vit_b_16 --engine cuda --precisions fp16 --compile true --batch_sizes 256 --image_sizes 224 --input_dtype fp32 --iters 20 --warmup 3 --profile --graph_kernels /tmp/new.fatbin > $OUT/prof-vit-b256.log 2>&1
grep -E "encoder_layer_0\.|total" $OUT/prof-vit-b256.log | head -9
( GOINFER_GRAPH_MODELS=vit_b_16 GOINFER_GRAPH_PRECISIONS=fp32,fp16 timeout 150 $T -graph_kernels /tmp/new.fatbin -test.run TestGraphGPUModels -test.v > $OUT/test-vit.log 2>&1; echo "vit tests rc=$?" >> $OUT/test-vit.log )
grep -E "^(--- |FAIL|ok|PASS)|panic|rc=" $OUT/test-vit.log | tail -6
echo "total ${SECONDS}s"
