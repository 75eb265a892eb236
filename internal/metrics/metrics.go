// Package metrics is what thawd exports to Prometheus (client_golang):
// restore and invocation latency by strategy and mode, page faults and
// bytes read by strategy, strategy fallbacks by reason, API requests by
// route and status, and, read at each scrape, VMs by state and the memory
// store's capacity and use. docs/operations.md says what each one means.
package metrics

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/thaw-dev/thaw/wire"
)

// State is what a scrape reads from the daemon.
type State struct {
	VMs     map[string]int // live and recorded VMs by state
	IdleVMs int            // VMs kept idle by the keep-alive pool
	// StandbyVMs are VMMs the VMM pool started ahead of restores.
	StandbyVMs int
	Store      *wire.StoreInfo
	// Chunks is the snapshot registry's chunk cache; nil without a
	// registry.
	Chunks *ChunkCache
}

// ChunkCache is what the chunk cache has done since the daemon started.
type ChunkCache struct {
	FetchedBytes, FetchedChunks, Hits int64
	UsedBytes, BudgetBytes            int64
}

// Set is thawd's metrics and the registry they are served from.
type Set struct {
	Registry *prometheus.Registry

	setup, resume, invoke, total *prometheus.HistogramVec
	faults, reads, fallbacks     *prometheus.CounterVec
	requests                     *prometheus.CounterVec
	requestSeconds               *prometheus.HistogramVec
	admissions                   *prometheus.CounterVec
	admissionWait                prometheus.Histogram
	queueDepth                   prometheus.Gauge
	keepAlive, evictions         *prometheus.CounterVec
	vmmPool, vmmPoolDrops        *prometheus.CounterVec
	registryGC                   *prometheus.CounterVec
	registryGCBytes              prometheus.Counter
	deploys, rebuilds            *prometheus.CounterVec
	versionsCollected            prometheus.Counter
	registryRefused              *prometheus.CounterVec
	adaptive                     *adaptiveSet
}

