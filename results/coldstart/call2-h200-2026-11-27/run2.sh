#!/usr/bin/env bash
# Device call 2 (cold-start branch): main vs this branch on the issue's
# workload (goinfer bench --engine cuda --batch_size 256, compiled, no tuning
# cache), 3 cold runs each alternating, plus the heuristic tuning mode, the
# bench default (batch 32), logits base vs new vs cpu, and the GPU tests.
set -u
D=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)
B=/tmp/cs
mkdir -p $B && xz -dc "$D/bins2.tar.xz" | tar -x -C $B
PY=/opt/torch/.venv/bin/python3; [ -x $PY ] || PY=python3
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu.txt 2>&1
$B/goinfer-base doctor >> $OUT/gpu.txt 2>&1
# The first run on a fresh machine reads the libraries from disk: not counted.
$B/goinfer-base bench --engine cuda --batch_size 256 --num_iters 5 > /dev/null 2>&1
run() {
  local label=$1 bin=$2 bs=$3; shift 3
  echo "### $label $bin batch $bs $*"
  local t0=$(date +%s.%N)
  env "$@" GOINFER_PHASES=1 $B/$bin bench --engine cuda --batch_size $bs --results_dir $OUT --output_file runs.csv --experiment $label 2>&1
  echo "### wall $label $(awk "BEGIN{print $(date +%s.%N) - $t0}") s"
}
{
for r in 1 2 3; do
  run base$r goinfer-base 256
  run new$r goinfer-new 256
  run heur$r goinfer-new 256 GOINFER_CUDA_TUNE=heuristic
done
run newall goinfer-new 256 GOINFER_CUDA_TUNE=all
for r in 1 2; do
  run base32_$r goinfer-base 32
  run new32_$r goinfer-new 32
  run heur32_$r goinfer-new 32 GOINFER_CUDA_TUNE=heuristic
done
} > $OUT/runs.log 2>&1
grep -E "^### [a-z]|Warmup latency|Throughput" $OUT/runs.log | paste - - - | awk '{print $2, $(NF-3), $NF}' | head -40
{
$PY -c "import numpy as np; np.save('/tmp/x.npy', np.random.default_rng(0).standard_normal((8,3,224,224)).astype(np.float32))"
for p in fp16 fp32 bf16; do for b in base new; do
  $B/goinfer-$b predict --engine cuda --precision $p --compile --input /tmp/x.npy --output /tmp/$b-$p.npy --batch_size 8 --topk 0 >/dev/null 2>&1 || echo "predict $b $p FAILED"
done; done
GOINFER_CUDA_TUNE=heuristic $B/goinfer-new predict --engine cuda --precision fp16 --compile --input /tmp/x.npy --output /tmp/heur-fp16.npy --batch_size 8 --topk 0 >/dev/null 2>&1
$B/goinfer-new predict --engine cpu --input /tmp/x.npy --output /tmp/cpu.npy --batch_size 8 --topk 0 >/dev/null 2>&1
$PY - <<'PYEOF'
import numpy as np
ref = np.load('/tmp/cpu.npy')
for name in ['base-fp16','new-fp16','heur-fp16','base-fp32','new-fp32','base-bf16','new-bf16']:
    try:
        g = np.load('/tmp/%s.npy' % name)
    except Exception as e:
        print(name, 'missing', e); continue
    print('%-10s vs cpu fp32: max|d|/max|ref| = %.3e, top-1 same: %s' % (name, np.abs(g-ref).max()/np.abs(ref).max(), bool((g.argmax(1)==ref.argmax(1)).all())))
for p in ['fp16','fp32','bf16']:
    a, b = np.load('/tmp/base-%s.npy'%p), np.load('/tmp/new-%s.npy'%p)
    print('%s base vs new: max|d|/max|ref| = %.3e' % (p, np.abs(a-b).max()/np.abs(a).max()))
PYEOF
} > $OUT/logits.log 2>&1
cat $OUT/logits.log
cd $R/internal/engine/cuda && timeout 35 $B/cudatest -test.run 'TestGolden|TestInputDTypes|TestStemModes|TestTuningCache|TestHostWeights|TestPrepare' -test.v > $OUT/gputests.log 2>&1
echo "gpu tests rc=$?"; grep -E "^(--- |ok|FAIL|PASS)" $OUT/gputests.log | grep -v "^    " | tail -15
