package restore

import (
	"context"
	"fmt"
	"time"

	"github.com/thaw-dev/thaw/internal/pagecache"
)

// Cached is vanilla with the whole memory file in the host page cache
// before the restore starts: FaaSnap's reference point ("cached" in its
// section 6; not practical, the bar to reach).
const Cached Kind = "cached"

// CachedStats: the page-cache fill, reported apart (Session.Untimed).
type CachedStats struct {
	CacheFillMS float64 `json:"cache_fill_ms,omitempty" unit:"ms" desc:"page-cache fill before the restore, not part of the cold start"`
}

type cached struct {
	vanilla
	fill time.Duration
}

func beginCached(_ context.Context, snap Snapshot, env Env) (Session, error) {
	t := time.Now()
	if _, err := pagecache.Fill(snap.MemoryPath()); err != nil {
		return nil, fmt.Errorf("cached: fill page cache: %w", err)
	}
	return &cached{vanilla: vanilla{sessionBase: base(env), snap: snap}, fill: time.Since(t)}, nil
}

func (c *cached) Kind() Kind             { return Cached }
func (c *cached) Untimed() time.Duration { return c.fill }
func (c *cached) Stats() Stats {
	return withPart(Stats{FetchMS: msOf(c.fill)}, Cached, CachedStats{CacheFillMS: msOf(c.fill)})
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

var cachedStrategy = Strategy{Kind: Cached, Begin: beginCached, StatsPart: CachedStats{}}
