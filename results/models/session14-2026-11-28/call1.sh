set -u
cd .bin/s14 && xz -dc bins.tar.xz | tar xf - && cd ../..
B=.bin/s14/goinfer; T=.bin/s14/cuda.test
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
SECONDS=0; /usr/local/cuda/bin/nvcc -t 16 -fatbin -gencode arch=compute_90,code=sm_90 -O3 -o /tmp/g.fatbin tools/kernels/graph.cu > $OUT/nvcc.log 2>&1; echo "nvcc sm_90: rc=$? ${SECONDS}s" | tee -a $OUT/nvcc.log
K="--graph_kernels /tmp/g.fatbin"
( SECONDS=0; timeout 200 $T -graph_kernels /tmp/g.fatbin -test.run 'TestGraphGPUDepthwiseLowerings|TestGraphGPUFusedChecks' -test.v > $OUT/test-dw.log 2>&1; echo "dw tests rc=$? ${SECONDS}s" >> $OUT/test-dw.log )
grep -E "^(--- |FAIL|ok|PASS)|relative error|panic|rc=|dependent" $OUT/test-dw.log | tail -14
for m in convnext_tiny vit_b_16 mobilenet_v3_large efficientnet_b0; do
  for ex in "" nopdl nodwslide "" nopdl nodwslide; do
    $B compute --arch $m --engine cuda --precisions fp16 --compile true --batch_sizes 1 --image_sizes 224 --input_dtype fp32 --iters 200 --warmup 20 $K ${ex:+--graph_experiments $ex} > /tmp/c.log 2>&1
    echo "$m ${ex:-new}: $(grep -E 'ms/forward|not used|rror|dependent' /tmp/c.log | head -3 | tr '\n' ' ')" | tee -a $OUT/ab.log
    [ -z "$ex" ] && grep "depthwise" /tmp/c.log >> $OUT/dwcands.log
  done
done
$B compute --arch convnext_tiny --engine cuda --precisions fp16 --compile true --batch_sizes 1 --image_sizes 224 --input_dtype fp32 --iters 100 --warmup 10 --profile $K > $OUT/prof-convnext-b1.log 2>&1
grep -E "block.0 " $OUT/prof-convnext-b1.log | head -8
( SECONDS=0; GOINFER_GRAPH_MODELS=convnext_tiny,mobilenet_v3_large GOINFER_GRAPH_PRECISIONS=fp16 timeout 150 $T -graph_kernels /tmp/g.fatbin -test.run 'TestGraphGPUModels' -test.v > $OUT/test-models.log 2>&1; echo "models rc=$? ${SECONDS}s" >> $OUT/test-models.log )
grep -E "^(--- |FAIL|ok|PASS)|RESULT|panic|rc=" $OUT/test-models.log | tail -12
