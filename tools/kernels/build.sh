#!/usr/bin/env bash
# Regenerates the PTX that the cuda engine embeds from tools/kernels/*.cu.
#
#   tools/kernels/build.sh            # nvcc if found, else clang
#   NVCC=/usr/local/cuda/bin/nvcc tools/kernels/build.sh
#
# PTX for compute_80 is JIT-compiled by the driver for the GPU it runs on
# (Ampere, Ada, Hopper, Blackwell), so one file serves them all. nvcc and
# clang's NVPTX back end both produce it; clang needs no CUDA install, which
# keeps the kernels rebuildable on machines without a GPU.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/../../internal/engine/cuda/kernels"
mkdir -p "$out"
nvcc="${NVCC:-$(command -v nvcc || true)}"
if [[ -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]]; then nvcc=/usr/local/cuda/bin/nvcc; fi
clang="${CLANG:-$(command -v clang-14 || command -v clang || true)}"
for src in "$here"/*.cu; do
  name="$(basename "$src" .cu)"
  if [[ -n "$nvcc" ]]; then
    "$nvcc" -ptx -arch=compute_80 -O3 -o "$out/$name.ptx" "$src"
    echo "nvcc: $src -> $out/$name.ptx"
  elif [[ -n "$clang" ]]; then
    "$clang" -x cuda --cuda-device-only --cuda-gpu-arch=sm_80 -nocudainc -nocudalib -O3 -S \
      -o "$out/$name.ptx" "$src"
    echo "clang: $src -> $out/$name.ptx"
  else
    echo "build.sh: neither nvcc nor clang found; install the CUDA toolkit or clang" >&2
    exit 1
  fi
done