// Latency buckets (seconds): restores and invocations run from a few
// milliseconds (KVM, warm) to seconds (TCG, large working sets).
var buckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// New makes the metrics; state is called at every scrape.
func New(state func() State) *Set {
	s := &Set{Registry: prometheus.NewRegistry()}
	hist := func(name, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "thaw", Name: name, Help: help, Buckets: buckets}, labels)
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "thaw", Name: name, Help: help}, labels)
	}
	s.setup = hist("restore_setup_seconds", "Restore set-up: request to vCPUs resumed (cold invocations).", "strategy", "mode")
	s.resume = hist("restore_resume_seconds", "Restore resume: vCPUs resumed to the guest ready (cold invocations).", "strategy", "mode")
	s.invoke = hist("invoke_seconds", "Invocation round trip to the guest agent.", "strategy", "mode")
	s.total = hist("invocation_seconds", "Request to answer, restore included for cold invocations.", "strategy", "mode")
	s.faults = counter("page_faults_total", "Page faults of the VMM process during invocations (cold: from resume).", "strategy", "kind")
	s.reads = counter("read_bytes_total", "Bytes read from storage for guest memory during invocations: by QEMU (page-cache misses) or by the daemon for the strategy.", "strategy", "reader")
	s.fallbacks = counter("strategy_fallbacks_total", "Restores that ran as vanilla because the requested strategy could not be used.", "strategy", "reason")
	s.requests = counter("api_requests_total", "API requests by route and status.", "route", "status")
	s.requestSeconds = hist("api_request_seconds", "API request duration by route.", "route")
	s.admissions = counter("admissions_total", "VM starts by admission outcome: admitted (at once or after waiting), queue_full, timeout, canceled.", "outcome")
	s.admissionWait = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "thaw", Name: "admission_wait_seconds",
		Help: "How long VM starts waited for room (host budget or function limit).", Buckets: buckets})
	s.queueDepth = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "thaw", Name: "admission_queue_depth", Help: "VM starts waiting for room."})
	s.keepAlive = counter("keepalive_total", "Invocations that could run on a kept VM (naming no snapshot or strategy), by outcome: hit (a kept VM served it) or miss (a cold start).", "outcome")
	s.evictions = counter("keepalive_evictions_total", "Idle VMs stopped, by reason: expired, room (a start needed it), memory_pressure (host memory low), deleted (function or snapshot), secret_changed (a secret they hold was set anew).", "reason")
	s.vmmPool = counter("vmm_pool_total", "Restores by whether the VMM pool had a VMM started for their snapshot and strategy: hit or miss (a VMM was started for the restore).", "strategy", "outcome")
	s.vmmPoolDrops = counter("vmm_pool_drops_total", "Standby VMMs stopped unused, by reason: expired, room (a start needed it), evicted (their snapshot evicted from the page cache), deleted (snapshot or function).", "reason")
	s.registryGC = counter("registry_gc_total", "Snapshot registry collections this node ran (asked for or scheduled), by outcome: ok, dry_run, busy (held off by running pushes) or failed.", "outcome")
	s.registryGCBytes = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "thaw", Name: "registry_gc_deleted_bytes_total",
		Help: "Stored bytes of registry chunks and code archives this node's collections deleted."})
	s.deploys = counter("deploys_total", "Deploys by outcome: published (a new version), unchanged (the content of an existing version: nothing done) or failed.", "outcome")
	s.rebuilds = counter("version_rebuilds_total", "Versions snapshotted again because what their snapshot was made from changed, by what changed (image, kernel, machine, layer, config) and outcome (ok, failed).", "reason", "outcome")
	s.versionsCollected = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "thaw", Name: "versions_collected_total",
		Help: "Function versions whose snapshots retention deleted (neither among the newest --version-keep nor an alias's target)."})
	s.Registry.MustRegister(s.deploys, s.rebuilds, s.versionsCollected)
	s.registryRefused = counter("registry_refused_total", "Registry records (remote manifests, function records) this node refused to use because no trusted key signed them for their object, by kind and reason: unsigned, unknown_key, bad_signature (changed after signing), wrong_object (moved or copied from another object), malformed.", "kind", "reason")
	s.Registry.MustRegister(s.registryGC, s.registryGCBytes, s.registryRefused)
	s.adaptive = newAdaptiveSet(s.Registry)
	s.Registry.MustRegister(s.admissions, s.admissionWait, s.queueDepth, s.keepAlive, s.evictions, s.vmmPool, s.vmmPoolDrops)
	s.Registry.MustRegister(s.setup, s.resume, s.invoke, s.total, s.faults, s.reads, s.fallbacks, s.requests, s.requestSeconds,
		&stateCollector{state: state}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return s
}

// Invocation records one answered invocation (mode cold or warm).
func (s *Set) Invocation(inv *wire.Invocation) {
	strategy := inv.Strategy
	if strategy == "" {
		strategy = "boot" // a warm invocation of a booted VM
	}
	if r := inv.Timing.Restore; r != nil {
		s.setup.WithLabelValues(strategy, inv.Mode).Observe(r.SetupMS / 1000)
		s.resume.WithLabelValues(strategy, inv.Mode).Observe(r.ResumeMS / 1000)
	}
	s.invoke.WithLabelValues(strategy, inv.Mode).Observe(inv.Timing.InvokeMS / 1000)
	s.total.WithLabelValues(strategy, inv.Mode).Observe(inv.Timing.TotalMS / 1000)
	if p := inv.Process; p != nil {
		s.faults.WithLabelValues(strategy, "major").Add(float64(p.MajorFaults))
		s.faults.WithLabelValues(strategy, "minor").Add(float64(p.MinorFaults))
		s.reads.WithLabelValues(strategy, "qemu").Add(float64(p.ReadBytes))
	}
	if st := inv.StrategyStats; st != nil {
		s.reads.WithLabelValues(strategy, "daemon").Add(float64(st.DaemonReadBytes))
		if st.Fallback != "" {
			requested, _, _ := strings.Cut(st.Fallback, " ")
			s.fallbacks.WithLabelValues(requested, FallbackReason(st.Fallback)).Inc()
		}
	}
}

