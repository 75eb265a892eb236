package e2e

import (
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/wire"
)

// allStats are a restore's stats with the part of the strategy that ran
// decoded into its type (the others zero), for tests that read them.
type allStats struct {
	*wire.StrategyStats
	restore.CachedStats
	restore.REAPStats
	restore.FaaSnapStats
	restore.PremapStats
	restore.SnapBPFStats
}

// partStats decodes st's part; nil for nil.
func partStats(st *wire.StrategyStats) *allStats {
	if st == nil {
		return nil
	}
	a := &allStats{StrategyStats: st}
	st.PartAs(string(restore.Cached), &a.CachedStats)
	st.PartAs(string(restore.REAP), &a.REAPStats)
	st.PartAs(string(restore.FaaSnap), &a.FaaSnapStats)
	st.PartAs(string(restore.Premap), &a.PremapStats)
	st.PartAs(string(restore.SnapBPF), &a.SnapBPFStats)
	return a
}

// allBuilds are a prepare's builds decoded into their strategies' types
// (nil for a strategy without one).
type allBuilds struct {
	FaaSnap            *restore.FaaSnapBuild
	REAP               *restore.REAPBuild
	SnapBPF            *restore.SnapBPFBuild
	SnapBPFUnavailable string
}

// builds decodes res's builds.
func builds(res *wire.PrepareResult) allBuilds {
	var b allBuilds
	b.FaaSnap, b.REAP, b.SnapBPF = &restore.FaaSnapBuild{}, &restore.REAPBuild{}, &restore.SnapBPFBuild{}
	if !res.BuildAs(string(restore.FaaSnap), b.FaaSnap) {
		b.FaaSnap = nil
	}
	if !res.BuildAs(string(restore.REAP), b.REAP) {
		b.REAP = nil
	}
	if !res.BuildAs(string(restore.SnapBPF), b.SnapBPF) {
		b.SnapBPF = nil
	}
	if p := res.Prepared[string(restore.SnapBPF)]; p != nil {
		b.SnapBPFUnavailable = p.Unavailable
	}
	return b
}
