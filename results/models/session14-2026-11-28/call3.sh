set -u
cd .bin/s14 && xz -dc bins.tar.xz | tar xf - && cd ../..
B=.bin/s14/goinfer; T=.bin/s14/cuda.test
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
SECONDS=0
/usr/local/cuda/bin/nvcc -t 8 -fatbin -gencode arch=compute_90,code=sm_90 -O3 -o /tmp/pf.fatbin tools/kernels/graph.cu > $OUT/nvcc.log 2>&1 &
/usr/local/cuda/bin/nvcc -t 8 -fatbin -gencode arch=compute_90,code=sm_90 -O3 -DATTN_SPLIT_NOPF -o /tmp/nopf.fatbin tools/kernels/graph.cu >> $OUT/nvcc.log 2>&1 &
wait; echo "nvcc: ${SECONDS}s" | tee -a $OUT/nvcc.log; ls -la /tmp/*.fatbin
( timeout 100 $T -graph_kernels /tmp/pf.fatbin -test.run 'TestGraphGPUAttentionKernels|TestGraphGPUFusedChecks' -test.v > $OUT/test-attn.log 2>&1; echo "attn tests rc=$?" >> $OUT/test-attn.log )
grep -E "^(--- |FAIL|ok|PASS)|relative error|panic|rc=" $OUT/test-attn.log | tail -6
for r in 1 2 3; do for v in pf nopf; do
  $B compute --arch vit_b_16 --engine cuda --precisions fp16 --compile true --batch_sizes 1 --image_sizes 224 --input_dtype fp32 --iters 300 --warmup 30 --graph_kernels /tmp/$v.fatbin > /tmp/c.log 2>&1
  echo "vit b1 $v: $(grep -E 'ms/forward|rror' /tmp/c.log | head -1)" | tee -a $OUT/ab-attn.log
done; done
$B compute --arch vit_b_16 --engine cuda --precisions fp16 --compile true --batch_sizes 1 --image_sizes 224 --input_dtype fp32 --iters 100 --warmup 10 --profile --graph_kernels /tmp/pf.fatbin > $OUT/prof-vit-b1.log 2>&1
grep -E "layers_0\." $OUT/prof-vit-b1.log
timeout 150 /usr/local/cuda/bin/ncu -k regex:attn_split --launch-count 1 --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section SchedulerStats $B compute --arch vit_b_16 --engine cuda --precisions fp16 --compile false --batch_sizes 1 --image_sizes 224 --input_dtype fp32 --iters 2 --warmup 1 --graph_kernels /tmp/pf.fatbin > $OUT/ncu-attn-split.log 2>&1; echo "ncu rc=$?"
grep -E "Duration|Stall|Warp Cycles|Achieved Occ|Registers|Throughput" $OUT/ncu-attn-split.log | head -30
