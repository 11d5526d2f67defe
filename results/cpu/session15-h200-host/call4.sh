# Session 15's host measurement of the cpu engine against onnxruntime (issue 15): the
# device's 16-core host, no GPU work; goinfer built here with -tags nographfatbin
# (xz-compressed as .bin/s15c.xz). Part 1: MobileNetV3-L with --cpu_fuse_expand
# off/auto/on, alternating. Part 2: tools/cpu/compare.py, 3 alternating rounds per cell.
# Part 3: ViT-B/16, one round.
set -u
mkdir -p .bin/s15c && xz -dc .bin/s15c.xz > .bin/s15c/goinfer && chmod +x .bin/s15c/goinfer
B=.bin/s15c/goinfer
(lscpu | grep -E "Model name|^CPU\(s\)|Thread|L2|L3"; nproc; uptime) > $OUT/host.txt
cat $OUT/host.txt
SECONDS=0
mkdir -p /tmp/cpu_compare
python3 -c "import sys; sys.path.insert(0, 'tools/cpu'); import compare; compare.export('mobilenet_v3_large', '/tmp/mnv3.onnx')" 2>/dev/null
for r in 1 2 3; do for mode in off auto on; do for bs in 1 32; do
  it=400; [ $bs = 32 ] && it=20
  $B compute --engine cpu --checkpoint /tmp/mnv3.onnx --threads 2 --batch_sizes $bs --image_sizes 224 --compile true --iters $it --warmup 5 --cpu_fuse_expand=$mode --csv /tmp/ab.csv > /dev/null 2>&1
  echo "r$r $mode b$bs $(awk -F, 'NR==2 {print $9, $10}' /tmp/ab.csv)" | tee -a $OUT/fuse-ab.log
done; done; done
echo "fuse A/B: ${SECONDS}s"
timeout $((480 - SECONDS)) python3 tools/cpu/compare.py --goinfer $B --models mobilenet_v3_large,efficientnet_b0,resnet18 --threads 2,16 --batches 1,32 --seconds 2 --rounds 3 --no_torch --out $OUT/compare-rounds3.md 2>$OUT/compare-rounds3.err | tee $OUT/compare-rounds3.log
echo "rounds3: ${SECONDS}s"
timeout $((575 - SECONDS)) python3 tools/cpu/compare.py --goinfer $B --models vit_b_16 --threads 16,2 --batches 1,32 --seconds 2 --rounds 1 --no_torch --out $OUT/compare-vit.md 2>$OUT/compare-vit.err | tee $OUT/compare-vit.log
echo "total ${SECONDS}s"
tail -2 $OUT/compare-rounds3.err $OUT/compare-vit.err
