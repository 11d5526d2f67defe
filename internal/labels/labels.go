// Package labels holds class names for classification results: ImageNet's
// 1,000 names, built in, and files of other names (--labels FILE).
package labels

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// imagenetText is tools/labels/make_imagenet.py's output: torchvision's
// names of the ImageNet-1k classes, one per line in class-index order.
//
//go:embed imagenet.txt
var imagenetText string

// ImageNetClasses is the number of classes ImageNet-1k classifiers have.
const ImageNetClasses = 1000

// ImageNet returns ImageNet-1k's class names in class-index order, as
// torchvision's pretrained classifiers name them. The slice is the
// caller's.
func ImageNet() []string {
	return strings.Split(strings.TrimSuffix(imagenetText, "\n"), "\n")
}

// Load reads class names from a file: one name per line (surrounding
// spaces trimmed; a final newline is optional), a JSON list of strings, or
// a JSON object mapping class indices to names or to [id, name] pairs as
// imagenet_class_index.json does.
func Load(path string) ([]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("labels: %w", err)
	}
	names, err := Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("labels %s: %w", path, err)
	}
	return names, nil
}

// Parse reads class names in one of Load's formats.
func Parse(raw []byte) ([]string, error) {
	text := strings.TrimSpace(strings.TrimPrefix(string(raw), "\ufeff"))
	switch {
	case text == "":
		return nil, errors.New("the file is empty; want one class name per line")
	case strings.HasPrefix(text, "["):
		var list []string
		if err := json.Unmarshal([]byte(text), &list); err != nil {
			return nil, fmt.Errorf("want a JSON list of strings: %w", err)
		}
		if len(list) == 0 {
			return nil, errors.New("the JSON list is empty")
		}
		return list, nil
	case strings.HasPrefix(text, "{"):
		return parseIndex(text)
	}
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
		if lines[i] == "" {
			return nil, fmt.Errorf("line %d is blank; every class needs a name (one per line, in class-index order)", i+1)
		}
	}
	return lines, nil
}

// parseIndex reads {"0": "name"} or {"0": ["n01440364", "name"]}.
func parseIndex(text string) ([]string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &obj); err != nil {
		return nil, fmt.Errorf("want a JSON object of class indices: %w", err)
	}
	if len(obj) == 0 {
		return nil, errors.New("the JSON object is empty")
	}
	out := make([]string, len(obj))
	for k, v := range obj {
		i, err := strconv.Atoi(k)
		if err != nil || i < 0 || i >= len(obj) {
			return nil, fmt.Errorf("key %q is not a class index in 0..%d", k, len(obj)-1)
		}
		var name string
		var pair []string
		switch {
		case json.Unmarshal(v, &name) == nil:
		case json.Unmarshal(v, &pair) == nil && len(pair) > 0:
			name = pair[len(pair)-1]
		default:
			return nil, fmt.Errorf("class %q maps to %s; want a name or [id, name]", k, v)
		}
		out[i] = name
	}
	return out, nil
}

// Check reports whether names name every one of a model's classes.
func Check(names []string, classes int) error {
	if len(names) != classes {
		return fmt.Errorf("%d class names for a model with %d classes", len(names), classes)
	}
	return nil
}

// ForModel returns the names classification results use for a model of
// classes classes: those in path when it is set (an error when they do not
// name every class), else ImageNet's for a 1,000-class model, else none.
func ForModel(path string, classes int) ([]string, error) {
	if path == "" {
		if classes == ImageNetClasses {
			return ImageNet(), nil
		}
		return nil, nil
	}
	names, err := Load(path)
	if err != nil {
		return nil, err
	}
	if err := Check(names, classes); err != nil {
		return nil, fmt.Errorf("--labels %s: %w", path, err)
	}
	return names, nil
}
