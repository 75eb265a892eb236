package metrics

import "github.com/prometheus/client_golang/prometheus"

// adaptiveSet is the adaptive restore's metrics.
type adaptiveSet struct {
	choices, refreshes, prepares *prometheus.CounterVec
	setOutside                   *prometheus.HistogramVec
}

func newAdaptiveSet(reg *prometheus.Registry) *adaptiveSet {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "thaw", Name: name, Help: help}, labels)
	}
	a := &adaptiveSet{
		choices: counter("restore_choices_total", "Cold starts whose strategy the adaptive restore chose, by strategy, location "+
			"(local, remote) and how: rule (no evidence yet), measure (the choice measured first), exploit (the lowest median) "+
			"or explore (another strategy, at most a tenth of the cold starts).", "strategy", "location", "how"),
		refreshes: counter("workingset_refreshes_total", "Working-set refreshes (a strategy's set recorded again after its "+
			"cold starts drifted), by strategy, source of the record input (prepare, traffic) and outcome (ok, failed).",
			"strategy", "source", "outcome"),
		prepares: counter("background_prepares_total", "Prepares the daemon started by itself for a version whose snapshot had "+
			"no artifacts, by outcome (succeeded, failed).", "outcome"),
		setOutside: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "thaw", Name: "workingset_outside_ratio",
			Help:    "Per cold start with a recorded set: the share of the pages the guest touched that lay outside the set.",
			Buckets: []float64{.01, .02, .05, .1, .2, .3, .5, .75, 1}}, []string{"strategy"}),
	}
	reg.MustRegister(a.choices, a.refreshes, a.prepares, a.setOutside)
	return a
}

// RestoreChoice records a strategy the adaptive restore chose.
func (s *Set) RestoreChoice(strategy, location, how string) {
	s.adaptive.choices.WithLabelValues(strategy, location, how).Inc()
}

// WorkingSetRefresh records a refresh's outcome.
func (s *Set) WorkingSetRefresh(strategy, source, outcome string) {
	s.adaptive.refreshes.WithLabelValues(strategy, source, outcome).Inc()
}

// BackgroundPrepare records a background prepare's outcome.
func (s *Set) BackgroundPrepare(outcome string) { s.adaptive.prepares.WithLabelValues(outcome).Inc() }

// SetUse records a cold start's share of touched pages outside its set.
func (s *Set) SetUse(strategy string, outsideRatio float64) {
	s.adaptive.setOutside.WithLabelValues(strategy).Observe(outsideRatio)
}
