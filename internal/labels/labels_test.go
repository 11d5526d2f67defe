package labels

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestImageNet(t *testing.T) {
	names := ImageNet()
	if len(names) != ImageNetClasses {
		t.Fatalf("%d names, want %d", len(names), ImageNetClasses)
	}
	// Spot checks against torchvision's list.
	for i, want := range map[int]string{0: "tench", 1: "goldfish", 207: "golden retriever", 999: "toilet tissue"} {
		if names[i] != want {
			t.Errorf("class %d is %q, want %q", i, names[i], want)
		}
	}
	names[0] = "changed"
	if ImageNet()[0] != "tench" {
		t.Error("ImageNet returned shared storage")
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
		err      string
	}{
		{"lines", "cat\ndog\n", []string{"cat", "dog"}, ""},
		{"no final newline, CRLF, spaces", " cat \r\ndog", []string{"cat", "dog"}, ""},
		{"BOM", "\ufeffcat\ndog\n", []string{"cat", "dog"}, ""},
		{"json list", `["a", "b c"]`, []string{"a", "b c"}, ""},
		{"class index", `{"1": ["n2", "dog"], "0": ["n1", "cat"]}`, []string{"cat", "dog"}, ""},
		{"index of names", `{"0": "cat", "1": "dog"}`, []string{"cat", "dog"}, ""},
		{"empty", "", nil, "empty"},
		{"blank", " \n\n", nil, "empty"},
		{"blank line inside", "cat\n\ndog", nil, "line 2 is blank"},
		{"empty json list", "[]", nil, "empty"},
		{"bad json", `["a",`, nil, "JSON list"},
		{"index gap", `{"0": "a", "2": "b"}`, nil, `key "2"`},
		{"index value", `{"0": 5}`, nil, "want a name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestForModel(t *testing.T) {
	dir := t.TempDir()
	three := filepath.Join(dir, "three.txt")
	if err := os.WriteFile(three, []byte("a\nb\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.txt")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ForModel("", 1000); err != nil || len(got) != 1000 {
		t.Errorf("default for 1000 classes: %d names, %v", len(got), err)
	}
	if got, err := ForModel("", 10); err != nil || got != nil {
		t.Errorf("default for 10 classes: %q, %v; want none", got, err)
	}
	if got, err := ForModel(three, 3); err != nil || len(got) != 3 {
		t.Errorf("file: %q, %v", got, err)
	}
	if _, err := ForModel(three, 1000); err == nil || !strings.Contains(err.Error(), "3 class names for a model with 1000 classes") {
		t.Errorf("count mismatch: err = %v", err)
	}
	if _, err := ForModel(empty, 3); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty file: err = %v", err)
	}
	if _, err := ForModel(filepath.Join(dir, "missing"), 3); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing file: err = %v", err)
	}
}
