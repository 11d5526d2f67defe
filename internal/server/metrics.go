package server

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"goinfer/internal/server/batcher"
)

// GPUStat is one GPU's state at a scrape, for the goinfer_gpu_* metrics.
type GPUStat struct {
	Index       int
	Name        string
	Utilization float64 // percent, 0..100
	MemoryUsed  int64   // bytes
	MemoryTotal int64   // bytes
}

// metrics are the server's Prometheus collectors, in a registry of its own
// so that tests can run many servers in one process.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec   // protocol, status
	latency  *prometheus.HistogramVec // protocol
	inflight *prometheus.GaugeVec     // protocol
	queue    prometheus.Histogram
	compute  prometheus.Histogram
	batch    prometheus.Histogram
	padded   prometheus.Counter
	images   prometheus.Counter
	batches  prometheus.Counter
	// phases sums the time answered HTTP inference requests spent in
	// each part of the handler; with the request count it gives where a
	// request's time goes on the server.
	phases  *prometheus.CounterVec // protocol, phase
	httpPhs [numPhases]prometheus.Counter
	// proto holds each protocol's children of the vectors above that
	// every request touches, resolved once: a label lookup hashes and
	// locks.
	proto map[string]*protoMetrics
}

// protoMetrics are one protocol's per-request collectors.
type protoMetrics struct {
	inflight prometheus.Gauge
	success  prometheus.Counter
	latency  prometheus.Observer
}

// Parts of an answered request's time in the server's handler.
const (
	phaseRead  = iota // handler start (head parsed) to input data received
	phaseInfer        // input received to logits back from the batcher (queue, device)
	phaseReply        // logits back to the answer handed to net/http (what exceeds its 4 KiB buffer is written by then)
	numPhases
)

var phaseNames = [numPhases]string{"read", "infer", "reply"}

// latencyBuckets span 100 us to 30 s: batch-1 GPU answers and big CPU
// batches both land inside.
var latencyBuckets = prometheus.ExponentialBucketsRange(100e-6, 30, 24)

func newMetrics(model string, maxBatch int, queueDepth func() float64, ready func() float64, gpus func() []GPUStat) *metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ml := prometheus.Labels{"model": model}
	batchBuckets := []float64{1}
	for b := 2; b < maxBatch; b *= 2 {
		batchBuckets = append(batchBuckets, float64(b))
	}
	if maxBatch > 1 {
		batchBuckets = append(batchBuckets, float64(maxBatch))
	}
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "goinfer_requests_total", Help: "Inference requests answered, by protocol and outcome.", ConstLabels: ml,
		}, []string{"protocol", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "goinfer_request_duration_seconds", Help: "Inference request time from arrival to answer (total latency).",
			ConstLabels: ml, Buckets: latencyBuckets,
		}, []string{"protocol"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "goinfer_inflight_requests", Help: "Inference requests being handled.", ConstLabels: ml,
		}, []string{"protocol"}),
		queue: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "goinfer_queue_duration_seconds", Help: "Time requests waited for a batch (dynamic batching delay and back-log).",
			ConstLabels: ml, Buckets: latencyBuckets,
		}),
		compute: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "goinfer_compute_duration_seconds", Help: "Device time of each batch's forward pass.",
			ConstLabels: ml, Buckets: latencyBuckets,
		}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "goinfer_batch_size", Help: "Images per batch run on the device (padding excluded).",
			ConstLabels: ml, Buckets: batchBuckets,
		}),
		padded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "goinfer_batch_padding_images_total", Help: "Padding images added to reach a compiled batch size.", ConstLabels: ml,
		}),
		images: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "goinfer_images_total", Help: "Images classified.", ConstLabels: ml,
		}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "goinfer_batches_total", Help: "Batches run on the device.", ConstLabels: ml,
		}),
		phases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "goinfer_request_phase_seconds_total",
			Help:        "Time answered HTTP inference requests spent in each phase of the handler: read (head parsed to body received), infer (body received to logits back: queue and device), reply (answer written).",
			ConstLabels: ml,
		}, []string{"protocol", "phase"}),
	}
	for i, name := range phaseNames {
		m.httpPhs[i] = m.phases.WithLabelValues("http", name)
	}
	m.proto = map[string]*protoMetrics{}
	for _, p := range []string{"http", "grpc"} {
		m.proto[p] = &protoMetrics{
			inflight: m.inflight.WithLabelValues(p),
			success:  m.requests.WithLabelValues(p, "success"),
			latency:  m.latency.WithLabelValues(p),
		}
	}
	reg.MustRegister(m.requests, m.latency, m.phases, m.inflight, m.queue, m.compute, m.batch, m.padded, m.images, m.batches,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "goinfer_queue_depth", Help: "Images waiting to be batched.", ConstLabels: ml,
		}, queueDepth),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "goinfer_model_ready", Help: "1 when the model is loaded and compiled and the server is not draining.", ConstLabels: ml,
		}, ready),
	)
	if gpus != nil {
		reg.MustRegister(gpuCollector(gpus))
	}
	return m
}

