package model

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// TestInitStream pins the weights Init makes for a seed: checkpoints made
// by 'goinfer model init' and figures measured on seeded weights stay
// reproducible only while the random stream and its order do not change.
func TestInitStream(t *testing.T) {
	tests := []struct {
		arch Arch
		seed uint64
		want string
	}{
		{narrow(Basic, []int{1, 1, 1, 1}, 8, 10), 1, "12516a5384861e4b4bba21f27afa222b06a81a977ca0de00a101e809af293e37"},
		{NewArch(Bottleneck, []int{1, 1, 1, 1}, 8, 5, 4, 8), 7, "d5ebb19cc9f2b322b09d1e584845e3ac367e20bb8c8da3c55f26dcbb78417f5b"},
	}
	for _, tt := range tests {
		sd, err := Init(context.Background(), tt.arch, tt.seed)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		for _, n := range sd.Names() {
			v, _ := sd.Get(n)
			h.Write([]byte(n))
			h.Write(v.Data)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != tt.want {
			t.Errorf("%s seed %d: weights hash %s, want %s", tt.arch.Name(), tt.seed, got, tt.want)
		}
	}
}
