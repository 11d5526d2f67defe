set -u
mkdir -p /tmp/s17 && xz -dc .bin/s17.tar.xz | tar xf - -C /tmp/s17
B=/tmp/s17/goinfer; T=/tmp/s17/cuda.test
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
sha256sum tools/kernels/graph.cu | tee -a $OUT/gpu.txt
G=""; for a in 80 86 89 90 100 120; do G="$G -gencode arch=compute_$a,code=sm_$a"; done
SECONDS=0
( /usr/local/cuda/bin/nvcc -t 12 -fatbin $G -gencode arch=compute_80,code=compute_80 -O3 -Xptxas -v -o /tmp/g.fatbin tools/kernels/graph.cu > /tmp/nvcc.log 2>&1; echo "nvcc all: rc=$? ${SECONDS}s" > $OUT/build.log ) &
NV=$!
timeout 120 python3 tools/pytorch_compute.py --models convnext_tiny --batches 256 --modes cudagraph,compile --iters 40 --warmup 5 --compile_limit 100 --output $OUT/pytorch.md > /tmp/pt.log 2>&1; echo "pytorch rc=$? ${SECONDS}s" | tee -a $OUT/pytorch.md
grep -E "img/s" /tmp/pt.log | tail -4
wait $NV; cat $OUT/build.log
for k in g_dwb_k3s2t7_f16 g_dwb_k5s2t7_f16; do echo "$k sm_90: $(grep -A3 "entry function '$k' for 'sm_90'" /tmp/nvcc.log | grep -E 'Used|spill' | tr '\n' ' ')"; done | tee -a $OUT/build.log
gzip -9nc /tmp/g.fatbin > $OUT/graph.fatbin.gz
K="--graph_kernels /tmp/g.fatbin"
C="compute --engine cuda --precisions fp16 --compile true --image_sizes 224 --input_dtype fp32"
timeout 50 $B $C --arch convnext_tiny --batch_sizes 256 --iters 40 --warmup 10 $K > /tmp/c.log 2>&1; echo "final convnext_tiny b256: $(grep -E 'img/s|rror' /tmp/c.log | head -1)" | tee -a $OUT/final.log
( timeout 60 $T -graph_kernels /tmp/g.fatbin -test.run 'TestGraphGPUDepthwiseLowerings' -test.v > /tmp/t.log 2>&1; echo "dw tests rc=$? ${SECONDS}s" >> /tmp/t.log; grep -E "^(--- |FAIL|ok|PASS)|relative error|panic|rc=" /tmp/t.log > $OUT/tests.log )
tail -3 $OUT/tests.log
for m in efficientnet_b0 mobilenet_v3_large; do
  timeout 40 $B $C --arch $m --batch_sizes 256 --iters 40 --warmup 10 $K > /tmp/c.log 2>&1; echo "final $m b256: $(grep -E 'img/s|rror' /tmp/c.log | head -1)" | tee -a $OUT/final.log
  grep "depthwise" /tmp/c.log | grep " s2 " >> $OUT/dwcands-s2.log
done
( GOINFER_GRAPH_MODELS=efficientnet_b0,mobilenet_v3_large GOINFER_GRAPH_PRECISIONS=fp16 timeout 60 $T -graph_kernels /tmp/g.fatbin -test.run TestGraphGPUModels -test.v > /tmp/m.log 2>&1; echo "models rc=$? ${SECONDS}s" >> /tmp/m.log; grep -E "^(--- |FAIL|ok|PASS)|RESULT|relative|panic|rc=" /tmp/m.log > $OUT/test-models.log )
tail -3 $OUT/test-models.log
echo "total ${SECONDS}s"
