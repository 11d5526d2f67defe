package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Format is a checkpoint file format.
type Format string

// The formats Load reads and Save writes.
const (
	FormatPTH         Format = "pth"         // torch.save's zip archive
	FormatSafetensors Format = "safetensors" // Hugging Face safetensors
)

// DetectFormat tells the format from a file's first bytes, not its name.
func DetectFormat(head []byte) (Format, error) {
	switch {
	case len(head) == 0:
		return "", errors.New("the file is empty")
	case bytes.HasPrefix(head, []byte("PK\x03\x04")), bytes.HasPrefix(head, []byte("PK\x05\x06")):
		return FormatPTH, nil
	case len(head) >= 2 && head[0] == 0x80 && head[1] <= 5:
		return "", errors.New("legacy torch.save format (a bare pickle, PyTorch < 1.6) is not supported: re-save it with a recent torch.save")
	case len(head) >= 9 && head[8] == '{':
		return FormatSafetensors, nil
	}
	return "", errors.New("unknown checkpoint format: neither a torch.save zip archive nor safetensors")
}

// Load reads a checkpoint, telling .pth/.pt (a zip archive) from
// .safetensors by content. When the file name carries torch.hub's hash
// suffix ("resnet18-f37072fd.pth") the file's sha256 must start with it.
// Tensors alias a read-only memory mapping of the file where its layout
// allows: close the StateDict once the weights have been copied out.
func Load(path string) (*StateDict, error) {
	fb, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	sd, err := parse(path, fb.data)
	if err != nil {
		fb.Close()
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	sd.SetCloser(fb)
	return sd, nil
}

func parse(path string, data []byte) (*StateDict, error) {
	if want, ok := hubHashPrefix(path); ok {
		if err := checkHash(data, want); err != nil {
			return nil, err
		}
	}
	f, err := DetectFormat(data[:min(len(data), 16)])
	if err != nil {
		return nil, err
	}
	if f == FormatPTH {
		return readPTH(data)
	}
	return readSafetensors(data)
}

// FormatOf picks the format Save writes from a file name's extension.
func FormatOf(path string) (Format, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".safetensors":
		return FormatSafetensors, nil
	case ".pth", ".pt", ".bin", ".ckpt":
		return FormatPTH, nil
	}
	return "", fmt.Errorf("cannot tell the checkpoint format from %q: use a .safetensors, .pth or .pt extension", path)
}

// Save writes sd to path in the format its extension names: .safetensors,
// or .pth/.pt (torch.save's zip format, readable by
// torch.load(weights_only=True)). The file appears complete or not at all.
func Save(path string, sd *StateDict) error {
	f, err := FormatOf(path)
	if err != nil {
		return err
	}
	write := writeSafetensors
	if f == FormatPTH {
		write = writePTH
	}
	return writeAtomic(path, func(w io.Writer) error { return write(w, sd) })
}

// writeAtomic writes through a temporary file in path's directory and
// renames it into place, so a failure never leaves a partial file.
func writeAtomic(path string, write func(io.Writer) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("saving %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		return fmt.Errorf("saving %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("saving %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("saving %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("saving %s: %w", path, err)
	}
	return nil
}
