package memlayout

import "path/filepath"

// REAPArtifact is the manifest reap.json of a REAP artifact directory,
// which also holds the working-set file ws.bin.
type REAPArtifact struct {
	ArtifactHeader
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

// checksum, format, normalize and validate make it a manifest (manifest.go).
func (a *REAPArtifact) checksum() *string { return &a.Checksum }
func (a *REAPArtifact) format() artifactFormat {
	return artifactFormat{magic: REAPMagic, manifest: REAPManifestFile, data: WorkingSetDataFile, dataRef: &a.WSFile}
}

func (a *REAPArtifact) normalize() { a.Pages = orEmpty(a.Pages) }

// validate checks the runs (non-empty, in bounds, maximal: a run never
// continues the previous one, no page twice) and that ws.bin's size is the
// pages they hold.
func (a *REAPArtifact) validate(pages uint64) error {
	total, err := checkRuns("page run", a.Pages, pages)
	if err != nil {
		return err
	}
	return checkDataSize(WorkingSetDataFile, a.WSFile, total)
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
	mem, err := openMemory(memPath, memSHA256, faulted)
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	if err := mem.hash(); err != nil {
		return nil, err
	}
	runs := Runs(dedup(faulted))
	return writeManifest(&REAPArtifact{ArtifactHeader: ArtifactHeader{Dir: dir, Memory: mem.ref()}, Pages: runs}, mem, runs)
}

// Encode seals the manifest (magic, version, page size, checksum) and
// returns its canonical JSON. REAP keeps the working-set offsets in a plain
// file; the sealed, versioned manifest is thaw's.
func (a *REAPArtifact) Encode() ([]byte, error) { return encodeManifest(a) }

// ReadREAP reads dir/reap.json, checks it (DecodeREAP) and checks that
// dir/ws.bin has the recorded size. A missing manifest is reported as
// fs.ErrNotExist. Use Verify before restoring from it. (REAP prefetch
// phase: the working set to fetch and install; the checks are thaw's.)
func ReadREAP(dir string) (*REAPArtifact, error) { return readManifest[REAPArtifact](dir) }

// Verify checks that the artifact was built from the snapshot memory file of
// memSize bytes and digest memSHA256 (ErrMismatch otherwise) and that ws.bin
// has the recorded size and, when full, the recorded SHA-256 (ErrCorrupt
// otherwise). No REAP counterpart: REAP records and prefetches against one
// snapshot; thaw stores artifacts apart and must prove the pairing, since
// a page installed from ws.bin replaces that page of the memory file.
func (a *REAPArtifact) Verify(memSize int64, memSHA256 string, full bool) error {
	return verifyData(&a.ArtifactHeader, WorkingSetDataFile, a.WSFile, memSize, memSHA256, full)
}
