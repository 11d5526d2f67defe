package checkpoint

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"

	"goinfer/internal/tensor"
)

// torch.save's record alignment: storages start at multiples of 64 bytes
// so that readers can map them in place.
const pthAlign = 64

// archiveName is the directory torch.save uses inside the zip when it
// writes to a file object; torch.load accepts any name.
const archiveName = "archive"

func storageName(dt tensor.DType) (string, bool) {
	for k, v := range storageDTypes {
		if v == dt {
			return k, true
		}
	}
	return "", false
}

// writePTH writes sd as torch.save(state_dict) does: a zip of stored
// (uncompressed) records <archive>/data.pkl, .format_version,
// .storage_alignment, byteorder, data/<i> for each tensor, and version.
// The pickle is protocol 2: an OrderedDict whose values are
// torch._utils._rebuild_tensor_v2 calls on persistent-id storages.
func writePTH(w io.Writer, sd *StateDict) error {
	names := sd.Names()
	ts := make([]*tensor.Tensor, len(names))
	for i, n := range names {
		t, _ := sd.Get(n)
		if err := t.Validate(); err != nil {
			return fmt.Errorf("tensor %q: %w", n, err)
		}
		if _, ok := storageName(t.DType); !ok {
			return fmt.Errorf("tensor %q: dtype %s cannot be stored in a .pth", n, t.DType)
		}
		ts[i] = t
	}
	pkl := statePickle(names, ts)

	zw := &alignedZip{zw: zip.NewWriter(w)} // buffers small records itself
	records := []struct {
		name string
		data []byte
	}{
		{"data.pkl", pkl},
		{".format_version", []byte("1")},
		{".storage_alignment", []byte(strconv.Itoa(pthAlign))},
		{"byteorder", []byte("little")},
	}
	for _, r := range records {
		if err := zw.add(archiveName+"/"+r.name, r.data); err != nil {
			return err
		}
	}
	for i, t := range ts {
		if err := zw.add(fmt.Sprintf("%s/data/%d", archiveName, i), t.Data); err != nil {
			return fmt.Errorf("tensor %q: %w", names[i], err)
		}
	}
	if err := zw.add(archiveName+"/version", []byte("3\n")); err != nil {
		return err
	}
	return zw.zw.Close()
}

// alignedZip writes stored records whose data start at multiples of
// pthAlign, padding the local header's extra field as PyTorch does (an
// extra block with id "FB" filled with 'Z').
type alignedZip struct {
	zw  *zip.Writer
	off int64 // bytes written so far; archive/zip buffers, so count here
}

func (a *alignedZip) add(name string, data []byte) error {
	const localHeader = 30
	pos := a.off + localHeader + int64(len(name))
	pad := (pthAlign - pos%pthAlign) % pthAlign
	if pad > 0 && pad < 4 { // an extra block needs 4 bytes of id and length
		pad += pthAlign
	}
	var extra []byte
	if pad > 0 {
		extra = make([]byte, pad)
		copy(extra, "FB")
		binary.LittleEndian.PutUint16(extra[2:], uint16(pad-4))
		for i := 4; i < len(extra); i++ {
			extra[i] = 'Z'
		}
	}
	fh := &zip.FileHeader{
		Name:               name,
		Method:             zip.Store,
		CRC32:              crc32.ChecksumIEEE(data),
		CompressedSize64:   uint64(len(data)),
		UncompressedSize64: uint64(len(data)),
		Extra:              extra,
	}
	wr, err := a.zw.CreateRaw(fh)
	if err != nil {
		return fmt.Errorf("zip record %s: %w", name, err)
	}
	if _, err := wr.Write(data); err != nil {
		return fmt.Errorf("zip record %s: %w", name, err)
	}
	a.off = pos + pad + int64(len(data))
	return nil
}

// pickler writes the few protocol-2 opcodes a state dict needs.
type pickler struct {
	b    bytes.Buffer
	memo map[string]int // globals already written, by "module\nname"
}

func (p *pickler) op(b ...byte) { p.b.Write(b) }

