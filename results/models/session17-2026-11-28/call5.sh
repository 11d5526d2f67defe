set -u
mkdir -p /tmp/s17 && xz -dc .bin/s17.tar.xz | tar xf - -C /tmp/s17
B=/tmp/s17/goinfer; T=/tmp/s17/cuda.test
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
sha256sum tools/kernels/graph.cu | tee -a $OUT/gpu.txt
G=""; for a in 80 86 89 90 100 120; do G="$G -gencode arch=compute_$a,code=sm_$a"; done
SECONDS=0; /usr/local/cuda/bin/nvcc -t 16 -fatbin $G -gencode arch=compute_80,code=compute_80 -O3 -Xptxas -v -o /tmp/g.fatbin tools/kernels/graph.cu > /tmp/nvcc.log 2>&1; echo "nvcc all: rc=$? ${SECONDS}s" | tee $OUT/build.log
for k in g_dwb_k7s1t14_f16 g_dwb_k3s1t14_f16 g_dwb_k7s1t7_f16 g_layernorm_group_f16 g_attn_ldm64_f16 g_attn_mma64_f16; do echo "$k sm_90: $(grep -A3 "entry function '$k' for 'sm_90'" /tmp/nvcc.log | grep -E 'Used|spill' | tr '\n' ' ')"; done | tee -a $OUT/build.log
gzip -9nc /tmp/g.fatbin > $OUT/graph.fatbin.gz
K="--graph_kernels /tmp/g.fatbin"
C="compute --engine cuda --precisions fp16 --compile true --image_sizes 224 --input_dtype fp32"
for m in convnext_tiny vit_b_16 efficientnet_b0 mobilenet_v3_large; do for bs in 256 1; do
  it=40; [ $bs = 1 ] && it=200
  timeout 50 $B $C --arch $m --batch_sizes $bs --iters $it --warmup 10 $K > /tmp/c.log 2>&1
  echo "final $m b$bs: $(grep -E 'img/s|rror' /tmp/c.log | head -1)" | tee -a $OUT/final.log
  [ $bs = 256 ] && grep depthwise /tmp/c.log >> $OUT/dwcands256.log
done; done
timeout 50 $B $C --arch convnext_tiny --batch_sizes 256 --iters 40 --warmup 10 $K > /tmp/c.log 2>&1; echo "final convnext_tiny b256 (2): $(grep -E 'img/s|rror' /tmp/c.log | head -1)" | tee -a $OUT/final.log
( SECONDS=0; timeout 150 $T -graph_kernels /tmp/g.fatbin -test.run 'TestGraphGPUDepthwiseLowerings|TestGraphGPUFusedChecks|TestGraphGPUOps|TestGraphGPUAttentionKernels|TestGraphGPULayerNormGroup' -test.v > /tmp/t.log 2>&1; echo "ops tests rc=$? ${SECONDS}s" >> /tmp/t.log; grep -E "^(--- |FAIL|ok|PASS)|relative error|panic|rc=" /tmp/t.log > $OUT/tests.log )
tail -7 $OUT/tests.log
( SECONDS=0; GOINFER_GRAPH_MODELS=convnext_tiny,vit_b_16,mobilenet_v3_large,efficientnet_b0,regnet_y_800mf,densenet121,resnet50 GOINFER_GRAPH_PRECISIONS=fp16 timeout 150 $T -graph_kernels /tmp/g.fatbin -test.run TestGraphGPUModels -test.v > /tmp/m.log 2>&1; echo "models rc=$? ${SECONDS}s" >> /tmp/m.log; grep -E "^(--- |FAIL|ok|PASS)|RESULT|relative|panic|rc=" /tmp/m.log > $OUT/test-models.log )
tail -3 $OUT/test-models.log
echo "total ${SECONDS}s"
