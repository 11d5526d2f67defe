set -u
cd .bin/s15 && xz -dc bins.tar.xz | tar xf - && cd ../..
B=.bin/s15/goinfer; T=.bin/s15/cuda.test
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
gunzip -c internal/engine/cuda/kernels/graph.fatbin.gz > /tmp/base.fatbin
SECONDS=0
NV="/usr/local/cuda/bin/nvcc -t 8 -fatbin -gencode arch=compute_90,code=sm_90 -O3"
$NV -o /tmp/qo.fatbin tools/kernels/graph.cu > $OUT/nvcc.log 2>&1 &
$NV -DATTN_DB=1 -o /tmp/qodb.fatbin tools/kernels/graph.cu >> $OUT/nvcc.log 2>&1 &
wait; echo "nvcc: ${SECONDS}s" | tee -a $OUT/nvcc.log
for v in qo qodb; do
  ( timeout 60 $T -graph_kernels /tmp/$v.fatbin -test.run 'TestGraphGPUAttentionKernels|TestGraphGPUFusedChecks' -test.v > $OUT/test-attn-$v.log 2>&1; echo "rc=$?" >> $OUT/test-attn-$v.log )
  echo "$v: $(grep -E '^(--- |ok|FAIL)|rc=' $OUT/test-attn-$v.log | tr '\n' ' ')"
done
for r in 1 2 3; do for v in base qo qodb; do
  $B compute --arch vit_b_16 --engine cuda --precisions fp16 --compile true --batch_sizes 256 --image_sizes 224 --input_dtype fp32 --iters 60 --warmup 6 --graph_kernels /tmp/$v.fatbin > /tmp/c.log 2>&1
  echo "vit b256 $v: $(grep -E 'img/s|rror' /tmp/c.log | head -1)" | tee -a $OUT/ab.log
done; done
med() { grep "b256 $1:" $OUT/ab.log | awk '{for(i=1;i<=NF;i++) if($(i+1)=="img/s") print $i}' | sort -n | sed -n 2p; }
qo=$(med qo); db=$(med qodb)
flag=""; if awk -v a=$db -v b=$qo 'BEGIN{exit !(a > 1.01*b)}'; then flag="-DATTN_DB=1"; fi
echo "median qo=$qo qodb=$db -> final flags: '${flag}'" | tee $OUT/winner.txt
SECONDS=0; /usr/local/cuda/bin/nvcc -t 16 -fatbin -gencode arch=compute_80,code=sm_80 -gencode arch=compute_86,code=sm_86 -gencode arch=compute_89,code=sm_89 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_100,code=sm_100 -gencode arch=compute_120,code=sm_120 -gencode arch=compute_80,code=compute_80 -O3 $flag -o /tmp/final.fatbin tools/kernels/graph.cu >> $OUT/nvcc.log 2>&1; echo "nvcc all: rc=$? ${SECONDS}s" | tee -a $OUT/nvcc.log
gzip -9nc /tmp/final.fatbin > $OUT/graph.fatbin.gz; ls -la $OUT/graph.fatbin.gz
( timeout 120 $T -graph_kernels /tmp/final.fatbin -test.run 'TestGraphGPUOps|TestGraphGPUAttentionKernels|TestGraphGPUFusedChecks|TestGraphGPUDepthwiseLowerings' -test.v > $OUT/test-ops-final.log 2>&1; echo "rc=$?" >> $OUT/test-ops-final.log )
grep -E "^(--- |FAIL|ok|PASS)|panic|rc=" $OUT/test-ops-final.log | tail -8
( GOINFER_GRAPH_MODELS=vit_b_16,resnet50,mobilenet_v3_large,efficientnet_b0,regnet_y_800mf,convnext_tiny,densenet121 GOINFER_GRAPH_PRECISIONS=fp16 timeout 150 $T -graph_kernels /tmp/final.fatbin -test.run TestGraphGPUModels -test.v > $OUT/test-models-final.log 2>&1; echo "rc=$?" >> $OUT/test-models-final.log )
grep -E "^(--- |FAIL|ok|PASS)|panic|rc=" $OUT/test-models-final.log | tail -6
for bs in 256 1; do
  $B compute --arch vit_b_16 --engine cuda --precisions fp16 --compile true --batch_sizes $bs --image_sizes 224 --input_dtype fp32 --iters 200 --warmup 20 --graph_kernels /tmp/final.fatbin > /tmp/c.log 2>&1
  echo "final vit b$bs: $(grep -E 'img/s|rror' /tmp/c.log | head -1)" | tee -a $OUT/ab.log
done
echo "total ${SECONDS}s"
