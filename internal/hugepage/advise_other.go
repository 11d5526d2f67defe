//go:build !linux

package hugepage

// alloc is make elsewhere: the advice is Linux's.
func alloc[T any](n, size int) []T { return make([]T, n) }

// Advised is false elsewhere: the advice is Linux's.
func Advised() bool { return false }
