// Package metrics holds benchmark results: latency statistics, GPU samples
// and the CSV rows that `bench` appends and `report` reads.
package metrics

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Row is one benchmark run, one CSV line. The first columns are the
// reference's (load_time and compile_time stand for its torch_load_time and
// m_compile_time); the rest are goinfer's. Durations are seconds, as in the
// reference. Unknown values (gpu_util without a GPU) are NaN and written as
// an empty cell, never as a made-up 0.
type Row struct {
	BatchSize      int
	Compile        bool
	LoadTime       float64
	CompileTime    float64
	WarmupLatency  float64
	AverageLatency float64
	MaxLatency     float64
	MinLatency     float64
	Throughput     float64 // images per second
	GPUUtil        float64 // percent, NaN without a GPU

	Experiment  string // sweep experiment name ("" for a plain bench)
	Engine      string
	Device      string
	Arch        string
	Precision   string
	InputDType  string
	NumWorkers  int
	CopyStreams bool
	NumDevices  int
	ImageSize   int
	NumIters    int
	Mode        string // flood, concurrency=C, rate=R
	StdLatency  float64
	P50Latency  float64
	P90Latency  float64
	P99Latency  float64
	GFLOPS      float64 // effective, 2 FLOPs per MAC
	GPUMemPeak  float64 // MiB, NaN without a GPU
	Seed        uint64
	Timestamp   string // RFC 3339, when the run ended
}

// Columns is the CSV header, in order.
var Columns = []string{
	"batch_size", "compile", "load_time", "compile_time", "warmup_latency",
	"average_latency", "max_latency", "min_latency", "throughput", "gpu_util",
	"experiment", "engine", "device", "arch", "precision", "input_dtype",
	"num_workers", "copy_streams", "num_devices", "image_size", "num_iters", "mode",
	"std_latency", "p50_latency", "p90_latency", "p99_latency", "gflops",
	"gpu_mem_peak_mib", "seed", "timestamp",
}

func fmtFloat(v float64) string {
	if math.IsNaN(v) {
		return ""
	}
	return strconv.FormatFloat(v, 'g', 7, 64)
}

// Record returns the row's cells in Columns order.
func (r Row) Record() []string {
	return []string{
		strconv.Itoa(r.BatchSize), strconv.FormatBool(r.Compile),
		fmtFloat(r.LoadTime), fmtFloat(r.CompileTime), fmtFloat(r.WarmupLatency),
		fmtFloat(r.AverageLatency), fmtFloat(r.MaxLatency), fmtFloat(r.MinLatency),
		fmtFloat(r.Throughput), fmtFloat(r.GPUUtil),
		r.Experiment, r.Engine, r.Device, r.Arch, r.Precision, r.InputDType,
		strconv.Itoa(r.NumWorkers), strconv.FormatBool(r.CopyStreams), strconv.Itoa(r.NumDevices),
		strconv.Itoa(r.ImageSize), strconv.Itoa(r.NumIters), r.Mode,
		fmtFloat(r.StdLatency), fmtFloat(r.P50Latency), fmtFloat(r.P90Latency), fmtFloat(r.P99Latency),
		fmtFloat(r.GFLOPS), fmtFloat(r.GPUMemPeak),
		strconv.FormatUint(r.Seed, 10), r.Timestamp,
	}
}

// WriteHeader writes the CSV header line.
func WriteHeader(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(Columns); err != nil {
		return err
	}
	cw.Flush()
	return cw.Error()
}

// WriteRow writes one CSV line.
func WriteRow(w io.Writer, r Row) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(r.Record()); err != nil {
		return err
	}
	cw.Flush()
	return cw.Error()
}

// ReadRows parses a CSV written by WriteHeader/WriteRow. Columns are found by
// name, so files with extra or reordered columns (or the reference's own
// CSV, whose torch_load_time/m_compile_time map to load/compile time) read
// too; missing columns stay zero (NaN for the optional floats).
func ReadRows(r io.Reader) ([]Row, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err == io.EOF {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading CSV header: %w", err)
	}
	idx := map[string]int{}
	for i, h := range header {
		h = strings.TrimSpace(h)
		switch h {
		case "torch_load_time":
			h = "load_time"
		case "m_compile_time":
			h = "compile_time"
		}
		idx[h] = i
	}
	if _, ok := idx["batch_size"]; !ok {
		return nil, fmt.Errorf("CSV header has no batch_size column: %v", header)
	}
	var rows []Row
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("CSV line %d: %w", line, err)
		}
		p := rowParser{rec: rec, idx: idx}
		row := Row{
			BatchSize: p.int("batch_size"), Compile: p.bool("compile"),
			LoadTime: p.float("load_time"), CompileTime: p.float("compile_time"),
			WarmupLatency: p.float("warmup_latency"), AverageLatency: p.float("average_latency"),
			MaxLatency: p.float("max_latency"), MinLatency: p.float("min_latency"),
			Throughput: p.float("throughput"), GPUUtil: p.float("gpu_util"),
			Experiment: p.str("experiment"), Engine: p.str("engine"), Device: p.str("device"),
			Arch: p.str("arch"), Precision: p.str("precision"), InputDType: p.str("input_dtype"),
			NumWorkers: p.int("num_workers"), CopyStreams: p.bool("copy_streams"),
			NumDevices: p.int("num_devices"), ImageSize: p.int("image_size"),
			NumIters: p.int("num_iters"), Mode: p.str("mode"),
			StdLatency: p.float("std_latency"), P50Latency: p.float("p50_latency"),
			P90Latency: p.float("p90_latency"), P99Latency: p.float("p99_latency"),
			GFLOPS: p.float("gflops"), GPUMemPeak: p.float("gpu_mem_peak_mib"),
			Seed: uint64(p.int("seed")), Timestamp: p.str("timestamp"),
		}
		if p.err != nil {
			return nil, fmt.Errorf("CSV line %d: %w", line, p.err)
		}
		rows = append(rows, row)
	}
}

type rowParser struct {
	rec []string
	idx map[string]int
	err error
}

func (p *rowParser) str(col string) string {
	i, ok := p.idx[col]
	if !ok || i >= len(p.rec) {
		return ""
	}
	return strings.TrimSpace(p.rec[i])
}

func (p *rowParser) float(col string) float64 {
	s := p.str(col)
	if s == "" || s == "N/A" || s == "nan" || s == "NaN" {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("column %s: %q is not a number", col, s)
	}
	return v
}

func (p *rowParser) int(col string) int {
	s := p.str(col)
	if s == "" {
		return 0
	}
	v, err := strconv.Atoi(s)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("column %s: %q is not an integer", col, s)
	}
	return v
}

func (p *rowParser) bool(col string) bool {
	s := p.str(col)
	switch strings.ToLower(s) {
	case "", "false", "0", "no":
		return false
	case "true", "1", "yes":
		return true
	}
	if p.err == nil {
		p.err = fmt.Errorf("column %s: %q is not a boolean", col, s)
	}
	return false
}
