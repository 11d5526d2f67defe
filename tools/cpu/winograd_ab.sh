#!/usr/bin/env bash
# winograd_ab.sh compares, on a machine shared with other work, goinfer's
# ResNet-18 with Winograd (the default), without it (engine.Options
# NoWinograd) and onnxruntime, same threads, alternating: each round runs
# every contender at every batch in turn; the table gives per cell the
# median over rounds of wall-clock img/s and of images per CPU-second (the
# process's user + system time, the figure that other processes' load
# disturbs least).
#
#	NODE_PATH=/tmp/ort/node_modules tools/cpu/winograd_ab.sh resnet18.onnx
#
# Environment: THREADS (default 2), BATCHES ("1 32"), ROUNDS (5). goinfer
# runs BenchmarkResNet18Graph (the torchvision network built in Go and run
# by LoadGraph, as the ONNX file is) from a test binary built once;
# onnxruntime runs tools/cpu/ort_bench.js on the ONNX file (see there for
# NODE_PATH).
set -euo pipefail
model=${1:?usage: winograd_ab.sh MODEL.onnx}
threads=${THREADS:-2}
batches=${BATCHES:-1 32}
rounds=${ROUNDS:-5}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$here/../.." && go test -c -o "$tmp/cpu.test" ./internal/engine/cpu/)
raw=$tmp/raw
for r in $(seq "$rounds"); do
	for b in $batches; do
		iters=3
		[ "$b" = 1 ] && iters=20
		(cd "$here/../../internal/engine/cpu" && "$tmp/cpu.test" -test.run XXX -test.cpu "$threads" \
			-test.bench "ResNet18Graph/224/bs$b/(compiled|direct)\$" -test.benchtime "${iters}x") |
			awk -v r="$r" -v b="$b" '/^Benchmark/ {
				split($1, p, "/"); c = p[4]; sub(/-[0-9]+$/, "", c)
				for (i = 2; i < NF; i++) { if ($(i+1) == "img/s") w = $i; if ($(i+1) == "img/cpu-s") u = $i }
				print r, b, "goinfer-" (c == "compiled" ? "winograd" : "direct"), w, u }' | tee -a "$raw" >&2
		node "$here/ort_bench.js" --model "$model" --threads "$threads" --batches "$b" --iters "$iters" --warmup 2 |
			awk -F'|' -v r="$r" -v b="$b" 'NF > 8 && $2 ~ /[0-9]/ { gsub(/ /, ""); print r, b, "onnxruntime", $4, $10 }' | tee -a "$raw" >&2
	done
done
echo "$(uptime)"
echo
echo "| threads | batch | contender | img/s (median) | img/cpu-s (median) | img/s runs | img/cpu-s runs |"
echo "|---:|---:|---|---:|---:|---|---|"
for b in $batches; do
	for c in goinfer-winograd goinfer-direct onnxruntime; do
		w=$(awk -v b="$b" -v c="$c" '$2 == b && $3 == c {print $4}' "$raw" | sort -g | paste -sd' ')
		u=$(awk -v b="$b" -v c="$c" '$2 == b && $3 == c {print $5}' "$raw" | sort -g | paste -sd' ')
		med() { echo "$1" | tr ' ' '\n' | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
		echo "| $threads | $b | $c | $(med "$w") | $(med "$u") | ${w// /, } | ${u// /, } |"
	done
done
