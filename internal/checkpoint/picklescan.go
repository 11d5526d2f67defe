package checkpoint

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Argument layouts of pickle opcodes (see Python's pickletools).
const (
	argNone    = iota
	argFixed   // a fixed number of bytes
	argLen1    // 1-byte length, then data
	argLen4    // 4-byte little-endian length (signed for BINSTRING, LONG4), then data
	argLen8    // 8-byte little-endian length, then data
	argLine    // one newline-terminated line
	argLines2  // two newline-terminated lines (GLOBAL, INST)
	argFrame   // 8-byte frame length; the frame's opcodes follow inline
	argInvalid // not an opcode
)

type opArg struct {
	kind int
	n    int // byte count for argFixed
}

// pickleOps describes every opcode of protocols 0 to 5.
var pickleOps = func() [256]opArg {
	var t [256]opArg
	for i := range t {
		t[i] = opArg{kind: argInvalid}
	}
	for _, c := range []byte("(.012NRabd}el]ost)uQ\x81\x85\x86\x87\x88\x89\x8f\x90\x91\x92\x93\x94\x97\x98") {
		t[c] = opArg{kind: argNone}
	}
	for c, n := range map[byte]int{
		'K': 1, 'h': 1, 'q': 1, 0x80: 1, 0x82: 1,
		'M': 2, 0x83: 2,
		'J': 4, 'j': 4, 'r': 4, 0x84: 4,
		'G': 8,
	} {
		t[c] = opArg{kind: argFixed, n: n}
	}
	for _, c := range []byte("UC\x8c\x8a") {
		t[c] = opArg{kind: argLen1}
	}
	for _, c := range []byte("TXB\x8b") {
		t[c] = opArg{kind: argLen4}
	}
	for _, c := range []byte("\x8d\x8e\x96") {
		t[c] = opArg{kind: argLen8}
	}
	for _, c := range []byte("ILSVFPgp") {
		t[c] = opArg{kind: argLine}
	}
	t['c'] = opArg{kind: argLines2}
	t['i'] = opArg{kind: argLines2}
	t[0x95] = opArg{kind: argFrame}
	return t
}()

// scanPickle walks the opcodes of a pickle without executing them and
// checks that every argument lies inside data and that the stream ends with
// STOP. The unpickler trusts length fields (it allocates what they say), so
// this pass is what keeps a corrupt or hostile file from exhausting memory.
func scanPickle(data []byte) error {
	i := 0
	for i < len(data) {
		op := data[i]
		at := i
		i++
		a := pickleOps[op]
		rest := len(data) - i
		switch a.kind {
		case argInvalid:
			return fmt.Errorf("corrupt pickle: unknown opcode 0x%02x at byte %d", op, at)
		case argNone:
			if op == '.' {
				return nil
			}
		case argFixed:
			if rest < a.n {
				return fmt.Errorf("corrupt pickle: opcode 0x%02x at byte %d is truncated", op, at)
			}
			i += a.n
		case argLen1:
			if rest < 1 || rest-1 < int(data[i]) {
				return fmt.Errorf("corrupt pickle: opcode 0x%02x at byte %d is truncated", op, at)
			}
			i += 1 + int(data[i])
		case argLen4:
			if rest < 4 {
				return fmt.Errorf("corrupt pickle: opcode 0x%02x at byte %d is truncated", op, at)
			}
			n := int64(binary.LittleEndian.Uint32(data[i:]))
			if (op == 'T' || op == 0x8b) && n >= 1<<31 {
				return fmt.Errorf("corrupt pickle: opcode 0x%02x at byte %d has a negative length", op, at)
			}
			if n > int64(rest-4) {
				return fmt.Errorf("corrupt pickle: opcode 0x%02x at byte %d says %d bytes follow, only %d do", op, at, n, rest-4)
			}
			i += 4 + int(n)
		case argLen8, argFrame:
			if rest < 8 {
				return fmt.Errorf("corrupt pickle: opcode 0x%02x at byte %d is truncated", op, at)
			}
			n := binary.LittleEndian.Uint64(data[i:])
			if n > uint64(rest-8) {
				return fmt.Errorf("corrupt pickle: opcode 0x%02x at byte %d says %d bytes follow, only %d do", op, at, n, rest-8)
			}
			i += 8
			if a.kind == argLen8 {
				i += int(n)
			}
		case argLine, argLines2:
			lines := 1
			if a.kind == argLines2 {
				lines = 2
			}
			for range lines {
				nl := bytes.IndexByte(data[i:], '\n')
				if nl < 0 {
					return fmt.Errorf("corrupt pickle: opcode 0x%02x at byte %d has no end of line", op, at)
				}
				i += nl + 1
			}
		}
	}
	return fmt.Errorf("corrupt pickle: no STOP opcode in %d bytes", len(data))
}
