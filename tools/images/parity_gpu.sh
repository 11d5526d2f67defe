#!/usr/bin/env bash
# Preprocessing parity of goinfer's image path against torchvision (issue
# #14): goinfer serves testdata/golden/resnet18_w8.pth in fp32 with
# --image_decoder DECODER; each committed photo (testdata/photos), the
# small coding-variant JPEGs of internal/jpeg's tests (testdata/jpeg) and 64
# bench JPEGs (500x375 q90, tools/images/make_photos.py --bench) go through
# its image input, and the logits are compared with PyTorch's float64
# logits for torchvision's PIL transform of the same files
# (tools/images/parity.py): max|got-ref|/max|ref| and top-1 per image.
# Writes results/images/parity-<device>-<date>.md.
#
#   GOINFER=.bin/goinfer tools/images/parity_gpu.sh              # the GPU path (nvJPEG), tolerance 1e-2
#   ENGINE=cpu DECODER=cpu tools/images/parity_gpu.sh            # the CPU path, tolerance 1e-3
#
# PYTHON (python3), WORK (a temporary directory), OUT (results/images),
# COUNT (64), PORT (18620) and TOL override the defaults. Exits non-zero
# when an image misses the tolerance or top-1.
set -euo pipefail
cd "$(dirname "$0")/../.."
GOINFER=${GOINFER:-.bin/goinfer}
PYTHON=${PYTHON:-python3}
ENGINE=${ENGINE:-cuda}
DECODER=${DECODER:-gpu}
OUT=${OUT:-results/images}
COUNT=${COUNT:-64}
PORT=${PORT:-18620}
# The issue's tolerances: nvJPEG rounds its IDCT differently from
# libjpeg-turbo (1e-2); the CPU decoder (internal/jpeg) rounds as libjpeg
# does (1e-3).
if [ "$DECODER" = cpu ]; then TOL=${TOL:-1e-3}; else TOL=${TOL:-1e-2}; fi
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK" "$OUT"

if [ "$ENGINE" = cuda ]; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
  device=$(echo "$gpu" | tr 'A-Z' 'a-z' | grep -oE '\b[a-z]?[0-9]{2,4}[a-z]?\b' | head -1 || true)
  gpu=${gpu:-a GPU}
  device=${device:-gpu}
else
  gpu="CPU ($(nproc) cores)"
  device=cpu
fi
report="$OUT/parity-$device-$(date -u +%Y-%m-%d).md"
[ "$DECODER" = cpu ] && [ "$ENGINE" = cuda ] && report="$OUT/parity-$device-cpudecoder-$(date -u +%Y-%m-%d).md"
echo "device: $gpu; engine $ENGINE, decoder $DECODER; report $report; work dir $WORK"

[ -x "$GOINFER" ] || { echo "no goinfer binary at $GOINFER (go build -o $GOINFER ./cmd/goinfer)" >&2; exit 2; }
if [ ! -d "$WORK/bench" ]; then
  "$PYTHON" tools/images/make_photos.py --bench --count "$COUNT" --grain 11 "$WORK/bench"
fi
"$PYTHON" tools/images/parity.py --out "$WORK/ref" testdata/photos/*.jpg testdata/photos/*.png testdata/jpeg/*.jpg "$WORK"/bench/*.jpg

serve=("$GOINFER" serve --engine "$ENGINE" --precision fp32 --input_dtype fp32 --checkpoint testdata/golden/resnet18_w8.pth
  --model_name resnet18_w8 --image_size 224 --image_decoder "$DECODER" --max_batch_size 8
  --http "127.0.0.1:$PORT" --grpc "127.0.0.1:$((PORT + 1))")
echo "+ ${serve[*]}"
"${serve[@]}" >"$WORK/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1200); do
  "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
    "http://127.0.0.1:$PORT/v2/health/ready" >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || { echo "goinfer serve exited:" >&2; cat "$WORK/serve.log" >&2; exit 1; }
  sleep 0.5
done
grep -iE 'decod|nvjpeg|image' "$WORK/serve.log" | head -5 || true

rc=0
"$PYTHON" tools/images/parity.py --ref "$WORK/ref" --server "http://127.0.0.1:$PORT" --model resnet18_w8 --tol "$TOL" \
  --report "$report" --title "Preprocessing parity: goinfer --image_decoder $DECODER ($ENGINE engine, $gpu) vs torchvision" \
  --note "Command: \`${serve[*]}\`; $("$GOINFER" version 2>/dev/null | head -1 || true)" \
  --note "Files: the $(ls testdata/photos/*.jpg testdata/photos/*.png | wc -l) committed photos (testdata/photos: baseline 4:2:0, 4:4:4, grayscale, CMYK, progressive JPEGs, a PNG with alpha), the $(ls testdata/jpeg/*.jpg | wc -l) small coding variants of testdata/jpeg (tools/images/jpeg_fixtures.py: baseline/progressive, 4:4:4/4:2:2/4:2:0/4:4:0/4:1:1, gray, restart intervals, CMYK and YCCK also subsampled, q5/q100) and $COUNT bench JPEGs (500x375 q90, grain 11) made by tools/images/make_photos.py on this machine. fp32 throughout; the reference logits are float64." \
  || rc=$?
echo "report: $report (exit $rc)"
exit $rc