// ObserveBatch records one answered batch in the server's metrics. Pass it
// as batcher.Config.Observe to the batchers of the model's lanes.
func (s *Server) ObserveBatch(b batcher.BatchStats) { s.metrics.observeBatch(b) }

func (m *metrics) observeBatch(s batcher.BatchStats) {
	if s.Err != nil {
		return
	}
	m.batches.Inc()
	m.batch.Observe(float64(s.Images))
	m.images.Add(float64(s.Images))
	m.padded.Add(float64(s.Padded - s.Images))
	m.compute.Observe(s.Compute.Seconds())
}

// observeRequest records one finished request.
func (m *metrics) observeRequest(protocol string, k kind, ok bool, took time.Duration, queued time.Duration) {
	if ok {
		pm := m.proto[protocol]
		pm.success.Inc()
		pm.latency.Observe(took.Seconds())
		m.queue.Observe(queued.Seconds())
		return
	}
	m.requests.WithLabelValues(protocol, k.statusLabel()).Inc()
	m.latency.WithLabelValues(protocol).Observe(took.Seconds())
}

// inflightGauge is protocol's goinfer_inflight_requests.
func (m *metrics) inflightGauge(protocol string) prometheus.Gauge { return m.proto[protocol].inflight }

// observeHTTPPhases adds an answered HTTP request's phases: start is the
// handler's start, in when its input was received, out when the batcher
// answered, end when the answer was written.
func (m *metrics) observeHTTPPhases(start, in, out, end time.Time) {
	m.httpPhs[phaseRead].Add(in.Sub(start).Seconds())
	m.httpPhs[phaseInfer].Add(out.Sub(in).Seconds())
	m.httpPhs[phaseReply].Add(end.Sub(out).Seconds())
}

var (
	gpuUtilDesc = prometheus.NewDesc("goinfer_gpu_utilization_percent",
		"GPU utilization over the driver's last sample period.", []string{"gpu", "name"}, nil)
	gpuMemDesc = prometheus.NewDesc("goinfer_gpu_memory_used_bytes",
		"GPU memory in use (all processes).", []string{"gpu", "name"}, nil)
	gpuTotalDesc = prometheus.NewDesc("goinfer_gpu_memory_total_bytes",
		"GPU memory in total.", []string{"gpu", "name"}, nil)
)

// gpuCollector reads GPU state at scrape time.
type gpuCollector func() []GPUStat

func (g gpuCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- gpuUtilDesc
	ch <- gpuMemDesc
	ch <- gpuTotalDesc
}

func (g gpuCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range g() {
		idx := strconv.Itoa(s.Index)
		ch <- prometheus.MustNewConstMetric(gpuUtilDesc, prometheus.GaugeValue, s.Utilization, idx, s.Name)
		ch <- prometheus.MustNewConstMetric(gpuMemDesc, prometheus.GaugeValue, float64(s.MemoryUsed), idx, s.Name)
		ch <- prometheus.MustNewConstMetric(gpuTotalDesc, prometheus.GaugeValue, float64(s.MemoryTotal), idx, s.Name)
	}
}
