package h2grpc

import (
	"encoding/binary"
	"fmt"
)

// Frame types and flags (RFC 9113 section 6).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	framePriority     = 0x2
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePushPromise  = 0x5
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20
)

// Settings identifiers.
const (
	settingHeaderTableSize   = 0x1
	settingEnablePush        = 0x2
	settingMaxConcurrent     = 0x3
	settingInitialWindowSize = 0x4
	settingMaxFrameSize      = 0x5
	settingMaxHeaderListSize = 0x6
)

// Error codes used in RST_STREAM and GOAWAY.
const (
	errCodeNo            = 0x0
	errCodeProtocol      = 0x1
	errCodeFlowControl   = 0x3
	errCodeFrameSize     = 0x6
	errCodeRefusedStream = 0x7
	errCodeCancel        = 0x8
	errCodeEnhanceCalm   = 0xb
)

const (
	frameHeaderLen = 9
	// minFrameSize is every endpoint's initial SETTINGS_MAX_FRAME_SIZE,
	// maxFrameSize the largest one may announce.
	minFrameSize = 1 << 14
	maxFrameSize = 1<<24 - 1
	// initialWindow is the flow-control window before SETTINGS,
	// maxWindow the largest a window may be.
	initialWindow = 65535
	maxWindow     = 1<<31 - 1
	clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
)

// frameHeader is the fixed 9-byte head of every frame.
type frameHeader struct {
	length int
	typ    byte
	flags  byte
	stream uint32
}

// parseFrameHeader decodes b[:9]; a frame longer than limit (the largest
// this end announced) is a connection error.
func parseFrameHeader(b []byte, limit int) (frameHeader, error) {
	h := frameHeader{
		length: int(b[0])<<16 | int(b[1])<<8 | int(b[2]),
		typ:    b[3],
		flags:  b[4],
		stream: binary.BigEndian.Uint32(b[5:9]) & (1<<31 - 1),
	}
	if h.length > limit {
		return h, connError{errCodeFrameSize, fmt.Sprintf("frame of %d bytes over the %d-byte limit", h.length, limit)}
	}
	return h, nil
}

func appendFrameHeader(dst []byte, length int, typ, flags byte, stream uint32) []byte {
	return append(dst, byte(length>>16), byte(length>>8), byte(length), typ, flags,
		byte(stream>>24), byte(stream>>16), byte(stream>>8), byte(stream))
}

func appendWindowUpdate(dst []byte, stream uint32, n uint32) []byte {
	dst = appendFrameHeader(dst, 4, frameWindowUpdate, 0, stream)
	return binary.BigEndian.AppendUint32(dst, n)
}

func appendRSTStream(dst []byte, stream uint32, code uint32) []byte {
	dst = appendFrameHeader(dst, 4, frameRSTStream, 0, stream)
	return binary.BigEndian.AppendUint32(dst, code)
}

func appendGoAway(dst []byte, last uint32, code uint32) []byte {
	dst = appendFrameHeader(dst, 8, frameGoAway, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, last)
	return binary.BigEndian.AppendUint32(dst, code)
}

// appendSettings announces this end's frame size and stream window, then
// opens the connection window to the same size.
func appendSettings(dst []byte, frame, window int, maxStreams uint32) []byte {
	n := 12
	if maxStreams > 0 {
		n += 6
	}
	dst = appendFrameHeader(dst, n, frameSettings, 0, 0)
	dst = binary.BigEndian.AppendUint16(dst, settingInitialWindowSize)
	dst = binary.BigEndian.AppendUint32(dst, uint32(window))
	dst = binary.BigEndian.AppendUint16(dst, settingMaxFrameSize)
	dst = binary.BigEndian.AppendUint32(dst, uint32(frame))
	if maxStreams > 0 {
		dst = binary.BigEndian.AppendUint16(dst, settingMaxConcurrent)
		dst = binary.BigEndian.AppendUint32(dst, maxStreams)
	}
	if window > initialWindow {
		dst = appendWindowUpdate(dst, 0, uint32(window-initialWindow))
	}
	return dst
}

// connError is an HTTP/2 connection error: the connection ends with
// GOAWAY carrying code.
type connError struct {
	code uint32
	msg  string
}

func (e connError) Error() string { return fmt.Sprintf("http2: %s (code %d)", e.msg, e.code) }

// grpcPrefixLen is the length of the prefix before every gRPC message:
// a compressed flag and a 4-byte big-endian length.
const grpcPrefixLen = 5