// FallbackReason classifies a fallback's text into a few label values.
func FallbackReason(text string) string {
	for _, c := range []struct{ substr, reason string }{
		{"not in the memory store", "not_stored"},
		{"no snapshot memory store", "no_store"},
		{"huge page pool", "no_huge_pages"},
		{"memory store full", "store_full"},
		{"damaged", "damaged"},
		{"checksum", "damaged"},
		{"another memory file", "other_snapshot"},
		{"no such file", "missing"},
		{"interposer", "no_interposer"},
	} {
		if strings.Contains(text, c.substr) {
			return c.reason
		}
	}
	return "other"
}

// Admission records one VM start's admission: its outcome, how long it
// waited, and the queue's depth after it.
func (s *Set) Admission(outcome string, waited time.Duration, depth int) {
	s.admissions.WithLabelValues(outcome).Inc()
	s.admissionWait.Observe(waited.Seconds())
	s.queueDepth.Set(float64(depth))
}

// KeepAlive records whether a kept VM served an invocation that could
// use one.
func (s *Set) KeepAlive(hit bool) {
	if hit {
		s.keepAlive.WithLabelValues("hit").Inc()
	} else {
		s.keepAlive.WithLabelValues("miss").Inc()
	}
}

// VMMPool records whether a restore found a standby VMM.
func (s *Set) VMMPool(strategy string, hit bool) {
	outcome := "miss"
	if hit {
		outcome = "hit"
	}
	s.vmmPool.WithLabelValues(strategy, outcome).Inc()
}

// VMMPoolDrop records a standby VMM stopped unused; why is the daemon's
// reason text.
func (s *Set) VMMPoolDrop(why string) {
	reason := "other"
	switch {
	case strings.Contains(why, "time over"):
		reason = "expired"
	case strings.Contains(why, "room"):
		reason = "room"
	case strings.Contains(why, "evicted"):
		reason = "evicted"
	case strings.Contains(why, "deleted"):
		reason = "deleted"
	}
	s.vmmPoolDrops.WithLabelValues(reason).Inc()
}

// Deploy records a deploy's outcome.
func (s *Set) Deploy(outcome string) { s.deploys.WithLabelValues(outcome).Inc() }

// VersionRebuild records a version snapshotted again because reason changed.
func (s *Set) VersionRebuild(reason, outcome string) {
	s.rebuilds.WithLabelValues(reason, outcome).Inc()
}

// VersionCollected records a version whose snapshots retention deleted.
func (s *Set) VersionCollected() { s.versionsCollected.Inc() }

// KeepAliveEviction records an idle VM stopped for reason.
func (s *Set) KeepAliveEviction(reason string) { s.evictions.WithLabelValues(reason).Inc() }

// RegistryGC records one registry collection and the bytes it deleted.
func (s *Set) RegistryGC(outcome string, deleted int64) {
	s.registryGC.WithLabelValues(outcome).Inc()
	s.registryGCBytes.Add(float64(deleted))
}

// RegistryRefused records a registry record refused for its signature.
func (s *Set) RegistryRefused(kind, reason string) {
	s.registryRefused.WithLabelValues(kind, reason).Inc()
}

// Request records one API request; route is its pattern ("" when none
// matched).
func (s *Set) Request(route string, status int, d time.Duration) {
	if route == "" {
		route = "unmatched"
	}
	s.requests.WithLabelValues(route, statusText(status)).Inc()
	s.requestSeconds.WithLabelValues(route).Observe(d.Seconds())
}

