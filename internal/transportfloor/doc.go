// Package transportfloor holds only a benchmark: what carrying one
// inference-sized request (750 KB) and its answer (4,000 bytes) costs over
// loopback with gRPC-Go and with HTTP/1.1 when no goinfer code runs, the
// floor under the server's batch-1 latency on each protocol (issue #16).
// Run it with `go test -bench TransportFloor ./internal/transportfloor`.
package transportfloor
