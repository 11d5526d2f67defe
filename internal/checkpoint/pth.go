package checkpoint

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
	"unsafe"

	"github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/types"

	"goinfer/internal/tensor"
)

// maxPickleBytes bounds data.pkl: a state dict's pickle holds names and
// shapes only (about 100 bytes a tensor), so anything larger is not one.
const maxPickleBytes = 256 << 20

// storageDTypes maps torch's typed-storage class names (what torch.save
// writes into persistent ids) to tensor dtypes.
var storageDTypes = map[string]tensor.DType{
	"FloatStorage":    tensor.Float32,
	"HalfStorage":     tensor.Float16,
	"BFloat16Storage": tensor.BFloat16,
	"DoubleStorage":   tensor.Float64,
	"LongStorage":     tensor.Int64,
	"IntStorage":      tensor.Int32,
	"CharStorage":     tensor.Int8,
	"ByteStorage":     tensor.Uint8,
	"BoolStorage":     tensor.Bool,
}

// storageClass is a torch.*Storage global; dtype is Invalid for storage
// types goinfer does not read, which is reported with the tensor's name.
type storageClass struct {
	name  string
	dtype tensor.DType
}

// storageRef is what a persistent id resolves to: a storage record in the
// archive, read after unpickling.
type storageRef struct {
	class storageClass
	key   string
	numel int64
}

// tensorRef is what torch._utils._rebuild_tensor_v2 returns: a view of a
// storage, materialized once the whole pickle is read.
type tensorRef struct {
	storage *storageRef
	offset  int64
	size    []int64
	stride  []int64
}

// rebuildFunc is one of torch._utils' tensor-rebuilding functions.
type rebuildFunc struct{ name string }

func (f rebuildFunc) Call(args ...any) (any, error) {
	switch f.name {
	case "_rebuild_tensor_v2", "_rebuild_tensor":
		// (storage, storage_offset, size, stride[, requires_grad, backward_hooks[, metadata]])
		if len(args) < 4 {
			return nil, fmt.Errorf("torch._utils.%s: %d arguments, want at least 4", f.name, len(args))
		}
		st, ok := args[0].(*storageRef)
		if !ok {
			return nil, fmt.Errorf("torch._utils.%s: first argument is %s, want a storage", f.name, describe(args[0]))
		}
		off, err := pyInt(args[1])
		if err != nil {
			return nil, fmt.Errorf("torch._utils.%s: storage offset: %w", f.name, err)
		}
		size, err := pyInts(args[2])
		if err != nil {
			return nil, fmt.Errorf("torch._utils.%s: size: %w", f.name, err)
		}
		stride, err := pyInts(args[3])
		if err != nil {
			return nil, fmt.Errorf("torch._utils.%s: stride: %w", f.name, err)
		}
		if len(size) != len(stride) {
			return nil, fmt.Errorf("torch._utils.%s: size %v and stride %v differ in rank", f.name, size, stride)
		}
		return &tensorRef{storage: st, offset: off, size: size, stride: stride}, nil
	case "_rebuild_parameter", "_rebuild_parameter_with_state":
		// (data, requires_grad, backward_hooks[, state]): a Parameter is its data.
		if len(args) < 1 {
			return nil, fmt.Errorf("torch._utils.%s: no arguments", f.name)
		}
		return args[0], nil
	}
	return nil, fmt.Errorf("unsupported tensor type: the checkpoint calls torch._utils.%s (quantized, sparse or subclassed tensors are not supported)", printable(f.name))
}

// opaqueClass stands for any other global (argparse.Namespace in a training
// checkpoint, numpy helpers, ...). Calling it yields an opaque value, so
// that the parts of a checkpoint around the state dict do not stop loading.
type opaqueClass struct{ module, name string }

// opaqueObject is an instance of an opaqueClass; its state is ignored.
type opaqueObject struct{ class *opaqueClass }