func statusText(code int) string {
	const digits = "0123456789"
	if code < 100 || code > 999 {
		return "other"
	}
	return string([]byte{digits[code/100], digits[code/10%10], digits[code%10]})
}

// stateCollector reads VMs by state and the store at each scrape.
type stateCollector struct{ state func() State }

var (
	vmsDesc      = prometheus.NewDesc("thaw_vms", "VMs by state (the catalog's records; live ones are booting, standby, running or paused).", []string{"state"}, nil)
	storeCapDesc = prometheus.NewDesc("thaw_store_capacity_bytes", "Memory store capacity (premap).", []string{"tier"}, nil)
	storeUseDesc = prometheus.NewDesc("thaw_store_used_bytes", "Memory store bytes used by stored snapshot copies.", []string{"tier"}, nil)
	storeFree    = prometheus.NewDesc("thaw_store_free_bytes", "Memory store bytes free.", []string{"tier"}, nil)
	storeResv    = prometheus.NewDesc("thaw_store_reserved_bytes", "Memory store bytes held for live premap clones beyond the copies.", []string{"tier"}, nil)
	idleDesc     = prometheus.NewDesc("thaw_keepalive_idle_vms", "VMs kept idle for their function's next invocations.", nil, nil)
	standbyDesc  = prometheus.NewDesc("thaw_vmm_pool_standby_vms", "VMMs the VMM pool started ahead of restores, waiting for one.", nil, nil)
	chunkBytes   = prometheus.NewDesc("thaw_registry_fetched_bytes_total", "Compressed bytes the chunk cache fetched from the snapshot registry.", nil, nil)
	chunkFetched = prometheus.NewDesc("thaw_registry_fetched_chunks_total", "Chunks the chunk cache fetched from the snapshot registry.", nil, nil)
	chunkHits    = prometheus.NewDesc("thaw_registry_cache_hits_total", "Chunk lookups the chunk cache served from disk.", nil, nil)
	chunkUsed    = prometheus.NewDesc("thaw_registry_cache_used_bytes", "Bytes of chunks in the chunk cache.", nil, nil)
	chunkBudget  = prometheus.NewDesc("thaw_registry_cache_budget_bytes", "The chunk cache's budget (0: no bound).", nil, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{vmsDesc, storeCapDesc, storeUseDesc, storeFree, storeResv, idleDesc, standbyDesc,
		chunkBytes, chunkFetched, chunkHits, chunkUsed, chunkBudget} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.state()
	ch <- prometheus.MustNewConstMetric(idleDesc, prometheus.GaugeValue, float64(st.IdleVMs))
	ch <- prometheus.MustNewConstMetric(standbyDesc, prometheus.GaugeValue, float64(st.StandbyVMs))
	for state, n := range st.VMs {
		ch <- prometheus.MustNewConstMetric(vmsDesc, prometheus.GaugeValue, float64(n), state)
	}
	if in := st.Store; in != nil && in.Available {
		for d, v := range map[*prometheus.Desc]int64{storeCapDesc: in.CapacityBytes, storeUseDesc: in.UsedBytes,
			storeFree: in.FreeBytes, storeResv: in.ReservedBytes} {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), in.Kind)
		}
	}
	if c := st.Chunks; c != nil {
		ch <- prometheus.MustNewConstMetric(chunkBytes, prometheus.CounterValue, float64(c.FetchedBytes))
		ch <- prometheus.MustNewConstMetric(chunkFetched, prometheus.CounterValue, float64(c.FetchedChunks))
		ch <- prometheus.MustNewConstMetric(chunkHits, prometheus.CounterValue, float64(c.Hits))
		ch <- prometheus.MustNewConstMetric(chunkUsed, prometheus.GaugeValue, float64(c.UsedBytes))
		ch <- prometheus.MustNewConstMetric(chunkBudget, prometheus.GaugeValue, float64(c.BudgetBytes))
	}
}
