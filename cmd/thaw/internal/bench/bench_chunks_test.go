package bench

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

func TestParseChunkSize(t *testing.T) {
	for in, want := range map[string]int64{"64KiB": 64 << 10, "512K": 512 << 10, "2MiB": 2 << 20, "8M": 8 << 20, "131072": 128 << 10} {
		if got, err := parseChunkSize(in); err != nil || got != want {
			t.Errorf("%s: %d %v, want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "32KiB", "16MiB", "100KiB", "-64KiB", "lots"} {
		if _, err := parseChunkSize(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The chunk measurements count the working set the remote default
// strategy's artifact holds, as page runs; a snapshot without one has none.
func TestPrefetchedPages(t *testing.T) {
	dir := t.TempDir()
	mem := filepath.Join(dir, snapshot.MemoryFile)
	data := make([]byte, 16*snapshot.PageSize)
	for i := range data {
		data[i] = byte(i/snapshot.PageSize + 1)
	}
	if err := os.WriteFile(mem, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := prefetchedPages(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("without an artifact: %v", err)
	}
	fi, err := snapshot.HashFile(mem)
	if err != nil {
		t.Fatal(err)
	}
	art := restore.Snapshot{Dir: dir}.ArtifactDir(restore.RemoteDefault())
	if _, err := memlayout.WriteREAP(art, mem, fi.SHA256, []uint64{3, 4, 5, 9}); err != nil {
		t.Fatal(err)
	}
	ps, runs, err := prefetchedPages(dir)
	if err != nil || ps != snapshot.PageSize || !slices.Equal(runs, [][2]int64{{3, 3}, {9, 1}}) {
		t.Fatalf("page size %d, runs %v, %v", ps, runs, err)
	}
}
