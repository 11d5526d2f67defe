package kservepb

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// DecodeError returns, and forgets, the error Unmarshal kept for the
// message v under DeferErrors: a status error with code InvalidArgument
// naming the message type and what is wrong with its bytes. It is nil if
// v decoded cleanly.
func (c *Codec) DecodeError(v any) error {
	e, ok := c.failed.LoadAndDelete(v)
	if !ok {
		return nil
	}
	name := fmt.Sprintf("%T", v)
	if m, ok := v.(proto.Message); ok {
		name = string(m.ProtoReflect().Descriptor().Name())
	}
	return status.Errorf(codes.InvalidArgument, "malformed %s message: %v", name, e)
}

// UnaryServerInterceptor answers a unary call whose request Unmarshal
// could not decode (under DeferErrors) with DecodeError, before the
// handler sees the request. Put it first in the chain.
func (c *Codec) UnaryServerInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := c.DecodeError(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// StreamServerInterceptor makes RecvMsg of a streaming call return
// DecodeError for a message Unmarshal could not decode (under
// DeferErrors).
func (c *Codec) StreamServerInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &checkedStream{ServerStream: ss, c: c})
}

type checkedStream struct {
	grpc.ServerStream
	c *Codec
}

func (s *checkedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if derr := s.c.DecodeError(m); derr != nil {
		return derr
	}
	return err
}
