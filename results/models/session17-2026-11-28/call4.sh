set -u
mkdir -p /tmp/s17 && xz -dc .bin/s17.tar.xz | tar xf - -C /tmp/s17
B=/tmp/s17/goinfer; T=/tmp/s17/cuda.test
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
sha256sum tools/kernels/graph.cu | tee -a $OUT/gpu.txt
gunzip -c internal/engine/cuda/kernels/graph.fatbin.gz > /tmp/a.fatbin
G=""; for a in 80 86 89 90 100 120; do G="$G -gencode arch=compute_$a,code=sm_$a"; done
NV=/usr/local/cuda/bin/nvcc
SECONDS=0
$NV -t 8 -fatbin $G -gencode arch=compute_80,code=compute_80 -O3 -Xptxas -v -DATTN_MINB=4 -DLNG_MINB=4 -o /tmp/b.fatbin tools/kernels/graph.cu > /tmp/nv-b.log 2>&1 &
$NV -t 8 -fatbin $G -gencode arch=compute_80,code=compute_80 -O3 -Xptxas -v -DATTN_MINB=5 -DLNG_MINB=5 -o /tmp/c.fatbin tools/kernels/graph.cu > /tmp/nv-c.log 2>&1 &
$NV -fatbin -gencode arch=compute_90,code=sm_90 -O3 -Xptxas -v -DATTN_MINB=6 -DLNG_MINB=6 -o /tmp/d.fatbin tools/kernels/graph.cu > /tmp/nv-d.log 2>&1 &
wait; echo "nvcc: ${SECONDS}s" | tee $OUT/regs.txt
for v in b c d; do for k in g_attn_ldm64_f16 g_attn_mma64_f16 g_layernorm_group_f16; do echo "$v $k: $(grep -A3 "entry function '$k' for 'sm_90'" /tmp/nv-$v.log | grep -E 'Used|spill' | tr '\n' ' ')"; done; done | tee -a $OUT/regs.txt
gzip -9nc /tmp/b.fatbin > $OUT/b.fatbin.gz; gzip -9nc /tmp/c.fatbin > $OUT/c.fatbin.gz
C="compute --engine cuda --precisions fp16 --compile true --image_sizes 224 --input_dtype fp32"
for r in 1 2; do for v in a b c d; do
  timeout 50 $B $C --arch vit_b_16 --batch_sizes 256 --iters 30 --warmup 5 --graph_kernels /tmp/$v.fatbin > /tmp/c.log 2>&1
  echo "vit_b_16 b256 $v: $(grep -E 'img/s|rror' /tmp/c.log | head -1)" | tee -a $OUT/ab.log
done; done
for v in a b c d; do
  timeout 50 $B $C --arch convnext_tiny --batch_sizes 256 --iters 30 --warmup 5 --graph_kernels /tmp/$v.fatbin > /tmp/c.log 2>&1
  echo "convnext_tiny b256 $v: $(grep -E 'img/s|rror' /tmp/c.log | head -1)" | tee -a $OUT/ab.log
done
for v in b c d; do
  ( timeout 60 $T -graph_kernels /tmp/$v.fatbin -test.run 'TestGraphGPUAttentionKernels|TestGraphGPULayerNormGroup|TestGraphGPUFusedChecks' -test.v > /tmp/t.log 2>&1; echo "$v rc=$?"; grep -E "^(--- |FAIL|ok|PASS)|relative error|panic" /tmp/t.log ) >> $OUT/tests.log 2>&1
done
grep rc= $OUT/tests.log
for m in efficientnet_b0 mobilenet_v3_large; do
  timeout 50 $B $C --arch $m --batch_sizes 256 --iters 20 --warmup 5 --profile --graph_kernels /tmp/a.fatbin > /tmp/p.log 2>&1
  sed -n '/by kind/,$p' /tmp/p.log > $OUT/prof-$m-b256-kinds.md; grep -E "^\|" /tmp/p.log | sort -t'|' -k5 -rn | head -25 >> $OUT/prof-$m-b256-kinds.md
done
echo "total ${SECONDS}s"
