package memlayout

import (
	"fmt"
	"os"

	"github.com/thaw-dev/thaw/internal/snapshot"
)

// SnapBPFCapture summarizes the capture an artifact was planned from.
type SnapBPFCapture struct {
	// Events is the number of page-cache insertions (folios) captured.
	Events uint64 `json:"events"`
	// Dropped is the number of insertions the capture buffer could not hold
	// (the plan is then a prefix of the working set).
	Dropped uint64 `json:"dropped"`
	// Pages is the number of distinct captured pages inside the memory file.
	Pages uint64 `json:"pages"`
	// FreePages are captured pages in holes of the memory file: pages the
	// guest had freed (punched by free page reporting) or never wrote. They
	// are not prefetched (SnapBPF's free page filtering).
	FreePages uint64 `json:"free_pages"`
	// OutsidePages are captured pages beyond the end of the memory file.
	OutsidePages uint64 `json:"outside_pages"`
}

// SnapBPFArtifact is the manifest snapbpf.json. It is the whole artifact:
// SnapBPF prefetches from the snapshot's own memory file, so there is no
// working-set data file, only the ranges to prefetch, in capture order.
type SnapBPFArtifact struct {
	ArtifactHeader
	// Capture says what the capture saw and what was filtered out.
	Capture SnapBPFCapture `json:"capture"`
	// Ranges are the pages to prefetch from the memory file, as runs of
	// consecutive pages in the order their first page entered the page
	// cache during the capture; disjoint, maximal in that order.
	Ranges   []PageRun `json:"ranges"`
	Checksum string    `json:"checksum"`
}

// checksum, format, normalize and validate make it a manifest (manifest.go).
func (a *SnapBPFArtifact) checksum() *string { return &a.Checksum }
func (a *SnapBPFArtifact) format() artifactFormat {
	return artifactFormat{magic: SnapBPFMagic, manifest: SnapBPFManifestFile}
}

func (a *SnapBPFArtifact) normalize() { a.Ranges = orEmpty(a.Ranges) }

// validate checks the ranges: non-empty, inside the memory, disjoint,
// maximal in their order, and holding exactly the captured pages that were
// kept.
func (a *SnapBPFArtifact) validate(pages uint64) error {
	total, err := checkRuns("range", a.Ranges, pages)
	if err != nil {
		return err
	}
	cp := a.Capture
	if cp.FreePages > cp.Pages || total != cp.Pages-cp.FreePages {
		return fmt.Errorf("%w: ranges hold %d pages, capture kept %d of %d (%d free)",
			ErrCorrupt, total, cp.Pages-min(cp.FreePages, cp.Pages), cp.Pages, cp.FreePages)
	}
	return nil
}

// PrefetchPages is the number of pages the ranges hold.
func (a *SnapBPFArtifact) PrefetchPages() uint64 { return CountPages(a.Ranges) }

// PlanSnapBPF turns captured pages (page-cache insertions, in arrival
// order, repeats allowed) into prefetch ranges: first arrivals only, pages
// outside the memory file and pages in its holes (data extents dataRegions,
// sorted) dropped, runs of consecutive pages coalesced in arrival order.
//
// SnapBPF (HotStorage'25), "eBPF capture and prefetch" and "PV free page
// filtering": the working set is the file offsets captured in the kernel;
// pages the guest freed are neither kept nor prefetched. SnapBPF marks freed
// pages online through a paravirtual PTE-marking interface in the guest;
// thaw's warm snapshots already have freed pages punched out by
// virtio-balloon free page reporting (prepare waits for it), so thaw filters
// against the memory file's holes instead.
func PlanSnapBPF(captured []uint64, pages uint64, dataRegions []PageRun) ([]PageRun, SnapBPFCapture) {
	var st SnapBPFCapture
	keep := make([]uint64, 0, len(captured))
	for _, p := range dedup(captured) {
		switch {
		case p >= pages:
			st.OutsidePages++
		case FindRegion(dataRegions, p) < 0:
			st.Pages++
			st.FreePages++
		default:
			st.Pages++
			keep = append(keep, p)
		}
	}
	return Runs(keep), st
}

// DataRegions returns the page runs of path that hold data, from
// SEEK_DATA/SEEK_HOLE (a page partly in data counts as data), sorted.
func DataRegions(path string) ([]PageRun, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var out []PageRun
	err = snapshot.DataExtents(f, st.Size(), func(data, hole int64) error {
		first, end := uint64(data)/PageSize, PagesOf(hole)
		if end > first {
			out = append(out, PageRun{Start: first, Pages: end - first})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return Normalize(out), nil
}

// WriteSnapBPF plans the prefetch ranges of captured (PlanSnapBPF, against
// the data regions of the memory file at memPath) and writes snapbpf.json
// to dir. The memory file is hashed and must match memSHA256 unless that
// is empty (ErrMismatch). The capture's event and drop counts are recorded
// as given.
//
// SnapBPF keeps the captured working set in a BPF map, in kernel memory; a
// daemon restart (or any reload of the program) would lose it, so thaw
// writes it down once, like the other strategies' artifacts: versioned,
// checksummed and bound to the exact memory file.
func WriteSnapBPF(dir, memPath, memSHA256 string, captured []uint64, events, dropped uint64) (*SnapBPFArtifact, error) {
	mem, err := openMemory(memPath, memSHA256, nil)
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	data, err := DataRegions(memPath)
	if err != nil {
		return nil, err
	}
	if err := mem.hash(); err != nil {
		return nil, err
	}
	ranges, st := PlanSnapBPF(captured, mem.pages, data)
	st.Events, st.Dropped = events, dropped
	return writeManifest(&SnapBPFArtifact{ArtifactHeader: ArtifactHeader{Dir: dir, Memory: mem.ref()}, Capture: st, Ranges: ranges}, mem, nil)
}

// Encode seals the manifest (magic, version, page size, checksum) and
// returns its canonical JSON.
func (a *SnapBPFArtifact) Encode() ([]byte, error) { return encodeManifest(a) }

// ReadSnapBPF reads and checks dir/snapbpf.json (DecodeSnapBPF). A missing
// manifest is reported as fs.ErrNotExist.
func ReadSnapBPF(dir string) (*SnapBPFArtifact, error) { return readManifest[SnapBPFArtifact](dir) }

// Verify checks that the artifact was planned from the snapshot memory file
// of memSize bytes and digest memSHA256 (ErrMismatch otherwise). There is no
// data file: the bytes prefetched are the memory file's own, which the
// snapshot's verification (digest, or unchanged stamp) already covers.
func (a *SnapBPFArtifact) Verify(memSize int64, memSHA256 string) error {
	return a.verifyMemory(memSize, memSHA256)
}
