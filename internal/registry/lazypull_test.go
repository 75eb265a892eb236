package registry_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// A lazy pull leaves files out (PullExcept); PullFile completes one later,
// verified; a LazyFile counts what it fetched and says which chunks are
// local.
func TestPullExceptAndPullFile(t *testing.T) { eachStore(t, testPullExceptAndPullFile) }

func testPullExceptAndPullFile(t *testing.T, newEnv envMaker) {
	ctx := context.Background()
	e := newEnv(t, 0)
	fx, rm, _ := pushNew(t, e, "snap-l1")
	dst := filepath.Join(t.TempDir(), "snap-l1")
	if err := os.Mkdir(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := e.cache.PullExcept(ctx, rm, dst, nil, snapshot.MemoryFile); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dst, snapshot.MemoryFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("memory pulled though skipped: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst, snapshot.StateFile)); err != nil {
		t.Fatalf("device state not pulled: %v", err)
	}

	// A LazyFile over a fresh cache: the first read of a chunk fetches it.
	c2 := newCache(t, e.store, 0)
	lf := openMemory(t, c2, rm)
	off := rm.File(snapshot.MemoryFile).Chunks[0].Index * rm.ChunkSize
	if lf.Local(off) {
		t.Fatal("a chunk never read is local")
	}
	buf := make([]byte, 4096)
	if _, err := lf.ReadAt(buf, off); err != nil {
		t.Fatal(err)
	}
	if st := lf.Stats(); st.FetchedChunks != 1 || st.FetchedBytes == 0 || !lf.Local(off) {
		t.Fatalf("after one read: %+v, local %v", st, lf.Local(off))
	}
	// Fetch makes a chunk local without reading it; a local one fetches nothing.
	chunks := rm.File(snapshot.MemoryFile).Chunks
	off2 := chunks[len(chunks)-1].Index * rm.ChunkSize
	if lf.Local(off2) || lf.Fetch(off2) != nil || !lf.Local(off2) || lf.Fetch(off2) != nil {
		t.Fatal("Fetch did not make its chunk local")
	}
	if st := lf.Stats(); st.FetchedChunks != 2 {
		t.Fatalf("after a Fetch and a Fetch of a local chunk: %+v, want 2 chunks fetched", st)
	}
	lf.Close()
	if err := lf.Fetch(0); !errors.Is(err, os.ErrClosed) && !lf.Local(0) {
		t.Fatalf("Fetch after Close: %v", err)
	}

	// The memory completed later, whole and verified.
	mem := filepath.Join(dst, snapshot.MemoryFile)
	if err := e.cache.PullFile(ctx, rm, snapshot.MemoryFile, mem, nil); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(filepath.Join(fx.dir, snapshot.MemoryFile))
	if got, _ := os.ReadFile(mem); !bytes.Equal(got, want) {
		t.Fatal("pulled memory differs")
	}
	if err := e.cache.PullFile(ctx, rm, snapshot.MemoryFile, mem, nil); err == nil {
		t.Fatal("PullFile overwrote an existing file")
	}
	if err := e.cache.PullFile(ctx, rm, "strategies/x/none.bin", filepath.Join(dst, "x"), nil); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("PullFile of a file the snapshot lacks: %v", err)
	}
}

// Warm brings a file's chunks into the cache in the background and
// unpins them when done; a file the snapshot lacks is ignored.
func TestWarm(t *testing.T) {
	e := newEnv(t, 0)
	_, rm, _ := pushNew(t, e, "snap-w1")
	c := newCache(t, e.store, 0)
	c.Warm(rm, "strategies/x/none.bin")
	c.Warm(rm, snapshot.MemoryFile)
	chunks := rm.File(snapshot.MemoryFile).Chunks
	deadline := time.Now().Add(30 * time.Second)
	for {
		all := true
		for _, ch := range chunks {
			all = all && c.Has(ch.SHA256)
		}
		if st := c.Stats(); all && st.PinnedChunks == 0 {
			if st.FetchedChunks == 0 {
				t.Fatalf("stats %+v", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("warm did not bring the chunks in and unpin them: %+v", c.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
