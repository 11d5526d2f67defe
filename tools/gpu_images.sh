#!/usr/bin/env bash
# Images in, classes out, side by side on one GPU: goinfer's GPU JPEG path
# (decode + preprocess alone, and JPEG -> top-5 with ResNet-18 and -50) and
# PyTorch's best path on the same files (tools/pytorch_images.py).
#
#   GOINFER=.bin/goinfer IMAGES=.bin/benchjpg tools/gpu_images.sh [goinfer] [pytorch]
#
# IMAGES is written by tools/images/make_photos.py --bench --grain 11 when it
# does not exist (500x375 q90, ~77 KB). WORKERS, ITERS and MODELS override
# the defaults.
set -uo pipefail
GOINFER=${GOINFER:-.bin/goinfer}
IMAGES=${IMAGES:-.bin/benchjpg}
WORKERS=${WORKERS:-"2 3"}
ITERS=${ITERS:-100}
MODELS=${MODELS:-"resnet18 resnet50"}
sections=${*:-goinfer pytorch}

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
if [ ! -d "$IMAGES" ]; then
  python3 tools/images/make_photos.py --bench --count 256 --grain 11 "$IMAGES" || exit 1
fi

for s in $sections; do
  case $s in
  goinfer)
    for m in $MODELS; do
      for w in $WORKERS; do
        echo "+ goinfer images --images $IMAGES --arch $m --workers $w --iters $ITERS"
        "$GOINFER" images --images "$IMAGES" --arch "$m" --workers "$w" --iters "$ITERS"
      done
    done ;;
  pytorch)
    echo "+ python3 tools/pytorch_images.py --images $IMAGES --iters 20"
    python3 tools/pytorch_images.py --images "$IMAGES" --iters 20 --models "${MODELS// /,}" ;;
  *) echo "unknown section $s (want goinfer, pytorch)" >&2; exit 2 ;;
  esac
done
