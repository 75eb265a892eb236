package snapshots

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

func TestTakeRecordsAVerifiedSnapshot(t *testing.T) {
	w := newWorld(t, nil)
	ctx := context.Background()
	sn := w.take(3)
	if !idRE.MatchString(sn.ID) || sn.Function != "hello" || sn.SourceVM != "vm-0123456789ab" || sn.Version != 3 ||
		sn.Dir != filepath.Join(w.m.Dir(), sn.ID) || sn.MemoryMiB != 1 || sn.PauseMS != 1 || sn.Stamp == "" {
		t.Fatalf("snapshot %+v", sn)
	}
	if sn.SizeBytes != 1<<20+int64(len("device state")) || sn.DiskBytes <= 0 || sn.DiskBytes >= sn.SizeBytes {
		t.Errorf("size %d, disk %d: want the sparse 1 MiB memory file", sn.SizeBytes, sn.DiskBytes)
	}
	if got, err := w.m.Get(ctx, sn.ID); err != nil || got.Stamp != sn.Stamp {
		t.Fatalf("catalog: %+v, %v", got, err)
	}
	m, err := w.m.Verify(ctx, sn, w.fn, true)
	if err != nil {
		t.Fatalf("a snapshot just taken does not verify: %v", err)
	}
	want := snapshot.Guest{MemoryMiB: 1, VCPUs: 1, Machine: "pc-i440fx-7.2", Cmdline: "console=ttyS0 thaw.function=hello"}
	if m.Guest != want || m.VMM != (snapshot.VMM{Name: "qemu", Version: "7.2.22", Accel: "tcg"}) || m.Inputs.Kernel.SHA256 != "k1" {
		t.Errorf("manifest guest %+v vmm %+v inputs %+v", m.Guest, m.VMM, m.Inputs)
	}
	if len(w.vers.pending) != 0 {
		t.Errorf("a version's snapshot was recorded as a deploy's: %v", w.vers.pending)
	}
	if deploy := w.take(-1); !slices.Equal(w.vers.pending, []string{deploy.ID}) {
		t.Errorf("pending %v, want the deploy's %s", w.vers.pending, deploy.ID)
	}
}

func TestTakeLeavesNothingOnFailure(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*world, *Source)
		want  error
		words string
	}{
		{"private memory", func(_ *world, s *Source) { s.Shared = false }, errdefs.ErrConflict, "private memory"},
		{"vmm error", func(_ *world, s *Source) {
			s.Write = func(context.Context, string) (snapshot.FileInfo, time.Duration, error) {
				return snapshot.FileInfo{}, 0, errors.New("qmp: migrate failed")
			}
		}, nil, "migrate failed"},
		{"full disk", func(_ *world, s *Source) {
			s.Write = func(context.Context, string) (snapshot.FileInfo, time.Duration, error) {
				return snapshot.FileInfo{}, 0, syscall.ENOSPC
			}
		}, errdefs.ErrNoSpace, "nothing was kept"},
		{"secret in memory", func(w *world, _ *Source) { w.fns.scanErr = errors.New("holds secret db-password") }, nil, "db-password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, nil)
			src := w.source(1)
			tc.edit(w, &src)
			_, err := w.m.Take(context.Background(), src)
			if err == nil || !strings.Contains(err.Error(), tc.words) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("err %v, want %v saying %q", err, tc.want, tc.words)
			}
			if e := w.entries(); len(e) != 0 {
				t.Errorf("left %v in the snapshots directory", e)
			}
			if snaps, _ := w.db.ListSnapshots(context.Background(), ""); len(snaps) != 0 {
				t.Errorf("catalog holds %d snapshots", len(snaps))
			}
		})
	}
}

