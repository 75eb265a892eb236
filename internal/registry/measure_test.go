package registry_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/thaw-dev/thaw/internal/registry/chunk"
)

// chunk.MeasureSnapshots counts what a push stores: two snapshots sharing their
// memory dedup, zero chunks count nowhere, and the working set's chunks
// are the memory chunks it touches.
func TestMeasureChunks(t *testing.T) {
	root := t.TempDir()
	a := makeSnapshot(t, root, "snap-m1", baseRegions())
	b := makeSnapshot(t, root, "snap-m2", baseRegions())
	// REAP working set of a: pages 0-1 (chunk 0) and page 272 (chunk 17, a
	// hole: nothing to fetch).
	ws := `{"page_size":4096,"pages":[[0,2],[272,1]]}`
	if err := os.WriteFile(filepath.Join(a.dir, "strategies", "reap", "reap.json"), []byte(ws), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := chunk.MeasureSnapshots([]string{a.dir, b.dir}, cs, reapPages)
	if err != nil {
		t.Fatal(err)
	}
	// Per snapshot: memory 5 chunks (0,1,2,20,63; 5 is written zeros),
	// vmstate 5, ws.bin 4, reap.json 1, manifest.json 1 = 16.
	if m.Chunks != 32 {
		t.Fatalf("chunks %d, want 32", m.Chunks)
	}
	// Shared: memory and ws.bin (9); vmstate is seeded by the id's length
	// (equal here), so it is shared too; the manifests and a's reap.json differ.
	if m.UniqueChunks != 5+5+4+1+1+1+1 || m.DedupRatio <= 1.5 {
		t.Fatalf("unique %d, ratio %.2f", m.UniqueChunks, m.DedupRatio)
	}
	// a: chunk 0 (pages 0-1; page 272 is in the hole chunk 4); b (the
	// fixture's pages 40-41): chunk 0 as well.
	if m.WorkingSetSnapshots != 2 || m.WorkingSetChunks != 2 || m.WorkingSetBytes != 4*4096 || m.WorkingSetFetchBytes != 2*cs {
		t.Fatalf("working set: %+v", m)
	}
	if m.Objects != m.UniqueChunks+2 || m.StoredBytes <= 0 || m.StoredBytes >= m.UniqueBytes {
		t.Fatalf("measure = %+v", m)
	}
	if _, err := chunk.MeasureSnapshots([]string{a.dir}, 1000, reapPages); err == nil {
		t.Fatal("chunk size 1000 accepted")
	}
}

// reapPages reads the page runs of a snapshot's reap.json (what the reap
// strategy's Prefetched reads, without its checks).
func reapPages(dir string) (int64, [][2]int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, "strategies", "reap", "reap.json"))
	if err != nil {
		return 0, nil, err
	}
	var ws struct {
		PageSize int64      `json:"page_size"`
		Pages    [][2]int64 `json:"pages"`
	}
	err = json.Unmarshal(b, &ws)
	return ws.PageSize, ws.Pages, err
}

// BenchmarkLazyFileReadAtHit is the hit path a userfaultfd handler takes:
// one 4 KiB page of a chunk already read.
func BenchmarkLazyFileReadAtHit(b *testing.B) {
	e := newEnv(b, 0)
	_, rm, _ := pushNew(b, e, "snap-bench")
	lf := openMemory(b, e.cache, rm)
	defer lf.Close()
	page := make([]byte, 4096)
	if _, err := lf.ReadAt(page, cs); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(4096)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := lf.ReadAt(page, cs+int64(i%16)*4096); err != nil {
			b.Fatal(err)
		}
	}
}
