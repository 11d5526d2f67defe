package server

import (
	"encoding/json"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"sync"

	"goinfer/internal/engine"
	"goinfer/internal/kservepb"
	"goinfer/internal/shm"
)

// The parameters of Triton's shared-memory extension: a tensor whose
// parameters name a registered region lies there instead of in the
// request or response.
const (
	paramShmRegion = "shared_memory_region"
	paramShmSize   = "shared_memory_byte_size"
	paramShmOffset = "shared_memory_offset"
)

// maxShmRegions bounds the regions registered at once: each holds a
// mapping and a file descriptor's worth of kernel state.
const maxShmRegions = 4096

// shmRef is where a request's parameters put a tensor.
type shmRef struct {
	region       string
	offset, size int64
}

// shmRegion is a registered region of a client's shared memory object.
type shmRegion struct {
	name, key    string
	offset, size uint64
	m            *shm.Mapping
	refs         int  // requests using the mapping now
	gone         bool // unregistered: the last user unmaps

	// pinned is the mapping page-locked for the device (Model.RegisterHost),
	// tried once, by the first request that could use it; nil if that
	// failed or the model cannot.
	pinOnce sync.Once
	pinned  engine.HostBuffer
}

// unmap frees the region's mapping; r.mu is held and no request uses it.
func (reg *shmRegion) unmap(log *slog.Logger) {
	if reg.pinned != nil {
		if err := reg.pinned.Free(); err != nil {
			log.Warn("shared memory region: unpinning", "region", reg.name, "err", err)
		}
		reg.pinned = nil
	}
	if err := reg.m.Close(); err != nil {
		log.Warn("shared memory region: unmapping", "region", reg.name, "err", err)
	}
}

// shmRegistry holds the system shared memory regions clients registered.
// Unregistering a region that requests still use only removes its name;
// the mapping lives until the last of them is done with it.
type shmRegistry struct {
	allowed bool
	log     *slog.Logger
	mu      sync.Mutex
	regions map[string]*shmRegion
}

func (r *shmRegistry) enabled() error {
	if !r.allowed {
		return errorf(kindInvalid, "system shared memory is disabled on this server (start goinfer serve with --allow_shared_memory)")
	}
	if !shm.Supported() {
		return errorf(kindInvalid, "%v", shm.ErrUnsupported)
	}
	return nil
}

