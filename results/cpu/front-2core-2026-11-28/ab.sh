#!/bin/bash
cd /work/wt/cpu-front
for r in 1 2 3 4 5 6; do
  for v in main auto on off; do
    case $v in main) cmd=".bin/goinfer-main compute";; *) cmd=".bin/goinfer compute --cpu_fuse_expand=$v";; esac
    for cell in "2 1 300" "2 32 10"; do
      set -- $cell
      out=$($cmd --engine cpu --arch mobilenet_v3_large --threads $1 --batch_sizes $2 --image_sizes 224 --iters $3 --compile true 2>/dev/null | grep "^| cpu" | awk -F'|' '{print $8, $9}')
      echo "$r $v t$1 bs$2 $out $(cut -d' ' -f1 /proc/loadavg)"
    done
  done
done
