package kservepb

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

func TestDeferErrors(t *testing.T) {
	bad := mem.BufferSlice{mem.SliceBuffer([]byte{0xff, 0xff, 0xff})}
	for _, tc := range []struct {
		msg  any
		name string
	}{
		{&ModelInferRequest{}, "ModelInferRequest"},
		{&ModelMetadataRequest{}, "ModelMetadataRequest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := (&Codec{}).Unmarshal(bad, tc.msg); err == nil {
				t.Fatal("without DeferErrors, Unmarshal of bad bytes succeeded")
			}
			c := &Codec{DeferErrors: true}
			if err := c.Unmarshal(bad, tc.msg); err != nil {
				t.Fatalf("with DeferErrors, Unmarshal returned %v", err)
			}
			called := false
			_, err := c.UnaryServerInterceptor(context.Background(), tc.msg, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) {
				called = true
				return nil, nil
			})
			if called || status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "malformed "+tc.name) {
				t.Fatalf("interceptor: handler called %v, error %v; want INVALID_ARGUMENT naming %s", called, err, tc.name)
			}
			if err := c.DecodeError(tc.msg); err != nil {
				t.Fatalf("the error was reported twice: %v", err)
			}
			// A good message of the same type passes.
			good, err := c.Marshal(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Unmarshal(good, tc.msg); err != nil || c.DecodeError(tc.msg) != nil {
				t.Fatalf("a good message: %v", err)
			}
		})
	}
}
