package fresh

import (
	"math/rand/v2"
	"slices"
	"time"
)

// TraceConfig is a synthetic trace: Poisson arrivals at Rate a second for
// Seconds, plus BurstSize requests at once every BurstEvery seconds (the
// first at half of it), from Seed, so every run sends the same requests.
type TraceConfig struct {
	Seconds    float64 `json:"seconds"`
	Rate       float64 `json:"rate_per_s"`
	BurstSize  int     `json:"burst_size"`
	BurstEvery float64 `json:"burst_every_s"`
	Seed       uint64  `json:"seed"`
}

// DefaultTrace is 2 requests a second for a minute with a burst of 4
// every 20 s.
var DefaultTrace = TraceConfig{Seconds: 60, Rate: 2, BurstSize: 4, BurstEvery: 20, Seed: 1}

// Arrivals are the trace's request times from its start, sorted.
func Arrivals(tc TraceConfig) []time.Duration {
	end := seconds(tc.Seconds)
	var out []time.Duration
	if tc.Rate > 0 {
		rng := rand.New(rand.NewPCG(tc.Seed, tc.Seed^0x9e3779b97f4a7c15))
		for at := time.Duration(0); ; {
			at += seconds(rng.ExpFloat64() / tc.Rate)
			if at >= end {
				break
			}
			out = append(out, at)
		}
	}
	if tc.BurstSize > 0 && tc.BurstEvery > 0 {
		for b := seconds(tc.BurstEvery / 2); b < end; b += seconds(tc.BurstEvery) {
			for range tc.BurstSize {
				out = append(out, b)
			}
		}
	}
	slices.Sort(out)
	return out
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// TraceRequest is one request of a trace run.
type TraceRequest struct {
	AtMS     float64 `json:"at_ms"` // sent, from the trace's start
	ClientMS float64 `json:"client_ms"`
	Served   string  `json:"served"` // the invocation's mode; "error" if it failed
}

// ReadySample is how many ready clones the function had at a time, and
// the MiB the daemon counted them against --standby-memory (the sum of
// their ready_memory_mib; 0: it gave none).
type ReadySample struct {
	AtMS   float64 `json:"at_ms"`
	Clones int     `json:"clones"`
	MiB    int     `json:"mib,omitempty"`
}

// TraceResult is a trace run of one function.
type TraceResult struct {
	Function string         `json:"function"`
	Trace    TraceConfig    `json:"trace"`
	Requests []TraceRequest `json:"requests"`
	Ready    []ReadySample  `json:"ready"`
	TraceSummary
}

// TraceSummary is what a trace run shows: the share of requests a ready
// clone served, against the ready clones kept (mean count and MiB the
// daemon counted them over the samples) and the mean concurrent demand (the requests' time summed over
// the run's length).
type TraceSummary struct {
	Hits         int     `json:"hits"`
	Served       int     `json:"served"`
	Errors       int     `json:"errors"`
	HitRate      float64 `json:"hit_rate"`
	MeanReady    float64 `json:"mean_ready"`
	MeanReadyMiB float64 `json:"mean_ready_mib"`
	MeanDemand   float64 `json:"mean_demand"`
	LengthS      float64 `json:"length_s"`
}

// Summarize computes r's summary from its requests and samples.
func (r *TraceResult) Summarize() {
	var s TraceSummary
	var busy, last float64
	for _, q := range r.Requests {
		if q.Served == "error" {
			s.Errors++
			continue
		}
		s.Served++
		if q.Served == "ready" {
			s.Hits++
		}
		busy += q.ClientMS
		last = max(last, q.AtMS+q.ClientMS)
	}
	if s.Served > 0 {
		s.HitRate = float64(s.Hits) / float64(s.Served)
	}
	last = max(last, r.Trace.Seconds*1000)
	if last > 0 {
		s.MeanDemand = busy / last
		s.LengthS = last / 1000
	}
	if len(r.Ready) > 0 {
		clones, mib := 0, 0
		for _, rs := range r.Ready {
			clones, mib = clones+rs.Clones, mib+rs.MiB
		}
		s.MeanReady = float64(clones) / float64(len(r.Ready))
		s.MeanReadyMiB = float64(mib) / float64(len(r.Ready))
	}
	r.TraceSummary = s
}