func TestGetListPinCheckTheirInput(t *testing.T) {
	w := newWorld(t, nil)
	ctx := context.Background()
	if _, err := w.m.Get(ctx, "snap-../../etc"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("malformed id: %v", err)
	}
	if _, err := w.m.Get(ctx, "snap-000000000000"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown id: %v", err)
	}
	if _, err := w.m.List(ctx, "Bad"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("bad function name: %v", err)
	}
	if _, err := w.m.Pin(ctx, "snap-000000000000", true); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("pin of an unknown snapshot: %v", err)
	}
	sn := w.take(1)
	if got, err := w.m.Pin(ctx, sn.ID, true); err != nil || !got.Pinned {
		t.Fatalf("pin: %+v, %v", got, err)
	}
	if list, err := w.m.List(ctx, "hello"); err != nil || len(list) != 1 || !list[0].Pinned {
		t.Errorf("list: %v, %v", list, err)
	}
}

func TestDeleteRefusesASnapshotInUse(t *testing.T) {
	w := newWorld(t, nil)
	ctx := context.Background()
	sn := w.take(1)
	w.vms.using[sn.ID] = &catalog.VM{ID: "vm-aaaaaaaaaaaa", State: catalog.StateRunning}
	if err := w.m.Delete(ctx, sn.ID); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "vm-aaaaaaaaaaaa") {
		t.Fatalf("delete of a snapshot in use: %v", err)
	}
	if _, err := os.Stat(sn.Dir); err != nil || len(w.vms.held) != 0 || !slices.Equal(w.vms.released, []string{sn.ID}) {
		t.Fatalf("refused delete: dir %v, held %v, released %v", err, w.vms.held, w.vms.released)
	}
	delete(w.vms.using, sn.ID)
	if err := w.m.Delete(ctx, sn.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sn.Dir); !os.IsNotExist(err) {
		t.Errorf("directory stays: %v", err)
	}
	if _, err := w.m.Get(ctx, sn.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("catalog keeps it: %v", err)
	}
	if len(w.vms.held) != 0 || len(w.vms.released) != 2 || w.fns.kicks != 1 {
		t.Errorf("held %v, released %v, dependency collections %d", w.vms.held, w.vms.released, w.fns.kicks)
	}
}

// Collection keeps the newest Keep snapshots of each version and spares
// pinned ones, ones in use, ones named and a deploy's.
func TestCollectKeepsTheNewestPerVersion(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.Keep = 1 })
	ctx := context.Background()
	var v1 []*catalog.Snapshot
	for range 5 {
		v1 = append(v1, w.take(1))
		time.Sleep(2 * time.Millisecond) // distinct creation times: oldest first
	}
	v2 := w.take(2)
	pending := []*catalog.Snapshot{w.take(-1), w.take(-1)}
	if _, err := w.m.Pin(ctx, v1[0].ID, true); err != nil {
		t.Fatal(err)
	}
	w.vms.using[v1[1].ID] = &catalog.VM{ID: "vm-aaaaaaaaaaaa", State: catalog.StateRunning}
	w.m.Collect(ctx, "hello", v1[2].ID)
	left := map[string]bool{}
	snaps, _ := w.db.ListSnapshots(ctx, "hello")
	for _, sn := range snaps {
		left[sn.ID] = true
	}
	for _, sn := range []*catalog.Snapshot{v1[0], v1[1], v1[2], v1[4], v2, pending[0], pending[1]} {
		if !left[sn.ID] {
			t.Errorf("%s (version %d) was collected", sn.ID, sn.Version)
		}
	}
	if left[v1[3].ID] || len(snaps) != 7 {
		t.Errorf("%d snapshots left; %s, old and unused, should have gone", len(snaps), v1[3].ID)
	}
	w2 := newWorld(t, nil) // Keep 0: nothing is collected
	w2.take(1)
	w2.take(1)
	w2.m.Collect(ctx, "hello")
	if snaps, _ := w2.db.ListSnapshots(ctx, "hello"); len(snaps) != 2 {
		t.Errorf("keep 0 collected: %d left", len(snaps))
	}
}
