package cuda

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// sampleBuffer follows nvmlDeviceGetSamples' documented contract over a
// list of entries: entries newer than lastSeenTimeStamp, NOT_FOUND when
// there are none, the count alone when samples is NULL, else up to *count
// entries. Entries in late arrive right after the first (sizing) call, as
// samples the driver takes between the two calls do.
type sampleBuffer struct {
	valType uint32
	entries []nvmlSample
	late    []nvmlSample
	fail    int32 // a status to return instead, when not 0
	calls   int
}

func (b *sampleBuffer) get(_ uintptr, typ uint32, lastSeen uint64, valType, count *uint32, samples *nvmlSample) int32 {
	b.calls++
	if b.fail != 0 {
		return b.fail
	}
	if typ != nvmlGPUUtilizationSamples {
		return 2 // NVML_ERROR_INVALID_ARGUMENT
	}
	var newer []nvmlSample
	for _, e := range b.entries {
		if e.timeStamp > lastSeen {
			newer = append(newer, e)
		}
	}
	if len(newer) == 0 {
		return nvmlErrorNotFound
	}
	*valType = b.valType
	if samples == nil {
		*count = uint32(len(newer))
		b.entries = append(b.entries, b.late...)
		b.late = nil
		return nvmlSuccess
	}
	if int(*count) < len(newer) {
		*count = uint32(len(newer))
		return nvmlErrorInsufficientSize
	}
	copy(unsafe.Slice(samples, *count), newer)
	*count = uint32(len(newer))
	return nvmlSuccess
}

func fakeNVML(get func(uintptr, uint32, uint64, *uint32, *uint32, *nvmlSample) int32) *NVML {
	return &NVML{
		devs:          map[int]uintptr{0: 1},
		errorString:   func(code int32) string { return fmt.Sprintf("NVML status %d", code) },
		deviceSamples: get,
	}
}

// us is a timestamp in µs since the epoch, t0 + ms milliseconds.
func us(ms int64) uint64 { return uint64(t0.UnixMicro() + ms*1000) }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(ms int64) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestUtilizationSamples(t *testing.T) {
	pct := func(v uint32) uint64 { return uint64(v) }
	tests := []struct {
		name    string
		buf     sampleBuffer
		since   time.Time
		want    []UtilSample
		wantErr string
	}{
		{
			name: "ring order sorted, older than since dropped",
			buf: sampleBuffer{valType: nvmlValueUnsignedInt, entries: []nvmlSample{
				{us(300), pct(70)}, {us(400), pct(90)}, {us(100), pct(10)}, {us(200), pct(50)},
			}},
			since: at(100),
			want:  []UtilSample{{at(200), 50}, {at(300), 70}, {at(400), 90}},
		},
		{
			name:  "zero since reads the whole buffer, unfilled entries dropped",
			buf:   sampleBuffer{valType: nvmlValueUnsignedInt, entries: []nvmlSample{{0, 0}, {us(100), pct(100)}}},
			want:  []UtilSample{{at(100), 100}},
			since: time.Time{},
		},
		{
			name:  "double values",
			buf:   sampleBuffer{valType: nvmlValueDouble, entries: []nvmlSample{{us(100), math.Float64bits(42.5)}}},
			since: at(0),
			want:  []UtilSample{{at(100), 42.5}},
		},
		{
			name:  "nothing newer is empty, not an error",
			buf:   sampleBuffer{valType: nvmlValueUnsignedInt, entries: []nvmlSample{{us(100), pct(100)}}},
			since: at(100),
			want:  []UtilSample{},
		},
		{
			name: "samples arriving between the calls are not lost",
			buf: sampleBuffer{valType: nvmlValueUnsignedInt,
				entries: []nvmlSample{{us(100), pct(1)}},
				late: []nvmlSample{{us(200), pct(2)}, {us(300), pct(3)}, {us(400), pct(4)}, {us(500), pct(5)},
					{us(600), pct(6)}, {us(700), pct(7)}}},
			since: at(0),
			want: []UtilSample{{at(100), 1}, {at(200), 2}, {at(300), 3}, {at(400), 4}, {at(500), 5},
				{at(600), 6}, {at(700), 7}},
		},
		{
			name:    "driver error",
			buf:     sampleBuffer{fail: 3}, // NVML_ERROR_NOT_SUPPORTED
			since:   at(0),
			wantErr: "device 0: nvmlDeviceGetSamples",
		},
		{
			name:    "not a percentage",
			buf:     sampleBuffer{valType: nvmlValueUnsignedInt, entries: []nvmlSample{{us(100), pct(4000)}}},
			since:   at(0),
			wantErr: "not a percentage",
		},
		{
			name:    "unknown value type",
			buf:     sampleBuffer{valType: 9, entries: []nvmlSample{{us(100), pct(4)}}},
			since:   at(0),
			wantErr: "value type 9",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := fakeNVML(tt.buf.get).UtilizationSamples(0, tt.since)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got == nil || len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if !got[i].At.Equal(tt.want[i].At) || got[i].Percent != tt.want[i].Percent {
					t.Errorf("sample %d = %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestUtilizationSamplesMissingSymbol(t *testing.T) {
	_, err := fakeNVML(nil).UtilizationSamples(0, time.Now())
	if !errors.Is(err, ErrNoSamples) {
		t.Fatalf("error %v, want ErrNoSamples", err)
	}
}

func TestNVMLValue(t *testing.T) {
	tests := []struct {
		typ  uint32
		raw  uint64
		want float64
	}{
		{nvmlValueDouble, math.Float64bits(-1.5), -1.5},
		// A 32-bit member is the union's low half; the high half is
		// whatever the driver left there.
		{nvmlValueUnsignedInt, 0xdeadbeef_00000063, 99},
		{nvmlValueUnsignedLong, 1 << 40, 1 << 40},
		{nvmlValueUnsignedLongLong, 7, 7},
		{nvmlValueSignedLongLong, math.MaxUint64, -1},
		{nvmlValueSignedInt, 0x00000000_fffffffe, -2},
	}
	for _, tt := range tests {
		got, err := nvmlValue(tt.raw, tt.typ)
		if err != nil || got != tt.want {
			t.Errorf("nvmlValue(%#x, type %d) = %v, %v; want %v", tt.raw, tt.typ, got, err, tt.want)
		}
	}
	if _, err := nvmlValue(0, 6); err == nil {
		t.Error("nvmlValue of type 6: no error")
	}
}

func TestNVMLSampleLayout(t *testing.T) {
	// nvmlSample_t is an unsigned long long and an 8-byte union.
	if s := unsafe.Sizeof(nvmlSample{}); s != 16 {
		t.Fatalf("nvmlSample is %d bytes, nvmlSample_t 16", s)
	}
}
