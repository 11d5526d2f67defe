package loadgen

import (
	"bytes"
	"context"
	"testing"

	"goinfer/internal/tensor"
)

// TestGenerateAhead: the tensors GenerateAhead makes in the background are
// Generate's bit for bit, the first is ready on return, and Close waits
// for the others, also when the context is cancelled meanwhile.
func TestGenerateAhead(t *testing.T) {
	s := Shape{BatchSize: 2, Channels: 3, Height: 16, Width: 16, DType: tensor.Float32, Seed: 5}
	want, err := Generate(context.Background(), s, 6)
	if err != nil {
		t.Fatal(err)
	}
	got, err := GenerateAhead(context.Background(), s, 6)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Tensors[0].Data, want.Tensors[0].Data) {
		t.Error("tensor 0 differs from Generate's")
	}
	if err := got.Ready(); err != nil {
		t.Fatal(err)
	}
	for i := range want.Tensors {
		if !bytes.Equal(got.Tensors[i].Data, want.Tensors[i].Data) {
			t.Errorf("tensor %d differs from Generate's", i)
		}
	}
	if err := got.Close(); err != nil {
		t.Error(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	in, err := GenerateAhead(ctx, s, 50)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := in.Close(); err != nil {
		t.Errorf("Close after cancelling: %v", err)
	}
}
