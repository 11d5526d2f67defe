#!/usr/bin/env bash
# Regenerates the kernels the cuda engine embeds from tools/kernels/goinfer.cu:
#
#   goinfer.fatbin  nvcc: machine code for sm_80, 86, 89, 90, 100 and 120 and
#                   compute_80 PTX for later GPUs; what the engine loads, so
#                   that no process pays for a JIT compile (1.2 s on an H200)
#   goinfer.ptx     clang's NVPTX back end (PTX ISA 7.0, no CUDA install
#                   needed): the fallback for drivers older than the toolkit
#                   that built the fatbin
#   sources.sha256  the hash of goinfer.cu each was built from (a test checks
#                   that they match the source)
#
# and tools/kernels/images.cu (the GPU image preprocessing) into
# internal/imagegpu/kernels/images.ptx (clang) and images.fatbin (nvcc), with
# their own sources.sha256.
#
#   tools/kernels/build.sh                     # both: nvcc and clang-14 (or clang)
#   NVCC=/usr/local/cuda/bin/nvcc CLANG=clang-18 tools/kernels/build.sh
#
# With only one of the compilers, only its file (and its line of
# sources.sha256) is rebuilt.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/../../internal/engine/cuda/kernels"
src="$here/goinfer.cu"
mkdir -p "$out"
nvcc="${NVCC:-$(command -v nvcc || true)}"
if [[ -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]]; then nvcc=/usr/local/cuda/bin/nvcc; fi
clang="${CLANG:-$(command -v clang-14 || command -v clang || true)}"
sum="$(sha256sum "$src" | cut -d' ' -f1)"
record() { # artifact: replace its line in sources.sha256
  touch "$out/sources.sha256"
  { grep -v " $1\$" "$out/sources.sha256" || true; echo "$sum $1"; } | sort -k2 >"$out/sources.sha256.tmp"
  mv "$out/sources.sha256.tmp" "$out/sources.sha256"
}
built=0
if [[ -n "$nvcc" ]]; then
  gencode=()
  for a in 80 86 89 90 100 120; do gencode+=(-gencode "arch=compute_$a,code=sm_$a"); done
  "$nvcc" -fatbin "${gencode[@]}" -gencode arch=compute_80,code=compute_80 -O3 -o "$out/goinfer.fatbin" "$src"
  record goinfer.fatbin
  echo "nvcc: $src -> $out/goinfer.fatbin"
  built=1
fi
iout="$here/../../internal/imagegpu/kernels"
isum="$(sha256sum "$here/images.cu" | cut -d' ' -f1)"
irecord() {
  touch "$iout/sources.sha256"
  { grep -v " $1\$" "$iout/sources.sha256" || true; echo "$isum $1"; } | sort -k2 >"$iout/sources.sha256.tmp"
  mv "$iout/sources.sha256.tmp" "$iout/sources.sha256"
}
mkdir -p "$iout"
if [[ -n "$nvcc" ]]; then
  "$nvcc" -fatbin "${gencode[@]}" -gencode arch=compute_80,code=compute_80 -O3 -o "$iout/images.fatbin" "$here/images.cu"
  irecord images.fatbin
  echo "nvcc: $here/images.cu -> $iout/images.fatbin"
fi
if [[ -n "$clang" ]]; then
  "$clang" -x cuda --cuda-device-only --cuda-gpu-arch=sm_80 -nocudainc -nocudalib -O3 -S \
    -o "$iout/images.ptx" "$here/images.cu"
  irecord images.ptx
  echo "clang: $here/images.cu -> $iout/images.ptx"
fi
if [[ -n "$clang" ]]; then
  "$clang" -x cuda --cuda-device-only --cuda-gpu-arch=sm_80 -nocudainc -nocudalib -O3 -S \
    -o "$out/goinfer.ptx" "$src"
  record goinfer.ptx
  echo "clang: $src -> $out/goinfer.ptx"
  built=1
fi
# tools/kernels/graph.cu: the general-graph executor's kernels, with their
# own checksum file (graph.sha256) so that the engine can tell a fatbin
# built from an older source than the PTX and load the PTX instead.
gsum="$(sha256sum "$here/graph.cu" | cut -d' ' -f1)"
grecord() {
  touch "$out/graph.sha256"
  { grep -v " $1\$" "$out/graph.sha256" || true; echo "$gsum $1"; } | sort -k2 >"$out/graph.sha256.tmp"
  mv "$out/graph.sha256.tmp" "$out/graph.sha256"
}
if [[ -n "$nvcc" ]]; then
  # Kept gzipped (graph.fatbin.gz): the engine decompresses it at load.
  "$nvcc" -fatbin "${gencode[@]}" -gencode arch=compute_80,code=compute_80 -O3 -o "$out/graph.fatbin" "$here/graph.cu"
  gzip -9nf "$out/graph.fatbin"
  grecord graph.fatbin
  echo "nvcc: $here/graph.cu -> $out/graph.fatbin.gz"
fi
if [[ -n "$clang" ]]; then
  "$clang" -x cuda --cuda-device-only --cuda-gpu-arch=sm_80 -nocudainc -nocudalib -O3 -S \
    -o "$out/graph.ptx" "$here/graph.cu"
  grecord graph.ptx
  echo "clang: $here/graph.cu -> $out/graph.ptx"
fi
if [[ $built == 0 ]]; then
  echo "build.sh: neither nvcc nor clang found; install the CUDA toolkit or clang" >&2
  exit 1
fi
