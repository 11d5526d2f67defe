#!/bin/bash
# quick alternating A/B without profiling: compiled cell only
out=$1; rounds=$2; threads=${3:-2}
mkdir -p $out
for r in $(seq 1 $rounds); do
  for b in old new; do
    ./goinfer-$b compute --engine cpu --arch mobilenet_v3_large --threads $threads --batch_sizes 1 --image_sizes 224 --iters 150 --compile true 2>&1 | grep '^| cpu' | sed "s/^/$b $r /" >> $out/all.txt
  done
done
