package triggers

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metricSet is the triggers' metrics (docs/operations.md lists them).
type metricSet struct {
	requests     *prometheus.CounterVec
	requestTime  *prometheus.HistogramVec
	enqueuedN    *prometheus.CounterVec
	duplicates   *prometheus.CounterVec
	attempts     *prometheus.CounterVec
	outcomes     *prometheus.CounterVec
	deadLetters  *prometheus.CounterVec
	destinations *prometheus.CounterVec
	startDelays  prometheus.Histogram
	firings      *prometheus.CounterVec
	leading      atomic.Bool
}

func newMetrics(reg prometheus.Registerer, t *Triggers) *metricSet {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "thaw", Name: name, Help: help}, labels)
	}
	m := &metricSet{
		requests: counter("endpoint_requests_total", "Requests to function endpoints on the functions listener, by endpoint (- for none) and status code.", "endpoint", "status"),
		requestTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "thaw", Name: "endpoint_request_seconds",
			Help:    "Function endpoint requests from arrival to answer, by endpoint.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"endpoint"}),
		enqueuedN:    counter("async_enqueued_total", "Asynchronous invocations queued, by function.", "function"),
		duplicates:   counter("async_duplicates_total", "Asynchronous requests that were one already queued or done (an idempotency key seen before, a redelivery of a finished invocation), by function.", "function"),
		attempts:     counter("async_attempts_total", "Attempts of asynchronous invocations, by function and result: ok, function_error, platform_error, throttled (no room; not counted against the retries).", "function", "result"),
		outcomes:     counter("async_outcomes_total", "Asynchronous invocations ended, by function and condition: success, failure, expired.", "function", "condition"),
		deadLetters:  counter("async_dead_letters_total", "Outcomes stored on the dead-letter subject, by function.", "function"),
		destinations: counter("async_destination_deliveries_total", "Outcome deliveries, by destination kind (dlq, webhook) and result (ok, failed).", "kind", "result"),
		startDelays: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "thaw", Name: "async_start_delay_seconds",
			Help:    "From an asynchronous invocation's enqueue to its first attempt's start.",
			Buckets: []float64{.001, .0025, .005, .01, .02, .05, .1, .25, .5, 1, 5, 30, 60, 300, 3600}}),
		firings: counter("schedule_firings_total", "Schedule ticks, by schedule and result: fired, missed (not run on time), failed (could not be queued).", "schedule", "result"),
	}
	reg.MustRegister(m.requests, m.requestTime, m.enqueuedN, m.duplicates, m.attempts, m.outcomes, m.deadLetters, m.destinations, m.startDelays, m.firings)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "thaw", Name: "schedules_leader",
		Help: "1 if this node fires the schedules (it holds their lease)."}, func() float64 {
		if m.leading.Load() {
			return 1
		}
		return 0
	}))
	reg.MustRegister(&queueCollector{t: t,
		depth: prometheus.NewDesc("thaw_async_queue_depth", "Asynchronous invocations queued or running (every node's, from the engine).", nil, nil),
		age:   prometheus.NewDesc("thaw_async_queue_oldest_age_seconds", "Age of the oldest queued asynchronous invocation (0: none).", nil, nil),
		dlq:   prometheus.NewDesc("thaw_async_dead_letters", "Dead letters kept.", nil, nil)})
	return m
}

func (m *metricSet) endpointRequest(endpoint string, status int, d time.Duration) {
	m.requests.WithLabelValues(endpoint, strconv.Itoa(status)).Inc()
	if endpoint != "-" {
		m.requestTime.WithLabelValues(endpoint).Observe(d.Seconds())
	}
}

func (m *metricSet) enqueued(fn string)           { m.enqueuedN.WithLabelValues(fn).Inc() }
func (m *metricSet) duplicate(fn string)          { m.duplicates.WithLabelValues(fn).Inc() }
func (m *metricSet) attempt(fn, result string)    { m.attempts.WithLabelValues(fn, result).Inc() }
func (m *metricSet) outcome(fn, condition string) { m.outcomes.WithLabelValues(fn, condition).Inc() }
func (m *metricSet) deadLetter(fn string)         { m.deadLetters.WithLabelValues(fn).Inc() }
func (m *metricSet) destination(kind, result string) {
	m.destinations.WithLabelValues(kind, result).Inc()
}
func (m *metricSet) startDelay(d time.Duration) { m.startDelays.Observe(d.Seconds()) }
func (m *metricSet) scheduleFiring(name, result string) {
	m.firings.WithLabelValues(name, result).Inc()
}

// queueCollector reads the queue's depth and age from the engine at
// each scrape.
type queueCollector struct {
	t               *Triggers
	depth, age, dlq *prometheus.Desc
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.depth
	ch <- c.age
	ch <- c.dlq
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if st, err := c.t.e.js.Stream(ctx, asyncStream); err == nil {
		if info, err := st.Info(ctx); err == nil {
			ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(info.State.Msgs))
			age := 0.0
			if info.State.Msgs > 0 && !info.State.FirstTime.IsZero() {
				age = time.Since(info.State.FirstTime).Seconds()
			}
			ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, age)
		}
	}
	if st, err := c.t.e.js.Stream(ctx, dlqStream); err == nil {
		if info, err := st.Info(ctx); err == nil {
			ch <- prometheus.MustNewConstMetric(c.dlq, prometheus.GaugeValue, float64(info.State.Msgs))
		}
	}
}
