package uffd

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// gatedSource is an AsyncSource whose pages below gatedPages are remote:
// fetching them waits until the gate opens.
type gatedSource struct {
	*fileSource
	gatedPages int64
	gate       chan struct{}
	mu         sync.Mutex
	here       bool
	fetches    int
}

func (g *gatedSource) Local(off int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.here || off >= g.gatedPages*PageSize
}

func (g *gatedSource) Fetch(off int64) error {
	g.mu.Lock()
	g.fetches++
	g.mu.Unlock()
	<-g.gate
	g.mu.Lock()
	g.here = true
	g.mu.Unlock()
	return nil
}

// A fault whose page must be fetched is parked: faults on local pages are
// served while the fetch runs, and the parked fault gets its page (read
// once, after the fetch) when the fetch ends.
func TestParkedFaultDoesNotBlockLocalPages(t *testing.T) {
	mf := newMemFile(t, 64, 64, 31)
	g := &gatedSource{fileSource: newFileSource(t, mf.path), gatedPages: 8, gate: make(chan struct{})}
	r := newTestRegion(t, 64, 0, false)
	s := newSourceServer(t, r.Mapping, g, Options{})
	stop := startServe(t, s)

	remote := make(chan time.Duration, 1)
	go func() { remote <- touchPages(t, r, mf.want, []uint64{3}, 1, nil) }()
	for s.Stats().Parked == 0 {
		time.Sleep(time.Millisecond)
	}
	touchPages(t, r, mf.want, []uint64{20, 40, 63}, 1, nil) // served with the gate shut
	select {
	case <-remote:
		t.Fatal("the fault on a gated page was served before its fetch ended")
	default:
	}
	close(g.gate)
	within(t, remote, "the parked fault was never served")
	touchPages(t, r, mf.want, allPages(64), 2, nil)
	stopChecked(t, r, mf.want, stop)
	st := s.Stats()
	if st.Parked == 0 || st.Parked > 8 || g.fetches != int(st.Parked) {
		t.Errorf("parked %d, fetches %d", st.Parked, g.fetches)
	}
	if g.offsets[3*PageSize] != 1 {
		t.Errorf("the parked page was read %d times, want once", g.offsets[3*PageSize])
	}
}

// A fetch that fails parks the fault once; its read then reports the
// source's error and Serve ends with it.
func TestParkedFaultFetchFailure(t *testing.T) {
	mf := newMemFile(t, 64, 64, 32)
	g := &gatedSource{fileSource: newFileSource(t, mf.path), gatedPages: 64, gate: make(chan struct{})}
	g.failAt = 0
	close(g.gate)
	r := newTestRegion(t, 64, 0, false)
	s := newSourceServer(t, r.Mapping, g, Options{})
	err := serveUntilFailure(t, s, r, 5, 6)
	if !errors.Is(err, errSourceDown) || !strings.Contains(err.Error(), "read memory source at 0x5000") {
		t.Fatalf("Serve: %v, want the source's error", err)
	}
	if st := s.Stats(); st.Parked != 1 || g.fetches != 1 {
		t.Errorf("parked %d, fetches %d, want 1 each", st.Parked, g.fetches)
	}
}