// global pushes module.name, writing it once and fetching it from the memo
// afterwards, as Python's pickler does.
func (p *pickler) global(module, name string) {
	key := module + "\n" + name
	if i, ok := p.memo[key]; ok {
		p.get(i)
		return
	}
	p.b.WriteByte('c')
	p.b.WriteString(key + "\n")
	i := len(p.memo)
	p.memo[key] = i
	p.put(i)
}

func (p *pickler) put(i int) {
	if i < 256 {
		p.op('q', byte(i))
		return
	}
	p.op('r')
	p.b.Write(binary.LittleEndian.AppendUint32(nil, uint32(i)))
}

func (p *pickler) get(i int) {
	if i < 256 {
		p.op('h', byte(i))
		return
	}
	p.op('j')
	p.b.Write(binary.LittleEndian.AppendUint32(nil, uint32(i)))
}

func (p *pickler) str(s string) {
	p.op('X')
	p.b.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(s))))
	p.b.WriteString(s)
}

// int writes a non-negative or negative integer in the shortest opcode.
func (p *pickler) int(v int64) {
	switch {
	case v >= 0 && v < 1<<8:
		p.op('K', byte(v))
	case v >= 0 && v < 1<<16:
		p.op('M', byte(v), byte(v>>8))
	case v >= -1<<31 && v < 1<<31:
		p.op('J')
		p.b.Write(binary.LittleEndian.AppendUint32(nil, uint32(int32(v))))
	default: // LONG1: 8 little-endian two's-complement bytes
		p.op(0x8a, 8)
		p.b.Write(binary.LittleEndian.AppendUint64(nil, uint64(v)))
	}
}

func (p *pickler) tuple(vs []int64) {
	switch len(vs) {
	case 0:
		p.op(')')
		return
	case 1, 2, 3:
		for _, v := range vs {
			p.int(v)
		}
		p.op(0x84 + byte(len(vs))) // TUPLE1..TUPLE3
		return
	}
	p.op('(')
	for _, v := range vs {
		p.int(v)
	}
	p.op('t')
}

// emptyOrderedDict pushes collections.OrderedDict().
func (p *pickler) emptyOrderedDict() {
	p.global("collections", "OrderedDict")
	p.op(')', 'R')
}

func statePickle(names []string, ts []*tensor.Tensor) []byte {
	p := &pickler{memo: map[string]int{}}
	p.op(0x80, 2) // PROTO 2
	p.stateDict(names, ts)
	p.op('.')
	return p.b.Bytes()
}

// stateDict pushes an OrderedDict of names to tensors; tensor i lives in
// storage record data/<i>.
func (p *pickler) stateDict(names []string, ts []*tensor.Tensor) {
	p.emptyOrderedDict()
	const batch = 1000 // Python's pickler flushes SETITEMS in batches
	for start := 0; start < len(names); start += batch {
		p.op('(')
		for i := start; i < min(start+batch, len(names)); i++ {
			t := ts[i]
			size := make([]int64, len(t.Shape))
			stride := make([]int64, len(t.Shape))
			s := int64(1)
			for d := len(t.Shape) - 1; d >= 0; d-- {
				size[d], stride[d] = int64(t.Shape[d]), s
				s *= int64(t.Shape[d])
			}
			st, _ := storageName(t.DType)
			p.str(names[i])
			p.tensor(st, strconv.Itoa(i), int64(t.NumElements()), 0, size, stride)
		}
		p.op('u')
	}
}

// tensor pushes torch._utils._rebuild_tensor_v2(storage, offset, size,
// stride, False, OrderedDict()) with the storage given by persistent id
// ('storage', torch.<Type>Storage, key, 'cpu', numel).
func (p *pickler) tensor(storage, key string, numel, offset int64, size, stride []int64) {
	p.global("torch._utils", "_rebuild_tensor_v2")
	p.op('(')
	p.op('(')
	p.str("storage")
	p.global("torch", storage)
	p.str(key)
	p.str("cpu")
	p.int(numel)
	p.op('t', 'Q')
	p.int(offset)
	p.tuple(size)
	p.tuple(stride)
	p.op(0x89) // requires_grad False
	p.emptyOrderedDict()
	p.op('t', 'R')
}
