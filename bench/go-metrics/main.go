// Renders the same 10,000 series as FlowScope's metrics.render benchmark with the Prometheus Go
// client (client_golang), in Prometheus text format, and prints microseconds per 1000 series.
//
// Series (as Prometheus counts them, one per sample line): 4,880 counter series
// bench_requests_total{placement,outcome} and 320 histograms bench_duration_seconds{placement}
// with the same 13 buckets (+Inf, _sum, _count: 16 lines each). A render is what promhttp does for
// a scrape: Registry.Gather() then expfmt's text encoder for every family, into a reused buffer.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

func main() {
	runs := flag.Int("runs", 7, "measured runs (after one warm-up); the median is reported")
	renders := flag.Int("renders", 100, "renders per run")
	flag.Parse()

	reg := prometheus.NewRegistry()
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bench_requests_total", Help: "Requests."},
		[]string{"placement", "outcome"})
	durations := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "bench_duration_seconds", Help: "Durations.",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}}, []string{"placement"})
	reg.MustRegister(requests, durations)

	const histograms = 320
	perHistogram := 13 + 3 // buckets, +Inf, _sum, _count
	counters := 10000 - histograms*perHistogram
	outcomes := []string{"ok", "timeout", "http_503", "reset"}
	for i := 0; i < counters; i++ {
		requests.WithLabelValues(fmt.Sprintf("placement_%d", i/4), outcomes[i%4]).Add(float64(i))
	}
	for i := 0; i < histograms; i++ {
		h := durations.WithLabelValues(fmt.Sprintf("placement_%d", i))
		for k := 0; k < 10; k++ {
			h.Observe(float64(k)*0.37 + float64(i)*0.001)
		}
	}

	var buf bytes.Buffer
	render := func() {
		buf.Reset()
		families, err := reg.Gather()
		if err != nil {
			fmt.Fprintln(os.Stderr, "gather:", err)
			os.Exit(1)
		}
		enc := expfmt.NewEncoder(&buf, expfmt.FmtText)
		for _, mf := range families {
			if err := enc.Encode(mf); err != nil {
				fmt.Fprintln(os.Stderr, "encode:", err)
				os.Exit(1)
			}
		}
	}

	// Check: every series rendered (10,000 sample lines + HELP and TYPE of two families).
	render()
	if lines := bytes.Count(buf.Bytes(), []byte{'\n'}); lines-4 != 10000 {
		fmt.Fprintf(os.Stderr, "expected 10000 series, rendered %d\n", lines-4)
		os.Exit(1)
	}
	bytesPerRender := buf.Len()

	var samples []float64
	for run := 0; run <= *runs; run++ {
		start := time.Now()
		for r := 0; r < *renders; r++ {
			render()
		}
		if run > 0 {
			samples = append(samples, float64(time.Since(start).Nanoseconds())/float64(*renders)/1000/10)
		}
	}
	sort.Float64s(samples)
	median := samples[len(samples)/2]
	if len(samples)%2 == 0 {
		median = (samples[len(samples)/2-1] + samples[len(samples)/2]) / 2
	}
	fmt.Printf("go.metrics.render %.1f us/1000 series (median of %d runs x %d renders; %d bytes per render; client_golang, %s)\n",
		median, *runs, *renders, bytesPerRender, "Prometheus text format 0.0.4")
}
