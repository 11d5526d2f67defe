package sweep

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"goinfer/internal/metrics"
)

// loadCSV reads the rows already in the sweep's CSV (none when it does not
// exist). A last line without its newline can only be an append that was
// cut short (the machine died mid-write): it is not a complete row, so it
// is cut off, and the returned note says so.
func loadCSV(path string) (rows []metrics.Row, note string, err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("results file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, "", fmt.Errorf("reading %s: %w", path, err)
	}
	if n := len(data); n > 0 && data[n-1] != '\n' {
		keep := bytes.LastIndexByte(data, '\n') + 1
		if keep == 0 {
			return nil, "", fmt.Errorf("%s: has no complete line (not a results CSV?)", path)
		}
		if err := f.Truncate(int64(keep)); err != nil {
			return nil, "", fmt.Errorf("%s: cutting off its incomplete last line: %w", path, err)
		}
		note = fmt.Sprintf("%s: cut off an incomplete last line (%d bytes) left by an interrupted write", path, n-keep)
		data = data[:keep]
	}
	if len(data) > 0 {
		// Refuse a foreign CSV now rather than after the first run, when
		// appending its row would fail.
		header, err := csv.NewReader(bytes.NewReader(data)).Read()
		if err != nil {
			return nil, "", fmt.Errorf("%s: reading its CSV header: %w", path, err)
		}
		for i := range header {
			header[i] = strings.TrimSpace(header[i])
		}
		if !slices.Equal(header, metrics.Columns) {
			return nil, "", fmt.Errorf("%s: its header is not the one goinfer bench writes; pass another --output_file", path)
		}
	}
	rows, err = metrics.ReadRows(bytes.NewReader(data))
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return rows, note, nil
}

// ReadCSV reads the rows of a results CSV for planning, without changing
// it: none when it does not exist, and an incomplete last line (one without
// its newline) is left out.
func ReadCSV(path string) ([]metrics.Row, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("results file: %w", err)
	}
	if n := len(data); n > 0 && data[n-1] != '\n' {
		data = data[:bytes.LastIndexByte(data, '\n')+1]
	}
	rows, err := metrics.ReadRows(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rows, nil
}

// readRunRow reads the one row a bench run wrote to its own file.
func readRunRow(path string) (metrics.Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return metrics.Row{}, fmt.Errorf("bench wrote no results: %w", err)
	}
	defer f.Close()
	rows, err := metrics.ReadRows(f)
	if err != nil {
		return metrics.Row{}, fmt.Errorf("bench's results %s: %w", path, err)
	}
	if len(rows) != 1 {
		return metrics.Row{}, fmt.Errorf("bench's results %s: %d rows, want 1", path, len(rows))
	}
	return rows[0], nil
}
