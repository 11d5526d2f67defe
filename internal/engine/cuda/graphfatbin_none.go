//go:build nographfatbin

package cuda

// graphFatbinGz is left out of binaries built with -tags nographfatbin
// (tools/devbuild.sh: device runs, whose upload limit the 12 MB fatbin
// would break; they pass the tree's copy with --graph_kernels). The engine
// then loads the PTX unless given a file.
var graphFatbinGz []byte
