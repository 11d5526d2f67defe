// Package onnxpb holds the Go types generated from proto/onnx.proto, ONNX's
// model schema (ModelProto, GraphProto, NodeProto, TensorProto, ...). The
// generated file is committed; regenerate it with `go generate
// ./internal/onnxpb` after installing protoc and protoc-gen-go.
package onnxpb

// Generated with protoc 3.21.12 and protoc-gen-go v1.36.12.
//go:generate protoc -I ../../proto --go_out=. --go_opt=paths=source_relative onnx.proto
