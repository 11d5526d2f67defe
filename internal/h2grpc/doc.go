// Package h2grpc carries unary gRPC calls over HTTP/2 with frames and
// windows as large as the protocol allows, reading DATA payloads straight
// into the message buffer and writing a message with one writev. It speaks
// the same wire protocol as any gRPC implementation (RFC 9113 framing,
// HPACK headers, the 5-byte length prefix, grpc-status trailers), so a
// gRPC-Go client can call its Server and its Conn can call a gRPC-Go
// server; against gRPC-Go the peer's 16 KiB frames and windows apply.
//
// It exists for latency: on loopback gRPC-Go needs about three times what
// HTTP/1.1 needs to carry a 750 KB request (16 KiB frames at both ends, a
// copy into the write buffer and another out of the read buffer); this
// transport carries the same gRPC call in about the HTTP/1.1 time
// (internal/transportfloor). It handles unary calls only.
package h2grpc