func (c *opaqueClass) Call(...any) (any, error)     { return &opaqueObject{c}, nil }
func (c *opaqueClass) PyNew(...any) (any, error)    { return &opaqueObject{c}, nil }
func (o *opaqueObject) PySetState(any) error        { return nil }
func (o *opaqueObject) PyDictSet(any, any) error    { return nil }
func (o *opaqueObject) PySetAttr(string, any) error { return nil }
func (o *opaqueObject) String() string {
	return printable(o.class.module+"."+o.class.name) + " object"
}

func findClass(module, name string) (any, error) {
	switch module {
	case "torch._utils":
		return rebuildFunc{name}, nil
	case "torch", "torch.cuda":
		// A tensor saved from a GPU has a location of "cuda:N"; its storage
		// type is still a torch.*Storage (torch.cuda.* in old releases).
		if strings.HasSuffix(name, "Storage") {
			return storageClass{name: name, dtype: storageDTypes[name]}, nil
		}
	}
	return &opaqueClass{module, name}, nil
}

// persistentLoad resolves torch.save's persistent ids:
// ('storage', storage_type, key, location, numel).
func persistentLoad(pid any) (any, error) {
	t, ok := pid.(*types.Tuple)
	if !ok || t.Len() != 5 {
		return nil, fmt.Errorf("unexpected persistent id %s, want ('storage', type, key, location, numel)", describe(pid))
	}
	if s, _ := t.Get(0).(string); s != "storage" {
		return nil, fmt.Errorf("unexpected persistent id kind %s, want 'storage'", describe(t.Get(0)))
	}
	class, ok := t.Get(1).(storageClass)
	if !ok {
		return nil, fmt.Errorf("persistent id names storage type %s, want a torch.*Storage", describe(t.Get(1)))
	}
	key, ok := t.Get(2).(string)
	if !ok {
		return nil, fmt.Errorf("persistent id has storage key %s, want a string", describe(t.Get(2)))
	}
	numel, err := pyInt(t.Get(4))
	if err != nil || numel < 0 {
		return nil, fmt.Errorf("persistent id for storage %q has element count %s", key, describe(t.Get(4)))
	}
	return &storageRef{class: class, key: key, numel: numel}, nil
}

// unpickle runs gopickle on a scanned pickle. gopickle was not written for
// hostile input and can panic on malformed streams (odd SETITEMS, an
// unhashable key); a panic is turned into a corrupt-pickle error.
func unpickle(data []byte) (obj any, err error) {
	if err := scanPickle(data); err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			obj, err = nil, fmt.Errorf("corrupt pickle: %v", r)
		}
	}()
	u := pickle.NewUnpickler(bytes.NewReader(data))
	u.FindClass = findClass
	u.PersistentLoad = persistentLoad
	obj, err = u.Load()
	if err != nil {
		return nil, fmt.Errorf("corrupt pickle: %w", err)
	}
	return obj, nil
}

