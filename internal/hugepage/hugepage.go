// Package hugepage allocates large buffers that the kernel may back with
// transparent huge pages. Where transparent huge pages are enabled only on
// request (the "madvise" setting, common on VMs and CI machines), the Go
// heap gets 4 KiB pages, and the first touch of a large buffer costs a
// page fault per 4 KiB: on a virtual machine, where each fault also goes
// through the hypervisor, that is milliseconds per MiB, and a model's
// weights, activations and request tensors add up to hundreds of MiB.
// With the advice, one fault maps 2 MiB.
//
// The buffers are ordinary Go memory (the garbage collector frees them);
// the advice only changes how the kernel backs the pages.
package hugepage

// minBytes is the size below which the advice is not worth a system
// call: a buffer must span at least one whole aligned 2 MiB page.
const minBytes = 4 << 20

// Float32s returns a zeroed []float32 of length n, advised for huge pages
// when it is large enough.
func Float32s(n int) []float32 {
	b := make([]float32, n)
	if 4*n >= minBytes {
		advise(b)
	}
	return b
}

// Bytes returns a zeroed []byte of length n, advised for huge pages when it
// is large enough.
func Bytes(n int) []byte {
	b := make([]byte, n)
	if n >= minBytes {
		advise(b)
	}
	return b
}
