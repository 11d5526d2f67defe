#!/bin/bash
# alternating A/B: old (base 38f3264) vs new (cpu-gemv), MobileNetV3-L bs1 2 threads
out=$1; rounds=${2:-6}
mkdir -p $out
for r in $(seq 1 $rounds); do
  for b in old new; do
    uptime | sed 's/.*load/load/' > $out/$b-$r.txt
    ./goinfer-$b compute --engine cpu --arch mobilenet_v3_large --threads 2 --batch_sizes 1 --image_sizes 224 --iters 200 --profile >> $out/$b-$r.txt 2>&1
  done
done
