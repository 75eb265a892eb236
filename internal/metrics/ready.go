package metrics

import "github.com/prometheus/client_golang/prometheus"

// ReadyState is what a scrape reads of the ready clones.
type ReadyState struct {
	Clones     int     // ready clones waiting
	MemoryMiB  int     // memory they hold, as measured once each was ready
	OldestAgeS float64 // how long the oldest has waited, in seconds
}

// ReadyClones are the metrics of the ready clones: VMs restored, resumed
// and warmed ahead of a request, each serving one.
type ReadyClones struct {
	outcomes, refills, drops *prometheus.CounterVec
	waited                   prometheus.Histogram
}

var (
	readyClonesDesc = prometheus.NewDesc("thaw_ready_clones", "Ready clones waiting for a request.", nil, nil)
	readyMemDesc    = prometheus.NewDesc("thaw_ready_clones_memory_mib", "Memory the ready clones hold, MiB: each its VMM's proportional set size measured once it was ready (one not measured counts the most its function version's latest clones measured, or guest RAM plus the VM memory overhead before any was).", nil, nil)
	readyAgeDesc    = prometheus.NewDesc("thaw_ready_clones_oldest_age_seconds", "How long the oldest ready clone has waited.", nil, nil)
)

// NewReadyClones registers the ready clones' metrics with s; state is read
// at each scrape.
func (s *Set) NewReadyClones(state func() ReadyState) *ReadyClones {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "thaw", Name: name, Help: help}, labels)
	}
	r := &ReadyClones{
		outcomes: counter("ready_clones_total", "Invocations that could take a ready clone, by outcome: hit (a ready clone served it), miss (none was ready) or failed (the one taken had died or failed its renewal; the invocation fell back).", "outcome"),
		refills:  counter("ready_clone_refills_total", "Ready clones started, by outcome: ok or failed.", "outcome"),
		drops:    counter("ready_clone_drops_total", "Ready clones stopped unused, by reason: aged (waited longer than --ready-max-age), surplus (demand fell), room (a start needed it), memory_pressure (host memory low), died (found dead), deleted (function, version or snapshot), evicted (snapshot evicted or stored).", "reason"),
		waited: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "thaw", Name: "ready_clone_wait_seconds",
			Help: "How long the ready clones that served requests had waited ready.", Buckets: []float64{.1, .5, 1, 5, 10, 30, 60, 300, 600, 1800}}),
	}
	s.Registry.MustRegister(r.outcomes, r.refills, r.drops, r.waited, &readyCollector{state: state})
	return r
}

// Outcome records whether an invocation got a ready clone ("hit", "miss",
// "failed"); waitedS is how long a hit's clone waited.
func (r *ReadyClones) Outcome(outcome string, waitedS float64) {
	r.outcomes.WithLabelValues(outcome).Inc()
	if outcome == "hit" {
		r.waited.Observe(waitedS)
	}
}

// Refill records a ready clone started ("ok") or not ("failed").
func (r *ReadyClones) Refill(outcome string) { r.refills.WithLabelValues(outcome).Inc() }

// Drop records a ready clone stopped unused, by reason.
func (r *ReadyClones) Drop(reason string) { r.drops.WithLabelValues(reason).Inc() }

type readyCollector struct{ state func() ReadyState }

func (c *readyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- readyClonesDesc
	ch <- readyMemDesc
	ch <- readyAgeDesc
}

func (c *readyCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.state()
	ch <- prometheus.MustNewConstMetric(readyClonesDesc, prometheus.GaugeValue, float64(st.Clones))
	ch <- prometheus.MustNewConstMetric(readyMemDesc, prometheus.GaugeValue, float64(st.MemoryMiB))
	ch <- prometheus.MustNewConstMetric(readyAgeDesc, prometheus.GaugeValue, st.OldestAgeS)
}
