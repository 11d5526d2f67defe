// Package kservepb holds the Go code generated from proto/grpc_predict_v2.proto,
// the KServe v2 (Open Inference Protocol) gRPC definition: package
// "inference", service GRPCInferenceService. The generated files are
// committed; regenerate them with `go generate ./internal/kservepb` after
// installing protoc, protoc-gen-go and protoc-gen-go-grpc.
package kservepb

// Generated with protoc 3.21.12, protoc-gen-go v1.36.12 and protoc-gen-go-grpc v1.6.2.
//go:generate protoc -I ../../proto --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative grpc_predict_v2.proto
