set -u
mkdir -p /tmp/s17 && xz -dc .bin/s17.tar.xz | tar xf - -C /tmp/s17
B=/tmp/s17/goinfer
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
sha256sum tools/kernels/graph.cu | tee -a $OUT/gpu.txt
NV="/usr/local/cuda/bin/nvcc -fatbin -gencode arch=compute_90,code=sm_90 -O3 -Xptxas -v"
SECONDS=0
$NV -o /tmp/a.fatbin tools/kernels/graph.cu > /tmp/nv-a.log 2>&1 &
$NV -DDWB_MINB14=3 -DDWB_MINB7=5 -o /tmp/b.fatbin tools/kernels/graph.cu > /tmp/nv-b.log 2>&1 &
$NV -DDWB_MINB14=4 -DDWB_MINB7=5 -o /tmp/c.fatbin tools/kernels/graph.cu > /tmp/nv-c.log 2>&1 &
wait; echo "nvcc: ${SECONDS}s" | tee $OUT/regs.txt
for v in a b c; do for k in g_dwb_k7s1t14_f16 g_dwb_k7s1t7_f16; do echo "$v $k: $(grep -A3 "entry function '$k'" /tmp/nv-$v.log | grep -E 'Used|spill' | tr '\n' ' ')"; done; done | tee -a $OUT/regs.txt
C="compute --engine cuda --precisions fp16 --compile true --image_sizes 224 --input_dtype fp32"
for r in 1 2; do for v in a b c; do
  timeout 60 $B $C --arch convnext_tiny --batch_sizes 256 --iters 40 --warmup 5 --graph_kernels /tmp/$v.fatbin > /tmp/c.log 2>&1
  echo "convnext_tiny b256 $v: $(grep -E 'img/s|rror' /tmp/c.log | head -1)" | tee -a $OUT/ab.log
  [ $r = 1 ] && { echo "== $v"; grep "depthwise" /tmp/c.log; } >> $OUT/dwcands256.log
done; done
for m in mobilenet_v3_large efficientnet_b0; do for v in a b c; do
  timeout 60 $B $C --arch $m --batch_sizes 256 --iters 40 --warmup 5 --graph_kernels /tmp/$v.fatbin > /tmp/c.log 2>&1
  echo "$m b256 $v: $(grep -E 'img/s|rror' /tmp/c.log | head -1)" | tee -a $OUT/ab.log
  { echo "== $m $v"; grep "depthwise" /tmp/c.log | grep shared; } >> $OUT/dwcands256.log
done; done
timeout 60 $B $C --arch convnext_tiny --batch_sizes 256 --iters 20 --warmup 5 --profile --graph_kernels /tmp/a.fatbin > $OUT/prof-convnext-b256.log 2>&1
echo "total ${SECONDS}s"
