package cuda

import (
	"testing"

	cu "goinfer/internal/cuda"
)

// On a machine without a GPU, Prepare must finish (Load waits for it) and
// leave no handles; with one, bench and the GPU tests exercise it.
func TestPrepareWithoutGPU(t *testing.T) {
	if cu.Usable() == nil {
		t.Skip("a GPU is usable here: this test covers machines without one")
	}
	const ordinal = 3
	var e Engine
	e.Prepare(ordinal)
	e.Prepare(ordinal) // a second call starts nothing
	waitPrepared(ordinal)
	if _, _, ok := spareHandles(ordinal); ok {
		t.Fatal("spareHandles found handles on a machine without a GPU")
	}
	waitPrepared(ordinal + 1) // never prepared: returns at once
}
