//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

func TestSoakRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--duration", "1s"},
		{"--clients", "0"},
		{"--big_bodies", "-1"},
		{"--image_size", "4"},
	} {
		if err := runSoak(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{}); !errors.Is(err, errUsage) {
			t.Errorf("soak %q: %v, want a usage error", args, err)
		}
	}
}