// readPTH parses a torch.save zip archive held in data. Storages stored
// uncompressed and suitably aligned alias data; others are copied.
func readPTH(data []byte) (*StateDict, error) {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, fmt.Errorf("corrupt or truncated zip archive: %w", err)
	}
	// torch names every record <archive>/<record>, where <archive> is
	// whatever directory the first record has; data.pkl locates it.
	var pkl *zip.File
	for _, f := range zr.File {
		dir, base, ok := strings.Cut(f.Name, "/")
		if ok && base == "data.pkl" && dir != "" {
			pkl = f
			break
		}
	}
	if pkl == nil {
		return nil, errors.New("zip archive has no <archive>/data.pkl record: not a torch.save checkpoint")
	}
	prefix := strings.TrimSuffix(pkl.Name, "data.pkl")
	records := make(map[string]*zip.File, len(zr.File))
	for _, f := range zr.File {
		records[f.Name] = f
	}
	if bo, ok := records[prefix+"byteorder"]; ok {
		b, err := readRecord(data, bo, 16)
		if err != nil {
			return nil, err
		}
		if s := string(b); s != "little" {
			return nil, fmt.Errorf("checkpoint byte order is %q: only little-endian checkpoints are supported", s)
		}
	}
	pb, err := readRecord(data, pkl, maxPickleBytes)
	if err != nil {
		return nil, err
	}
	obj, err := unpickle(pb)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pkl.Name, err)
	}
	entries, err := stateDictEntries(obj)
	if err != nil {
		return nil, err
	}
	storages := map[string][]byte{}
	sd := NewStateDict()
	for _, e := range entries {
		ref, ok := e.value.(*tensorRef)
		if !ok {
			return nil, fmt.Errorf("key %q holds %s, not a tensor", e.key, describe(e.value))
		}
		st := ref.storage
		if st.class.dtype == tensor.Invalid {
			return nil, fmt.Errorf("key %q: storage type torch.%s is not supported (want float32, float16, bfloat16, float64 or an integer type)", e.key, printable(st.class.name))
		}
		es := int64(st.class.dtype.Size())
		buf, ok := storages[st.key]
		if !ok {
			name := prefix + "data/" + st.key
			rec, ok := records[name]
			if !ok {
				return nil, fmt.Errorf("key %q: storage record %s is missing from the archive", e.key, name)
			}
			if st.numel > int64(len(data))/es {
				return nil, fmt.Errorf("key %q: storage %s claims %d elements, more than the file holds", e.key, name, st.numel)
			}
			if int64(rec.UncompressedSize64) != st.numel*es {
				return nil, fmt.Errorf("key %q: storage record %s holds %d bytes, want %d (%d x %s)", e.key, name, rec.UncompressedSize64, st.numel*es, st.numel, st.class.dtype)
			}
			if buf, err = storageBytes(data, rec, int(es)); err != nil {
				return nil, fmt.Errorf("key %q: %w", e.key, err)
			}
			storages[st.key] = buf
		}
		if int64(len(buf)) != st.numel*es {
			// A second reference to one storage with another type or
			// length would otherwise read past the bytes it holds.
			return nil, fmt.Errorf("key %q: storage %s is referenced as %d x %s but holds %d bytes", e.key, printable(st.key), st.numel, st.class.dtype, len(buf))
		}
		t, err := view(st.class.dtype, buf, st.numel, ref)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", e.key, err)
		}
		sd.Set(e.key, t)
	}
	return sd, nil
}

type dictEntry struct {
	key   string
	value any
}

// stateDictEntries finds the state dict in an unpickled object: the object
// itself, or the dict a training checkpoint wraps under "state_dict",
// "model_state_dict" or "model".
func stateDictEntries(obj any) ([]dictEntry, error) {
	for depth := 0; ; depth++ {
		entries, err := dictItems(obj)
		if err != nil {
			return nil, err
		}
		allTensors := true
		for _, e := range entries {
			if _, ok := e.value.(*tensorRef); !ok {
				allTensors = false
				break
			}
		}
		if allTensors || depth == 2 {
			return entries, nil
		}
		var inner any
		for _, name := range []string{"state_dict", "model_state_dict", "model"} {
			for _, e := range entries {
				if e.key == name {
					inner = e.value
					break
				}
			}
			if inner != nil {
				break
			}
		}
		if inner == nil {
			return entries, nil // the caller names the first non-tensor
		}
		if o, ok := inner.(*opaqueObject); ok {
			return nil, fmt.Errorf("the checkpoint holds a pickled %s, not a state dict: save model.state_dict() instead", o)
		}
		obj = inner
	}
}

