package h2grpc

import (
	"net/url"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// statusFromTrailers turns grpc-status and grpc-message into the call's
// error (nil for OK).
func statusFromTrailers(code, msg string) error {
	if code == "0" {
		return nil
	}
	n, err := strconv.ParseUint(code, 10, 32)
	if err != nil {
		return status.Errorf(codes.Internal, "h2grpc: grpc-status %q is not a code", code)
	}
	if m, err := url.PathUnescape(msg); err == nil {
		msg = m
	}
	return status.Error(codes.Code(n), msg)
}

// encodeGRPCMessage percent-encodes what gRPC's grpc-message may not carry
// as is (outside printable ASCII, and '%').
func encodeGRPCMessage(msg string) string {
	const hex = "0123456789ABCDEF"
	var b []byte
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c >= ' ' && c <= '~' && c != '%' {
			if b != nil {
				b = append(b, c)
			}
			continue
		}
		if b == nil {
			b = append(make([]byte, 0, len(msg)+16), msg[:i]...)
		}
		b = append(b, '%', hex[c>>4], hex[c&15])
	}
	if b == nil {
		return msg
	}
	return string(b)
}

// rstStatus is the status of a call whose stream the peer reset.
func rstStatus(code uint32) error {
	switch code {
	case errCodeRefusedStream:
		return status.Error(codes.Unavailable, "h2grpc: stream refused")
	case errCodeCancel:
		return status.Error(codes.Canceled, "h2grpc: stream cancelled")
	case errCodeEnhanceCalm:
		return status.Error(codes.ResourceExhausted, "h2grpc: stream reset: enhance your calm")
	}
	return status.Errorf(codes.Internal, "h2grpc: stream reset, code %d", code)
}
