//go:build !nographfatbin

package cuda

import _ "embed"

//go:embed kernels/graph.fatbin.gz
var graphFatbinGz []byte
