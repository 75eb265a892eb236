package restore_test

import (
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/restore/restoretest"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// Every registered strategy passes the conformance suite, with its own
// checks where it has them (the conformance case of docs/design.md's
// "Adding a strategy").
func TestConformance(t *testing.T) {
	checks := map[restore.Kind]func(*testing.T, *restoretest.Snapshot, restore.Session){
		restore.Premap:  checkPremapPopulated,
		restore.REAP:    checkREAPPrefetched,
		restore.SnapBPF: checkSnapBPFResident,
	}
	for _, st := range restore.Strategies() {
		t.Run(string(st.Kind), func(t *testing.T) {
			restoretest.Suite(t, st, restoretest.Options{
				Build: func(t *testing.T, s *restoretest.Snapshot) { restore.WriteArtifacts(t, s.Snap, s.Order) },
				Check: checks[st.Kind],
			})
		})
	}
}

// checkPremapPopulated: premap pre-faulted all of guest memory.
func checkPremapPopulated(t *testing.T, s *restoretest.Snapshot, sess restore.Session) {
	var st restore.PremapStats
	sess.Stats().PartAs(string(restore.Premap), &st)
	if st.PopulatedBytes != uint64(s.Pages)*snapshot.PageSize || st.PopulateMS <= 0 {
		t.Errorf("premap populated %d bytes in %.3f ms, want all %d", st.PopulatedBytes, st.PopulateMS, s.Pages*snapshot.PageSize)
	}
}

// checkREAPPrefetched: REAP installed its whole working set.
func checkREAPPrefetched(t *testing.T, s *restoretest.Snapshot, sess restore.Session) {
	var st restore.REAPStats
	sess.Stats().PartAs(string(restore.REAP), &st)
	if st.PrefetchPages != uint64(len(s.Order)) {
		t.Errorf("prefetched %d pages, working set %d", st.PrefetchPages, len(s.Order))
	}
}

// checkSnapBPFResident waits for the snapbpf prefetcher's mincore check and
// requires every planned page (the working set minus holes) resident.
func checkSnapBPFResident(t *testing.T, s *restoretest.Snapshot, sess restore.Session) {
	t.Helper()
	data, err := memlayout.DataRegions(s.Snap.MemoryPath())
	if err != nil {
		t.Fatal(err)
	}
	var want uint64
	for _, p := range s.Order {
		for _, r := range data {
			if r.Contains(p) {
				want++
				break
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	var st restore.SnapBPFStats
	all := sess.Stats()
	all.PartAs(string(restore.SnapBPF), &st)
	for st.SnapBPFResidentMS == 0 && st.SnapBPFError == "" && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		all = sess.Stats()
		all.PartAs(string(restore.SnapBPF), &st)
	}
	if st.SnapBPFError != "" || st.SnapBPFPages != want || st.SnapBPFResidentPages != want || st.SnapBPFRanges == 0 {
		t.Fatalf("snapbpf stats %+v, want %d pages resident", st, want)
	}
}
