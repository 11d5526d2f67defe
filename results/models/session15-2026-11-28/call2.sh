set -u
cd .bin/s15 && xz -dc bins.tar.xz | tar xf - && cd ../..
B=.bin/s15/goinfer; T=.bin/s15/cuda.test
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
gunzip -c internal/engine/cuda/kernels/graph.fatbin.gz > /tmp/base.fatbin
SECONDS=0
/usr/local/cuda/bin/nvcc -t 8 -fatbin -gencode arch=compute_90,code=sm_90 -O3 -o /tmp/qo.fatbin tools/kernels/graph.cu > $OUT/nvcc.log 2>&1
echo "nvcc: ${SECONDS}s" | tee -a $OUT/nvcc.log
( timeout 120 $T -graph_kernels /tmp/qo.fatbin -test.run 'TestGraphGPUAttentionKernels|TestGraphGPUFusedChecks|TestGraphGPUOps' -test.v > $OUT/test-attn.log 2>&1; echo "attn tests rc=$?" >> $OUT/test-attn.log )
grep -E "^(--- |FAIL|ok|PASS)|panic|rc=" $OUT/test-attn.log | tail -8
for r in 1 2 3; do for v in base qo; do
  $B compute --arch vit_b_16 --engine cuda --precisions fp16 --compile true --batch_sizes 256 --image_sizes 224 --input_dtype fp32 --iters 60 --warmup 6 --graph_kernels /tmp/$v.fatbin > /tmp/c.log 2>&1
  echo "vit b256 $v: $(grep -E 'img/s|rror' /tmp/c.log | head -1)" | tee -a $OUT/ab.log
done; done
for v in base qo; do
  $B compute --arch vit_b_16 --engine cuda --precisions fp16 --compile true --batch_sizes 256 --image_sizes 224 --input_dtype fp32 --iters 20 --warmup 3 --profile --graph_kernels /tmp/$v.fatbin > $OUT/prof-vit-b256-$v.log 2>&1
  grep -E "encoder_layer_0\.self_attention.context|total" $OUT/prof-vit-b256-$v.log | sed "s/^/$v /" | head -3
done
( GOINFER_GRAPH_MODELS=vit_b_16 GOINFER_GRAPH_PRECISIONS=fp32,fp16,bf16 timeout 200 $T -graph_kernels /tmp/qo.fatbin -test.run TestGraphGPUModels -test.v > $OUT/test-vit.log 2>&1; echo "vit tests rc=$?" >> $OUT/test-vit.log )
grep -E "^(--- |FAIL|ok|PASS)|panic|rc=" $OUT/test-vit.log | tail -6
echo "total ${SECONDS}s"
