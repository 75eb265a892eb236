package memlayout

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/thaw-dev/thaw/internal/snapshot"
)

// REAPArtifact is the manifest reap.json of a REAP artifact directory,
// which also holds the working-set file ws.bin.
type REAPArtifact struct {
	// Dir is the directory the artifact was read from or written to.
	Dir string `json:"-"`

	Magic         string `json:"magic"`
	FormatVersion int    `json:"format_version"`
	PageSize      int    `json:"page_size"`
	// Memory is the memory file the artifact was built from.
	Memory FileRef `json:"memory"`
	// Pages are the guest pages stored in ws.bin, in ws.bin order, as runs
	// of consecutive pages ([start,count], see Runs): the page at index i
	// of Expand(Pages) is at byte i*PageSize of ws.bin.
	Pages []PageRun `json:"pages"`
	// WSFile describes ws.bin.
	WSFile FileRef `json:"ws_file"`
	// Checksum is the SHA-256 of the manifest's JSON encoding with this
	// field empty.
	Checksum string `json:"checksum"`
}

// WorkingSetPath is the path of the artifact's working-set file (REAP's
// "compact WS file").
func (a *REAPArtifact) WorkingSetPath() string { return filepath.Join(a.Dir, WorkingSetDataFile) }

// PageOrder lists the stored guest pages in ws.bin order (REAP prefetch:
// page i of ws.bin is installed at guest page PageOrder()[i]).
func (a *REAPArtifact) PageOrder() []uint64 { return Expand(a.Pages) }

// WriteREAP writes the REAP artifact of the memory file at memPath to dir
// (created if needed): ws.bin, the contents of the faulted pages in fault
// order, contiguous and page-aligned, then reap.json; both under temporary
// names, fsynced and renamed. The memory file is hashed (snapshot.HashFile)
// and must match memSHA256 (ErrMismatch) unless that is empty. A page
// faulted twice is stored once, at its first fault; pages outside the
// memory file are an error.
//
// REAP (Ustiugov et al., ASPLOS '21), record phase: "intercept individual
// page faults; store the working set in a compact file" so the prefetch
// phase reads it sequentially (with O_DIRECT, bypassing the page cache) and
// installs every page with UFFDIO_COPY. thaw differs in describing the file
// with a versioned, checksummed manifest bound to the exact memory file, the
// page list encoded as runs instead of REAP's separate offsets file.
func WriteREAP(dir, memPath, memSHA256 string, faulted []uint64) (*REAPArtifact, error) {
	if memSHA256 != "" && !validHex256(memSHA256) {
		return nil, fmt.Errorf("memory sha256 %q is not a SHA-256", memSHA256)
	}
	mem, err := openMemory(memPath)
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	if err := mem.checkPages(faulted); err != nil {
		return nil, err
	}
	fi, err := snapshot.HashFile(memPath)
	if err != nil {
		return nil, err
	}
	if fi.Size != mem.stamp.Size {
		return nil, fmt.Errorf("memory file %s changed while the artifact was built", memPath)
	}
	if err := checkDigest(memPath, fi.SHA256, memSHA256); err != nil {
		return nil, err
	}
	runs := Runs(dedup(faulted))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	data, dataRef, err := writeTemp(dir, WorkingSetDataFile, func(w io.Writer) error {
		return mem.copyPages(w, runs)
	})
	if err != nil {
		return nil, err
	}
	if err := mem.unchanged(); err != nil {
		data.discard()
		return nil, err
	}
	a := &REAPArtifact{
		Dir:    dir,
		Memory: FileRef{Size: mem.stamp.Size, SHA256: fi.SHA256},
		Pages:  runs,
		WSFile: dataRef,
	}
	err = sealAndPublish(dir, REAPManifestFile, data, a.Encode, func(b []byte) error {
		_, err := DecodeREAP(b)
		return err
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// Encode seals the manifest (magic, version, page size, checksum) and
// returns its canonical JSON. REAP keeps the working-set offsets in a plain
// file; the sealed, versioned manifest is thaw's.
func (a *REAPArtifact) Encode() ([]byte, error) {
	a.Magic, a.FormatVersion, a.PageSize = REAPMagic, FormatVersion, int(PageSize)
	if a.Pages == nil {
		a.Pages = []PageRun{}
	}
	return seal(a)
}

func (a *REAPArtifact) checksum() *string { return &a.Checksum }

// DecodeREAP parses and checks a reap.json: magic, version (newer is
// ErrIncompatible), page size, checksum and structure: runs non-empty, in
// bounds, maximal (a run never continues the previous one), no page twice,
// and ws.bin's size equal to the pages they hold. It does not look at any
// file. (REAP trusts its own files; the checking is thaw's.)
func DecodeREAP(b []byte) (*REAPArtifact, error) {
	if err := decodeHeader(b, REAPMagic); err != nil {
		return nil, err
	}
	var a REAPArtifact
	if err := decodeStrict(b, &a); err != nil {
		return nil, err
	}
	if a.PageSize != int(PageSize) {
		return nil, fmt.Errorf("%w: page size %d, this thaw uses %d", ErrIncompatible, a.PageSize, PageSize)
	}
	if a.Pages == nil {
		a.Pages = []PageRun{}
	}
	if err := unseal(b, &a); err != nil {
		return nil, err
	}
	pages, err := checkMemory(a.Memory)
	if err != nil {
		return nil, err
	}
	total, err := checkRuns("page run", a.Pages, pages)
	if err != nil {
		return nil, err
	}
	if err := checkDataSize(WorkingSetDataFile, a.WSFile, total); err != nil {
		return nil, err
	}
	return &a, nil
}

// ReadREAP reads dir/reap.json, checks it (DecodeREAP) and checks that
// dir/ws.bin has the recorded size. A missing manifest is reported as
// fs.ErrNotExist. Use Verify before restoring from it. (REAP prefetch
// phase: the working set to fetch and install; the checks are thaw's.)
func ReadREAP(dir string) (*REAPArtifact, error) {
	path := filepath.Join(dir, REAPManifestFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	a, err := DecodeREAP(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	a.Dir = dir
	if err := checkDataFile(a.WorkingSetPath(), a.WSFile.Size); err != nil {
		return nil, err
	}
	return a, nil
}

// Verify checks that the artifact was built from the snapshot memory file of
// memSize bytes and digest memSHA256 (ErrMismatch otherwise) and that ws.bin
// has the recorded size and, when full, the recorded SHA-256 (ErrCorrupt
// otherwise). No REAP counterpart: REAP records and prefetches against one
// snapshot; thaw stores artifacts apart and must prove the pairing, since
// a page installed from ws.bin replaces that page of the memory file.
func (a *REAPArtifact) Verify(memSize int64, memSHA256 string, full bool) error {
	return verifyData(a.Dir, WorkingSetDataFile, a.Memory, a.WSFile, memSize, memSHA256, full)
}
