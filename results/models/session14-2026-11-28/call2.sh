set -u
cd .bin/s14 && xz -dc bins.tar.xz | tar xf - && cd ../..
B=.bin/s14/goinfer; T=.bin/s14/cuda.test
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
sha256sum tools/kernels/graph.cu | tee -a $OUT/gpu.txt
SECONDS=0; /usr/local/cuda/bin/nvcc -t 16 -fatbin -gencode arch=compute_80,code=sm_80 -gencode arch=compute_86,code=sm_86 -gencode arch=compute_89,code=sm_89 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_100,code=sm_100 -gencode arch=compute_120,code=sm_120 -gencode arch=compute_80,code=compute_80 -O3 -o /tmp/g.fatbin tools/kernels/graph.cu > $OUT/nvcc.log 2>&1; echo "nvcc all: rc=$? ${SECONDS}s" | tee -a $OUT/nvcc.log
gzip -9nc /tmp/g.fatbin > $OUT/graph.fatbin.gz; ls -la /tmp/g.fatbin $OUT/graph.fatbin.gz
K="--graph_kernels /tmp/g.fatbin"
( SECONDS=0; timeout 150 $T -graph_kernels /tmp/g.fatbin -test.run 'TestGraphGPUDepthwiseLowerings|TestGraphGPUFusedChecks|TestGraphGPUOps|TestGraphGPUAttentionKernels' -test.v > $OUT/test-ops.log 2>&1; echo "ops tests rc=$? ${SECONDS}s" >> $OUT/test-ops.log )
grep -E "^(--- |FAIL|ok|PASS)|relative error|panic|rc=" $OUT/test-ops.log | tail -12
for m in vit_b_16 convnext_tiny mobilenet_v3_large efficientnet_b0 regnet_y_800mf resnet50 densenet121 vit_b_16; do
  for ex in "" pdlall nopdl; do
    $B compute --arch $m --engine cuda --precisions fp16 --compile true --batch_sizes 1 --image_sizes 224 --input_dtype fp32 --iters 200 --warmup 20 $K ${ex:+--graph_experiments $ex} > /tmp/c.log 2>&1
    echo "$m ${ex:-new}: $(grep -E 'ms/forward|not used|rror' /tmp/c.log | head -2 | tr '\n' ' ')" | tee -a $OUT/ab-b1.log
    [ -z "$ex" ] && grep "depthwise" /tmp/c.log >> $OUT/dwcands.log
  done
done
for m in convnext_tiny mobilenet_v3_large efficientnet_b0; do
  for ex in "" nodwslide; do
    $B compute --arch $m --engine cuda --precisions fp16 --compile true --batch_sizes 256 --image_sizes 224 --input_dtype fp32 --iters 40 --warmup 5 $K ${ex:+--graph_experiments $ex} > /tmp/c.log 2>&1
    echo "$m b256 ${ex:-new}: $(grep -E 'ms/forward|rror' /tmp/c.log | head -1)" | tee -a $OUT/ab-b256.log
    [ -z "$ex" ] && grep "depthwise" /tmp/c.log >> $OUT/dwcands256.log
  done
done
( SECONDS=0; GOINFER_GRAPH_MODELS=convnext_tiny,efficientnet_b0,vit_b_16 GOINFER_GRAPH_PRECISIONS=fp16 timeout 120 $T -graph_kernels /tmp/g.fatbin -test.run 'TestGraphGPUModels' -test.v > $OUT/test-models.log 2>&1; echo "models rc=$? ${SECONDS}s" >> $OUT/test-models.log
  GOINFER_GRAPH_MODELS=mobilenet_v3_large timeout 60 $T -graph_kernels /tmp/g.fatbin -test.run 'TestGraphGPUModels' -test.v >> $OUT/test-models.log 2>&1; echo "mnv3 all precisions rc=$? ${SECONDS}s" >> $OUT/test-models.log )
grep -E "^(--- |FAIL|ok|PASS)|RESULT|panic|rc=" $OUT/test-models.log | tail -24