func (r *shmRegistry) register(name, key string, offset, size uint64) error {
	if err := r.enabled(); err != nil {
		return err
	}
	if name == "" {
		return errorf(kindInvalid, "shared memory region name is empty")
	}
	if size == 0 {
		return errorf(kindInvalid, "shared memory region %q: byte_size is 0", name)
	}
	if offset > math.MaxInt64 || size > math.MaxInt64 {
		return errorf(kindInvalid, "shared memory region %q: offset %d or byte_size %d is too large", name, offset, size)
	}
	r.mu.Lock()
	_, dup := r.regions[name]
	full := len(r.regions) >= maxShmRegions
	r.mu.Unlock()
	switch {
	case dup:
		return errorf(kindInvalid, "shared memory region %q is already registered; unregister it first", name)
	case full:
		return errorf(kindInvalid, "shared memory region %q: %d regions are registered, the most this server keeps", name, maxShmRegions)
	}
	m, err := shm.Open(key, offset, size)
	if err != nil {
		return errorf(kindInvalid, "shared memory region %q: %v", name, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.regions[name]; dup { // registered meanwhile
		m.Close()
		return errorf(kindInvalid, "shared memory region %q is already registered; unregister it first", name)
	}
	if r.regions == nil {
		r.regions = map[string]*shmRegion{}
	}
	r.regions[name] = &shmRegion{name: name, key: key, offset: offset, size: size, m: m}
	return nil
}

// unregister removes the region name, or all regions when name is empty.
// An unknown name is not an error: unregistering is idempotent, as
// clients clean up on every path.
func (r *shmRegistry) unregister(name string) error {
	if err := r.enabled(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for n, reg := range r.regions {
		if name == "" || n == name {
			delete(r.regions, n)
			reg.gone = true
			if reg.refs == 0 {
				reg.unmap(r.log)
			}
		}
	}
	return nil
}

// stats counts the registered regions and the bytes of them page-locked,
// for the goinfer_shared_memory_* gauges.
func (r *shmRegistry) stats() (regions int, pinnedBytes int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, reg := range r.regions {
		if reg.pinned != nil {
			pinnedBytes += int64(len(reg.pinned.Bytes()))
		}
	}
	return len(r.regions), pinnedBytes
}

// regionStatus is one region as the status endpoints report it.
type regionStatus struct {
	Name     string `json:"name"`
	Key      string `json:"key"`
	Offset   uint64 `json:"offset"`
	ByteSize uint64 `json:"byte_size"`
}

// status lists the region name, or all regions, sorted by name.
func (r *shmRegistry) status(name string) ([]regionStatus, error) {
	if err := r.enabled(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []regionStatus{}
	for n, reg := range r.regions {
		if name == "" || n == name {
			out = append(out, regionStatus{Name: n, Key: reg.key, Offset: reg.offset, ByteSize: reg.size})
		}
	}
	if name != "" && len(out) == 0 {
		return nil, errorf(kindNotFound, "no shared memory region %q is registered", name)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// acquire returns the bytes ref names, holding the region until release.
// want is the size the tensor needs; exact says the reference must be
// exactly that size (an input) rather than at least (an output, whose
// size a classification result decides only later). field names the
// tensor in errors.
func (r *shmRegistry) acquire(ref shmRef, want int, exact bool, field string) ([]byte, *shmRegion, error) {
	if err := r.enabled(); err != nil {
		return nil, nil, err
	}
	switch {
	case exact && ref.size != int64(want):
		return nil, nil, errorf(kindInvalid, "%s.parameters.%s is %d; the tensor needs %d bytes", field, paramShmSize, ref.size, want)
	case !exact && ref.size < int64(want):
		return nil, nil, errorf(kindInvalid, "%s.parameters.%s is %d; the output needs at least %d bytes", field, paramShmSize, ref.size, want)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	reg := r.regions[ref.region]
	if reg == nil {
		return nil, nil, errorf(kindInvalid, "%s.parameters.%s: no shared memory region %q is registered", field, paramShmRegion, ref.region)
	}
	if ref.offset < 0 || ref.size <= 0 || uint64(ref.offset) > reg.size || uint64(ref.size) > reg.size-uint64(ref.offset) {
		return nil, nil, errorf(kindInvalid, "%s: bytes [%d, %d+%d) lie outside shared memory region %q of %d bytes", field, ref.offset, ref.offset, ref.size, ref.region, reg.size)
	}
	reg.refs++
	b := reg.m.Bytes()[ref.offset : ref.offset+ref.size]
	return b, reg, nil
}

// release ends a use that acquire began; nil is a no-op.
func (r *shmRegistry) release(reg *shmRegion) {
	if reg == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	reg.refs--
	if reg.refs == 0 && reg.gone {
		reg.unmap(r.log)
	}
}

// pin page-locks reg's mapping with register the first time it is asked
// and reports whether it is page-locked. The caller holds reg.
func (r *shmRegistry) pin(reg *shmRegion, register func([]byte) (engine.HostBuffer, error)) bool {
	reg.pinOnce.Do(func() {
		hb, err := register(reg.m.Pages())
		if err != nil {
			r.log.Warn("shared memory region: not page-locked, its inputs are copied", "region", reg.name, "err", err)
			return
		}
		r.mu.Lock()
		reg.pinned = hb
		r.mu.Unlock()
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	return reg.pinned != nil
}

// close unmaps every region; the server calls it once no request runs.
func (r *shmRegistry) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for n, reg := range r.regions {
		delete(r.regions, n)
		reg.gone = true
		if reg.refs == 0 {
			reg.unmap(r.log)
		}
	}
}

// shmParams reads the extension's parameters of one tensor from getters
// for a string and an int64 parameter; ok is false when the tensor does
// not use shared memory.
func shmParams(field string, str func(key string) (string, bool, error), i64 func(key string) (int64, bool, error)) (ref shmRef, ok bool, err error) {
	region, hasRegion, err := str(paramShmRegion)
	if err != nil {
		return ref, false, err
	}
	size, hasSize, err := i64(paramShmSize)
	if err != nil {
		return ref, false, err
	}
	off, _, err := i64(paramShmOffset)
	if err != nil {
		return ref, false, err
	}
	switch {
	case !hasRegion && !hasSize:
		if off != 0 {
			return ref, false, errorf(kindInvalid, "%s.parameters.%s is set without %s", field, paramShmOffset, paramShmRegion)
		}
		return ref, false, nil
	case !hasSize:
		return ref, false, errorf(kindInvalid, "%s.parameters.%s is set without %s", field, paramShmRegion, paramShmSize)
	case !hasRegion:
		return ref, false, errorf(kindInvalid, "%s.parameters.%s is set without %s", field, paramShmSize, paramShmRegion)
	case region == "":
		return ref, false, errorf(kindInvalid, "%s.parameters.%s is empty", field, paramShmRegion)
	case size <= 0:
		return ref, false, errorf(kindInvalid, "%s.parameters.%s is %d; want a positive byte count", field, paramShmSize, size)
	case off < 0:
		return ref, false, errorf(kindInvalid, "%s.parameters.%s is %d; want an offset >= 0", field, paramShmOffset, off)
	}
	return shmRef{region: region, offset: off, size: size}, true, nil
}

// grpcShmParams reads the extension's parameters from a gRPC tensor.
func grpcShmParams(params map[string]*kservepb.InferParameter, field string) (shmRef, bool, error) {
	return shmParams(field,
		func(key string) (string, bool, error) {
			p, ok := params[key]
			if !ok {
				return "", false, nil
			}
			v, isStr := p.GetParameterChoice().(*kservepb.InferParameter_StringParam)
			if !isStr {
				return "", true, errorf(kindInvalid, "%s.parameters.%s must be a string_param", field, key)
			}
			return v.StringParam, true, nil
		},
		func(key string) (int64, bool, error) {
			p, ok := params[key]
			if !ok {
				return 0, false, nil
			}
			switch v := p.GetParameterChoice().(type) {
			case *kservepb.InferParameter_Int64Param:
				return v.Int64Param, true, nil
			case *kservepb.InferParameter_Uint64Param:
				if v.Uint64Param > math.MaxInt64 {
					return 0, true, outOfRange(field, key, strconv.FormatUint(v.Uint64Param, 10))
				}
				return int64(v.Uint64Param), true, nil
			}
			return 0, true, errorf(kindInvalid, "%s.parameters.%s must be an int64_param or a uint64_param", field, key)
		})
}

// httpShmParams reads the extension's parameters from a JSON tensor.
func httpShmParams(params map[string]json.RawMessage, field string) (shmRef, bool, error) {
	return shmParams(field,
		func(key string) (string, bool, error) {
			raw, ok := params[key]
			if !ok {
				return "", false, nil
			}
			var v string
			if err := json.Unmarshal(raw, &v); err != nil {
				return "", true, errorf(kindInvalid, "%s.parameters.%s is %s; want a string", field, key, raw)
			}
			return v, true, nil
		},
		func(key string) (int64, bool, error) { return paramInt(params, key, field) })
}

// shmUse is what one request holds of shared memory: the input's region
// while the device may read it, and the output's from before the
// inference until the result is written to it.
type shmUse struct {
	reg      *shmRegistry
	pool     *requestPool // where a copied input goes
	in, out  *shmRegion
	copied   *[]byte // the input's copy, from pool
	outBytes []byte  // where the output goes
	outRef   shmRef
}

// done releases what the request holds.
func (u *shmUse) done() {
	u.reg.release(u.in)
	u.reg.release(u.out)
	if u.copied != nil {
		u.pool.Put(u.copied)
	}
	u.in, u.out, u.copied, u.outBytes = nil, nil, nil, nil
}

// input returns the n bytes of the input tensor. When register is set
// (the model's device can page-lock memory and takes the tensor's dtype
// as it is), the region is page-locked once and the result is a view of
// it that the device copies from directly (pinned), held until done: the
// client's bytes reach the GPU without a copy on the host, and the CPU
// never reads them, so a client that shrinks its object cannot fault the
// server. Otherwise the bytes are copied, under fault protection, into a
// buffer of u.pool (page-locked when it can be) kept until done.
func (u *shmUse) input(ref shmRef, n int, register func([]byte) (engine.HostBuffer, error)) (data []byte, pinned bool, err error) {
	src, reg, err := u.reg.acquire(ref, n, true, "inputs[0]")
	if err != nil {
		return nil, false, err
	}
	if register != nil && u.reg.pin(reg, register) {
		u.in = reg
		return src, true, nil
	}
	defer u.reg.release(reg)
	u.copied = u.pool.Get(n)
	buf := *u.copied
	if _, err := shm.Copy(buf, src); err != nil {
		return nil, false, errorf(kindInvalid, "inputs[0]: reading shared memory region %q: %v", ref.region, err)
	}
	return buf, u.pool.Pinned(buf), nil
}

// holdOutput checks and holds the output's region; at least bytes must fit.
func (u *shmUse) holdOutput(ref shmRef, bytes int) error {
	b, reg, err := u.reg.acquire(ref, bytes, false, "outputs[0]")
	if err != nil {
		return err
	}
	u.out, u.outBytes, u.outRef = reg, b, ref
	return nil
}

// writeOutput copies the output tensor into its region and returns the
// byte count written.
func (u *shmUse) writeOutput(src []byte) (int, error) {
	if len(src) > len(u.outBytes) {
		return 0, errorf(kindInvalid, "outputs[0].parameters.%s is %d; the output needs %d bytes", paramShmSize, len(u.outBytes), len(src))
	}
	if _, err := shm.Copy(u.outBytes, src); err != nil {
		return 0, errorf(kindInvalid, "outputs[0]: writing shared memory region %q: %v", u.outRef.region, err)
	}
	return len(src), nil
}
