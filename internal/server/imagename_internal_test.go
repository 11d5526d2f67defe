package server

import "testing"

// TestImageInputName checks that the image input keeps out of the way of
// a model whose tensor input is itself called "image".
func TestImageInputName(t *testing.T) {
	for _, c := range []struct {
		tensorInput, request string
		wantName             string
		isImage              bool
	}{
		{"input", "image", ImageInputName, true},
		{"input", "input", ImageInputName, false},
		{"input", "image_bytes", ImageInputName, false},
		{"image", "image", AltImageInputName, false},
		{"image", "image_bytes", AltImageInputName, true},
	} {
		st := &modelState{input: tensorMeta{name: c.tensorInput}}
		if got := st.imageInputName(); got != c.wantName {
			t.Errorf("tensor input %q: image input named %q, want %q", c.tensorInput, got, c.wantName)
		}
		if got := st.isImageInput(c.request); got != c.isImage {
			t.Errorf("tensor input %q: request input %q taken as the image input: %v, want %v", c.tensorInput, c.request, got, c.isImage)
		}
	}
}
