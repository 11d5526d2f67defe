package main

// The engines this binary can run; each registers itself with
// internal/engine from its init function.
import (
	_ "goinfer/internal/engine/cpu"
	_ "goinfer/internal/engine/cuda"
)
