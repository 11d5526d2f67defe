// Package hugepage allocates large buffers that the kernel may back with
// transparent huge pages. Where transparent huge pages are enabled only on
// request (the "madvise" setting, common on VMs and CI machines), the Go
// heap gets 4 KiB pages, and the first touch of a large buffer costs a
// page fault per 4 KiB: on a virtual machine, where each fault also goes
// through the hypervisor, that is milliseconds per MiB, and a model's
// weights, activations and request tensors add up to hundreds of MiB.
// With the advice, one fault maps 2 MiB. That is not faster on virtual
// machines whose balloon reports free memory to the host (Advised): there
// the advice is left off. A large buffer is placed on a 2
// MiB boundary (in an allocation up to 2 MiB larger, never touched beyond
// the buffer's last huge page), so that all of it, not only the aligned
// huge pages inside it, is mapped that way.
//
// The buffers are ordinary Go memory (the garbage collector frees them);
// the advice only changes how the kernel backs the pages.
package hugepage

// minBytes is the size below which a buffer is an ordinary allocation: a
// buffer this large or larger starts on a 2 MiB boundary and is advised
// whole, so at most its last huge page is partly unused.
const minBytes = 1 << 20

// Float32s returns a zeroed []float32 of length n, advised for huge pages
// when it is large enough.
func Float32s(n int) []float32 { return alloc[float32](n, 4) }

// Float64s returns a zeroed []float64 of length n, advised for huge pages
// when it is large enough.
func Float64s(n int) []float64 { return alloc[float64](n, 8) }

// Bytes returns a zeroed []byte of length n, advised for huge pages when it
// is large enough.
func Bytes(n int) []byte { return alloc[byte](n, 1) }
