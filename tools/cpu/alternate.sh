#!/usr/bin/env bash
# alternate.sh compares goinfer builds with onnxruntime on a machine shared
# with other work (where one pass of each is noise): it runs every cell
# (threads x batch) of every contender in turn, ROUNDS times, and reports
# per contender the median over rounds of each run's median ms/forward.
#
#	NODE_PATH=/tmp/ort/node_modules tools/cpu/alternate.sh MODEL.onnx \
#	    [GOINFER_BINARY...]
#
# Environment: THREADS (default "1 2"), BATCHES ("1 32"), ROUNDS (3),
# ITERS_BS1 (20; timed forwards of batch 1), ITERS (3; larger batches).
# Each goinfer binary runs `compute --engine cpu --checkpoint MODEL.onnx
# --compile true`; onnxruntime runs tools/cpu/ort_bench.js (see there for
# NODE_PATH). Output: a markdown table on stdout, raw rows on stderr.
set -euo pipefail
model=${1:?usage: alternate.sh MODEL.onnx [GOINFER_BINARY...]}
shift
bins=("$@")
threads=${THREADS:-1 2}
batches=${BATCHES:-1 32}
rounds=${ROUNDS:-3}
here=$(cd "$(dirname "$0")" && pwd)
raw=$(mktemp)
trap 'rm -f "$raw" "$raw.csv"' EXIT
for r in $(seq "$rounds"); do
	for t in $threads; do
		for b in $batches; do
			iters=${ITERS:-3}
			[ "$b" = 1 ] && iters=${ITERS_BS1:-20}
			for bin in "${bins[@]}"; do
				"$bin" compute --engine cpu --threads "$t" --checkpoint "$model" --batch_sizes "$b" \
					--image_sizes 224 --compile true --iters "$iters" --warmup 2 --csv "$raw.csv" >/dev/null 2>&1
				ms=$(awk -F, 'NR==2 {print $9}' "$raw.csv")
				echo "$r $t $b $bin $ms" | tee -a "$raw" >&2
			done
			ms=$(node "$here/ort_bench.js" --model "$model" --threads "$t" --batches "$b" --iters "$iters" --warmup 2 |
				awk -F'|' 'NF > 8 && $2 ~ /[0-9]/ {gsub(/ /, "", $6); print $6}')
			echo "$r $t $b onnxruntime $ms" | tee -a "$raw" >&2
		done
	done
done
echo "$(uptime)"
echo
echo "| threads | batch | contender | median ms/forward | img/s | runs (ms) |"
echo "|---:|---:|---|---:|---:|---|"
sort -k2,2n -k3,3n -k4,4 -k5,5g "$raw" | awk '
function flush() {
	if (n == 0) return
	m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
	printf "| %s | %s | %s | %.1f | %.1f | %s |\n", t, b, c, m, b * 1000 / m, list
	n = 0; list = ""
}
{
	if ($2 != t || $3 != b || $4 != c) { flush(); t = $2; b = $3; c = $4 }
	v[++n] = $5; list = list (list == "" ? "" : ", ") $5
}
END { flush() }'
