#!/usr/bin/env bash
# Encoded images through goinfer's serving paths on one GPU: the pipeline's
# nvJPEG decode stage in process (bench --images), and served over HTTP and
# gRPC with the GPU decoder and with host decoding (serve --image_decoder),
# 64 clients sending one JPEG each, top-5 back.
#
#   GOINFER=.bin/goinfer IMAGES=.bin/benchjpg tools/gpu_serve_images.sh [inprocess] [served]
#
# IMAGES is written by tools/images/make_photos.py --bench --grain 11 when it
# does not exist (500x375 q90, ~77 KB). ARCH, BATCH, CLIENTS and ITERS
# override the defaults.
set -uo pipefail
GOINFER=${GOINFER:-.bin/goinfer}
IMAGES=${IMAGES:-.bin/benchjpg}
ARCH=${ARCH:-resnet18}
BATCH=${BATCH:-256}
CLIENTS=${CLIENTS:-64}
ITERS=${ITERS:-20000}
sections=${*:-inprocess served}
fp16=(--input_dtype fp16 --precision fp16)

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
if [ ! -d "$IMAGES" ]; then
  python3 tools/images/make_photos.py --bench --count 256 --grain 11 "$IMAGES" || exit 1
fi

serve_and_bench() { # $1: --image_decoder value
  "$GOINFER" serve --engine cuda --arch "$ARCH" --image_size 224 "${fp16[@]}" --max_batch_size "$BATCH" \
    --image_decoder "$1" --http 127.0.0.1:18000 --grpc 127.0.0.1:18001 --log_level warn &
  local pid=$!
  # The ports open only once the model is loaded (and tuned): wait for it,
  # else the first bench is refused.
  local ok=0
  for _ in $(seq 600); do
    curl -sf http://127.0.0.1:18000/v2/health/ready >/dev/null 2>&1 && { ok=1; break; }
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if [ $ok = 0 ]; then
    echo "server (--image_decoder $1) did not become ready" >&2
    kill "$pid" 2>/dev/null; wait "$pid"
    return 1
  fi
  for url in http://127.0.0.1:18000 grpc://127.0.0.1:18001; do
    echo "+ bench --url $url --images $IMAGES (server decodes on: $1)"
    "$GOINFER" bench --url "$url" --images "$IMAGES" --batch_size 1 --concurrency "$CLIENTS" \
      --num_iters "$ITERS" --output_file serve_images.csv --experiment "decoder=$1"
  done
  kill "$pid"
  wait "$pid"
}

for s in $sections; do
  case $s in
  inprocess)
    echo "+ bench --images $IMAGES --batch_size $BATCH (in process, nvJPEG in the copy stage)"
    "$GOINFER" bench --engine cuda --arch "$ARCH" --images "$IMAGES" --image_size 224 --batch_size "$BATCH" \
      --num_iters 200 "${fp16[@]}" --output_file serve_images.csv --experiment inprocess ;;
  served)
    serve_and_bench gpu
    serve_and_bench cpu ;;
  *) echo "unknown section $s (want inprocess, served)" >&2; exit 2 ;;
  esac
done
