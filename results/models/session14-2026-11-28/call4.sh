set -u
cd .bin/s14 && xz -dc bins.tar.xz | tar xf - && cd ../..
B=.bin/s14/goinfer; T=.bin/s14/cuda.test
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
gunzip -c internal/engine/cuda/kernels/graph.fatbin.gz > /tmp/graph.fatbin; sha256sum tools/kernels/graph.cu | tee -a $OUT/gpu.txt
K="--graph_kernels /tmp/graph.fatbin"
for m in resnet50 mobilenet_v3_large efficientnet_b0 regnet_y_800mf convnext_tiny vit_b_16 densenet121; do
  echo "## $m" >> $OUT/compute-all.log
  $B compute --arch $m --engine cuda --precisions fp16 --compile true --batch_sizes 1,256 --image_sizes 224 --input_dtype fp32 --iters 100 --warmup 10 $K >> $OUT/compute-all.log 2>&1
  grep -E "^\| cuda \| fp16" $OUT/compute-all.log | tail -2
done
timeout 200 python3 tools/pytorch_compute.py --models resnet50,mobilenet_v3_large,efficientnet_b0,regnet_y_800mf,convnext_tiny,vit_b_16,densenet121 --batches 256,1 --modes cudagraph --budget 170 --output $OUT/pytorch.md > $OUT/pytorch.log 2>&1; echo "pytorch rc=$?"; cat $OUT/pytorch.md | tail -16
( SECONDS=0; timeout 120 $T -graph_kernels /tmp/graph.fatbin -test.run 'TestGraphGPUDepthwiseLowerings|TestGraphGPUFusedChecks|TestGraphGPUOps|TestGraphGPUAttentionKernels' -test.v > $OUT/test-ops.log 2>&1; echo "ops tests rc=$? ${SECONDS}s" >> $OUT/test-ops.log )
grep -E "^(--- |FAIL|ok|PASS)|panic|rc=" $OUT/test-ops.log | tail -8
( SECONDS=0; GOINFER_GRAPH_PRECISIONS=fp32,fp16 timeout 170 $T -graph_kernels /tmp/graph.fatbin -test.run 'TestGraphGPUModels' -test.v > $OUT/test-models.log 2>&1; echo "models rc=$? ${SECONDS}s" >> $OUT/test-models.log )
grep -E "^(--- |FAIL|ok|PASS)|FAIL|panic|rc=" $OUT/test-models.log | tail -14; grep -c "RESULT.* ok" $OUT/test-models.log
