#!/usr/bin/env bash
# One batch of GPU work for the cuda engine, run on the GPU machine from the
# repository root with prebuilt binaries in .bin/ (there is no Go there):
#
#   CGO_ENABLED=0 go build -o .bin/goinfer ./cmd/goinfer
#   CGO_ENABLED=0 go test -c -o .bin/cuda.test ./internal/engine/cuda
#   OUT=/tmp/out tools/cuda_gpu_check.sh [steps]
#
# Steps (default: all): env ptx golden test doctor compute pytorch.
# Long logs go under $OUT; a compact summary is printed last.
set -u
OUT="${OUT:-/tmp/goinfer-gpu}"
mkdir -p "$OUT"
steps="${*:-env ptx golden test doctor compute pytorch}"
PY="${PYTHON:-python3}"
[[ -x /opt/torch/.venv/bin/python3 ]] && PY=/opt/torch/.venv/bin/python3
summary="$OUT/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
has() { [[ " $steps " == *" $1 "* ]]; }
root="$(pwd)"

if has env; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$summary"
  (command -v nvcc || ls /usr/local/cuda/bin/nvcc) >/dev/null 2>&1 && /usr/local/cuda/bin/nvcc --version | tail -2 | tee -a "$summary"
fi
if has ptx; then
  NVCC=/usr/local/cuda/bin/nvcc
  if [[ -x $NVCC ]]; then
    $NVCC -ptx -arch=compute_80 -O3 -o "$OUT/goinfer.ptx" tools/kernels/goinfer.cu && note "ptx: nvcc ok"
  fi
fi
if has golden; then
  t0=$(date +%s)
  $PY tools/golden/make_golden.py --out /tmp/golden --full /tmp/full >"$OUT/golden.log" 2>&1 && note "golden: full resnet18 written in $(( $(date +%s) - t0 )) s" || note "golden: FAILED (see golden.log)"
fi
if has doctor; then
  .bin/goinfer doctor --verbose >"$OUT/doctor.txt" 2>&1; note "doctor: rc=$?"
  head -30 "$OUT/doctor.txt"
fi
if has test; then
  (cd internal/engine/cuda && GOINFER_FULL_RESNET18=/tmp/full GOINFER_EXPECT_GPU=1 timeout 400 "$root/.bin/cuda.test" -test.v -test.timeout 390s ${TEST_ARGS:-} >"$OUT/cuda_test.log" 2>&1)
  note "test: rc=$?"
  grep -E "^(--- FAIL|FAIL|ok|PASS)|rel err|allocations|out of memory error" "$OUT/cuda_test.log" | head -80 | tee -a "$summary"
fi
if has compute; then
  timeout 300 .bin/goinfer compute ${COMPUTE_ARGS:---batch_sizes 1,256 --image_sizes 224 --precisions fp16 --profile} \
    --output "$OUT/compute.md" >"$OUT/compute.stdout" 2>"$OUT/compute.stderr"
  note "compute: rc=$?"
  cat "$OUT/compute.stderr" | tail -40 | tee -a "$summary"
fi
if has pytorch; then
  timeout 300 $PY tools/pytorch_compute.py ${PYTORCH_ARGS:---batch_sizes 1,256 --image_sizes 224 --variants fp16,fp16-graph} >"$OUT/pytorch.md" 2>"$OUT/pytorch.stderr"
  note "pytorch: rc=$?"
  tail -20 "$OUT/pytorch.stderr" | tee -a "$summary"
fi
echo "===== summary"
cat "$summary"