// dictItems lists a dict's string keys and values in order.
func dictItems(obj any) ([]dictEntry, error) {
	var out []dictEntry
	add := func(k, v any) error {
		s, ok := k.(string)
		if !ok {
			return fmt.Errorf("state dict has a %s key, want strings", describe(k))
		}
		out = append(out, dictEntry{s, v})
		return nil
	}
	switch d := obj.(type) {
	case *types.OrderedDict:
		for el := d.List.Front(); el != nil; el = el.Next() {
			e := el.Value.(*types.OrderedDictEntry)
			if err := add(e.Key, e.Value); err != nil {
				return nil, err
			}
		}
	case *types.Dict:
		seen := map[string]int{}
		for _, e := range *d {
			// A dict pickled with a repeated key keeps the last value.
			if s, ok := e.Key.(string); ok {
				if i, dup := seen[s]; dup {
					out[i].value = e.Value
					continue
				}
				seen[s] = len(out)
			}
			if err := add(e.Key, e.Value); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("the checkpoint holds %s, want a state dict (a dict of tensors)", describe(obj))
	}
	return out, nil
}

// readRecord returns a small record's bytes, at most limit of them.
func readRecord(data []byte, f *zip.File, limit int) ([]byte, error) {
	if f.UncompressedSize64 > uint64(limit) {
		return nil, fmt.Errorf("record %s is %d bytes, more than the %d expected", f.Name, f.UncompressedSize64, limit)
	}
	if b, ok, err := storedBytes(data, f); err != nil || ok {
		return b, err
	}
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("record %s: %w", f.Name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("record %s: %w", f.Name, err)
	}
	if uint64(len(b)) != f.UncompressedSize64 {
		return nil, fmt.Errorf("record %s: %d bytes, header says %d", f.Name, len(b), f.UncompressedSize64)
	}
	return b, nil
}

// storedBytes slices an uncompressed record out of the archive without
// copying; ok is false for a compressed record.
func storedBytes(data []byte, f *zip.File) (b []byte, ok bool, err error) {
	if f.Method != zip.Store {
		return nil, false, nil
	}
	if f.CompressedSize64 != f.UncompressedSize64 {
		return nil, false, fmt.Errorf("record %s is stored uncompressed but its sizes differ (%d, %d)", f.Name, f.CompressedSize64, f.UncompressedSize64)
	}
	off, err := f.DataOffset()
	if err != nil {
		return nil, false, fmt.Errorf("record %s: %w", f.Name, err)
	}
	end := uint64(off) + f.UncompressedSize64
	if off < 0 || end > uint64(len(data)) || end < uint64(off) {
		return nil, false, fmt.Errorf("record %s: truncated archive (its data ends at byte %d of %d)", f.Name, end, len(data))
	}
	return data[off:end:end], true, nil
}

// storageBytes returns a storage record's bytes: aliasing the archive when
// stored uncompressed at an address aligned for the dtype, else copied.
func storageBytes(data []byte, f *zip.File, align int) ([]byte, error) {
	b, ok, err := storedBytes(data, f)
	if err != nil {
		return nil, err
	}
	if ok {
		if len(b) == 0 || uintptr(unsafe.Pointer(&b[0]))%uintptr(align) == 0 {
			return b, nil
		}
		return bytes.Clone(b), nil
	}
	return readRecord(data, f, int(f.UncompressedSize64))
}

// view makes the tensor a tensorRef describes out of its storage's bytes.
// Contiguous views alias buf; strided ones are gathered into a new buffer.
func view(dt tensor.DType, buf []byte, numel int64, r *tensorRef) (*tensor.Tensor, error) {
	shape := make(tensor.Shape, len(r.size))
	for i, d := range r.size {
		if d < 0 || d > 1<<40 {
			return nil, fmt.Errorf("size %v has an invalid dimension", r.size)
		}
		shape[i] = int(d)
	}
	if err := shape.Validate(); err != nil {
		return nil, err
	}
	n := int64(shape.NumElements())
	if n == 0 {
		return tensor.FromBytes(dt, shape, nil)
	}
	if r.offset < 0 || r.offset >= numel {
		return nil, fmt.Errorf("storage offset %d is outside its storage of %d elements", r.offset, numel)
	}
	// The last element the view touches must lie in the storage; every
	// product is bounded before it is formed so that it cannot overflow.
	last := r.offset
	contiguous := true
	want := int64(1)
	for i := len(r.size) - 1; i >= 0; i-- {
		d, s := r.size[i], r.stride[i]
		if d == 1 {
			continue
		}
		if s < 0 || s > numel {
			return nil, fmt.Errorf("stride %v is outside its storage of %d elements", r.stride, numel)
		}
		if s != 0 && d-1 > (numel-last)/s {
			return nil, fmt.Errorf("size %v with stride %v and offset %d reaches past its storage of %d elements", r.size, r.stride, r.offset, numel)
		}
		last += (d - 1) * s
		if s != want {
			contiguous = false
		}
		want *= d
	}
	if last >= numel {
		return nil, fmt.Errorf("size %v with stride %v and offset %d reaches past its storage of %d elements", r.size, r.stride, r.offset, numel)
	}
	es := int64(dt.Size())
	if !contiguous && n > numel {
		// Only zero or overlapping strides make a view larger than its
		// storage; copying one could take any amount of memory and time.
		return nil, fmt.Errorf("size %v with stride %v has more elements than its storage of %d (an expanded tensor): save a contiguous copy", r.size, r.stride, numel)
	}
	if contiguous {
		return tensor.FromBytes(dt, shape, buf[r.offset*es:(r.offset+n)*es:(r.offset+n)*es])
	}
	out := make([]byte, n*es)
	idx := make([]int64, len(r.size))
	src := r.offset
	for o := int64(0); o < n*es; o += es {
		copy(out[o:o+es], buf[src*es:])
		// Advance the multi-index, innermost dimension fastest.
		for i := len(idx) - 1; i >= 0; i-- {
			idx[i]++
			src += r.stride[i]
			if idx[i] < r.size[i] {
				break
			}
			src -= idx[i] * r.stride[i]
			idx[i] = 0
		}
	}
	return tensor.FromBytes(dt, shape, out)
}

// pyInt converts an unpickled Python int.
func pyInt(v any) (int64, error) {
	switch x := v.(type) {
	case int:
		return int64(x), nil
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	case *big.Int:
		if x.IsInt64() {
			return x.Int64(), nil
		}
	}
	return 0, fmt.Errorf("got %s, want an integer", describe(v))
}

// pyInts converts a tuple (or list) of Python ints.
func pyInts(v any) ([]int64, error) {
	var items []any
	switch x := v.(type) {
	case *types.Tuple:
		items = *x
	case *types.List:
		items = *x
	default:
		return nil, fmt.Errorf("got %s, want a tuple of integers", describe(v))
	}
	out := make([]int64, len(items))
	for i, it := range items {
		n, err := pyInt(it)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}

// describe names an unpickled value's Python type for error messages.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case string:
		if len(x) > 40 {
			x = x[:40] + "..."
		}
		return fmt.Sprintf("the string %q", x)
	case int, *big.Int:
		return fmt.Sprintf("the integer %v", x)
	case bool:
		return fmt.Sprintf("%v", x)
	case float64:
		return fmt.Sprintf("the float %v", x)
	case *types.Tuple:
		return fmt.Sprintf("a tuple of %d items", x.Len())
	case *types.List:
		return fmt.Sprintf("a list of %d items", len(*x))
	case *types.Dict:
		return fmt.Sprintf("a dict of %d items", x.Len())
	case *types.OrderedDict:
		return fmt.Sprintf("an OrderedDict of %d items", x.Len())
	case *opaqueObject:
		return "a " + x.String()
	case *opaqueClass:
		return "the global " + printable(x.module+"."+x.name)
	case storageClass:
		return "torch." + printable(x.name)
	case *storageRef:
		return "a storage"
	case *tensorRef:
		return "a tensor"
	case []byte:
		return fmt.Sprintf("%d bytes", len(x))
	}
	return fmt.Sprintf("a %T", v)
}

// printable returns s, or s quoted when it holds bytes that should not
// reach a terminal (a corrupt file's names can hold anything).
func printable(s string) string {
	for _, r := range s {
		if r < 0x20 || r > 0x7e {
			return strconv.Quote(s)
		}
	}
	return s
}
