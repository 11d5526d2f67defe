#!/bin/sh
# devbuild.sh DIR: goinfer and the cuda engine's test binary for a device
# run, in DIR/bins.tar.xz, built with -tags nographfatbin: without the
# embedded graph.cu fatbin (12 MB less to carry within the device's tree
# limit; the tree has it). On the device, pass the tree's fatbin or an
# nvcc-built one explicitly:
#   gunzip -c internal/engine/cuda/kernels/graph.fatbin.gz > /tmp/graph.fatbin
#   goinfer compute ... --graph_kernels /tmp/graph.fatbin
#   cuda.test -graph_kernels /tmp/graph.fatbin ...
# Without it they load the PTX (the driver compiles it: slower kernels).
set -eu
dir=$1
mkdir -p "$dir"
CGO_ENABLED=0 go build -tags nographfatbin -trimpath -ldflags='-s -w' -o "$dir/goinfer" ./cmd/goinfer
CGO_ENABLED=0 go test -c -tags nographfatbin -trimpath -ldflags='-s -w' -o "$dir/cuda.test" ./internal/engine/cuda/
(cd "$dir" && tar cf - goinfer cuda.test | xz -T2 -9 --lzma2=dict=128MiB > bins.tar.xz && rm goinfer cuda.test)
ls -la "$dir/bins.tar.xz"
