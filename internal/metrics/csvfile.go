package metrics

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// AppendRow appends r to the CSV file at path, as the reference appends to
// results/<output_file>: the directory and the header are created when the
// file is new or empty, and existing rows are never rewritten. An existing
// file whose header is not Columns (another tool's CSV, an older goinfer
// version) is refused with an error rather than mixed with rows it cannot
// describe, and so is a file whose last line is cut short (no final
// newline), which appending would corrupt.
func AppendRow(path string, r Row) error {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("results directory: %w", err)
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("results file: %w", err)
	}
	var buf bytes.Buffer
	newFile, err := checkExisting(f, path)
	if err == nil && newFile {
		err = WriteHeader(&buf)
	}
	if err == nil {
		err = WriteRow(&buf, r)
	}
	if err == nil {
		// One write, so that a concurrent reader (or a second bench appending
		// to the same file with O_APPEND) never sees half a row.
		_, err = f.Write(buf.Bytes())
		if err != nil {
			err = fmt.Errorf("appending to %s: %w", path, err)
		}
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("closing %s: %w", path, cerr)
	}
	return err
}

// checkExisting reports whether f is empty, and otherwise checks that its
// header is Columns and that it ends with a newline.
func checkExisting(f *os.File, path string) (empty bool, err error) {
	st, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("results file: %w", err)
	}
	if st.Size() == 0 {
		return true, nil
	}
	header, err := csv.NewReader(io.NewSectionReader(f, 0, st.Size())).Read()
	if err != nil {
		return false, fmt.Errorf("%s: reading its CSV header: %w", path, err)
	}
	for i := range header {
		header[i] = strings.TrimSpace(header[i])
	}
	if !slices.Equal(header, Columns) {
		return false, fmt.Errorf("%s: its header is not goinfer's (%s); refusing to append: pass another --output_file or move the file away",
			path, headerDiff(header, Columns))
	}
	last := make([]byte, 1)
	if _, err := f.ReadAt(last, st.Size()-1); err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	if last[0] != '\n' {
		return false, fmt.Errorf("%s: its last line has no final newline (a cut-short write?); refusing to append to it", path)
	}
	return false, nil
}

// headerDiff says where got first differs from want.
func headerDiff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("column %d is %q, want %q", i+1, got[i], want[i])
		}
	}
	return fmt.Sprintf("%d columns, want %d", len(got), len(want))
}
