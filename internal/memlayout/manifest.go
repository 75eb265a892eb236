package memlayout

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ArtifactHeader is the head every artifact manifest starts with; embedded
// first, its fields open the manifest's JSON object.
type ArtifactHeader struct {
	// Dir is the directory the artifact was read from or written to.
	Dir string `json:"-"`

	Magic         string `json:"magic"`
	FormatVersion int    `json:"format_version"`
	PageSize      int    `json:"page_size"`
	// Memory is the memory file the artifact was built from.
	Memory FileRef `json:"memory"`
}

func (h *ArtifactHeader) header() *ArtifactHeader { return h }

// FileRef is the size and SHA-256 (lowercase hex, over every byte, holes as
// zeros) of a file.
type FileRef struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// verifyMemory checks that the artifact was built from the memory file of
// memSize bytes and digest memSHA256 (ErrMismatch otherwise).
func (h *ArtifactHeader) verifyMemory(memSize int64, memSHA256 string) error {
	if h.Memory.Size != memSize || h.Memory.SHA256 != memSHA256 {
		return fmt.Errorf("%w: %s was built from memory %s (%d bytes), snapshot memory is %s (%d bytes)",
			ErrMismatch, h.Dir, short(h.Memory.SHA256), h.Memory.Size, short(memSHA256), memSize)
	}
	return nil
}

// artifactFormat is an artifact's magic and files.
type artifactFormat struct {
	magic    string
	manifest string // manifest file name
	data     string // data file name, "" if the artifact has none
	// dataRef is the manifest's entry for the data file (nil if none).
	dataRef *FileRef
}

// orEmpty returns s, or an empty slice if s is nil, so that null and []
// encode alike.
func orEmpty[S ~[]E, E any](s S) S {
	if s == nil {
		return S{}
	}
	return s
}

// encoder is a manifest that can seal and encode itself.
type encoder interface{ Encode() ([]byte, error) }

// manifest is a pointer to an artifact manifest: an ArtifactHeader, a
// self-checksum, and what differs between artifacts.
type manifest[T any] interface {
	*T
	encoder
	header() *ArtifactHeader
	checksum() *string
	format() artifactFormat
	// normalize makes absent lists empty (orEmpty).
	normalize()
	// validate checks the structure of a decoded, unsealed manifest
	// against its memory of pages pages.
	validate(pages uint64) error
}

// encodeManifest sets a's magic, version and page size, seals it and
// returns its canonical JSON (one line).
func encodeManifest[T any, P manifest[T]](a P) ([]byte, error) {
	h := a.header()
	h.Magic, h.FormatVersion, h.PageSize = a.format().magic, FormatVersion, int(PageSize)
	a.normalize()
	return seal(a)
}

// decodeManifest parses and checks a manifest: magic, version (newer is
// ErrIncompatible), page size, checksum, canonical form, then a's own
// structure (validate). It looks at no file.
func decodeManifest[T any, P manifest[T]](b []byte) (P, error) {
	a := P(new(T))
	if err := decodeHeader(b, a.format().magic); err != nil {
		return nil, err
	}
	if err := decodeStrict(b, a); err != nil {
		return nil, err
	}
	if ps := a.header().PageSize; ps != int(PageSize) {
		return nil, fmt.Errorf("%w: page size %d, this thaw uses %d", ErrIncompatible, ps, PageSize)
	}
	a.normalize()
	if err := unseal(b, a); err != nil {
		return nil, err
	}
	pages, err := checkMemory(a.header().Memory)
	if err != nil {
		return nil, err
	}
	if err := a.validate(pages); err != nil {
		return nil, err
	}
	return a, nil
}

// readManifest reads and decodes dir's manifest and checks that its data
// file, if any, has the recorded size. A missing manifest is reported as
// fs.ErrNotExist.
func readManifest[T any, P manifest[T]](dir string) (P, error) {
	path := filepath.Join(dir, P(new(T)).format().manifest)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	a, err := decodeManifest[T, P](b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	a.header().Dir = dir
	if f := a.format(); f.dataRef != nil {
		if err := checkDataFile(filepath.Join(dir, f.data), f.dataRef.Size); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// writeManifest writes a to its Dir (created if needed): first its data
// file, if any (the pages of regions copied from mem, in order), then the
// manifest, each under a temporary name, fsynced and renamed (publish).
// It refuses to publish a manifest its reader would refuse, and returns a.
func writeManifest[T any, P manifest[T]](a P, mem *memSource, regions []PageRun) (P, error) {
	f, dir := a.format(), a.header().Dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var data *tempFile
	if f.dataRef != nil {
		t, written, err := writeTemp(dir, f.data, func(w io.Writer) error {
			return mem.copyPages(w, regions)
		})
		if err != nil {
			return nil, err
		}
		if err := mem.unchanged(); err != nil {
			t.discard()
			return nil, err
		}
		data, *f.dataRef = t, written
	}
	b, err := encodeChecked[T, P](a)
	if err != nil {
		data.discard()
		return nil, err
	}
	man, err := writeManifestTemp(dir, f.manifest, b)
	if err != nil {
		data.discard()
		return nil, err
	}
	if err := publish(dir, data, man); err != nil {
		return nil, err
	}
	return a, nil
}

// encodeChecked encodes a and checks that decodeManifest accepts it.
func encodeChecked[T any, P manifest[T]](a P) ([]byte, error) {
	b, err := a.Encode()
	if err != nil {
		return nil, err
	}
	if _, err := decodeManifest[T, P](b); err != nil {
		return nil, fmt.Errorf("internal error: built an invalid manifest: %w", err)
	}
	return b, nil
}

// checksumOf is the SHA-256 of v's JSON encoding; v must have its checksum
// field cleared.
func checksumOf(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// decodeHeader reads magic and format_version leniently, so a manifest of a
// newer version is reported as incompatible even if its fields changed.
func decodeHeader(b []byte, magic string) error {
	var h struct {
		Magic         string `json:"magic"`
		FormatVersion int64  `json:"format_version"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return fmt.Errorf("%w: manifest is not valid JSON: %v", ErrCorrupt, err)
	}
	if h.Magic != magic {
		return fmt.Errorf("%w: manifest magic %q, want %q", ErrCorrupt, truncate([]byte(h.Magic)), magic)
	}
	if h.FormatVersion > FormatVersion {
		return fmt.Errorf("%w: format version %d, this thaw reads version %d", ErrIncompatible, h.FormatVersion, FormatVersion)
	}
	if h.FormatVersion < 1 {
		return fmt.Errorf("%w: format version %d", ErrCorrupt, h.FormatVersion)
	}
	return nil
}

// decodeStrict decodes exactly one JSON value into v, refusing unknown
// fields and trailing data.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: manifest: %v", ErrCorrupt, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: manifest: data after the JSON object", ErrCorrupt)
	}
	return nil
}

// sealable is a pointer to a manifest with a self-checksum field.
type sealable[T any] interface {
	*T
	encoder
	checksum() *string
}

// seal sets a's checksum to the SHA-256 of a with the checksum cleared and
// returns a's canonical JSON (one line).
func seal[T any, P sealable[T]](a P) ([]byte, error) {
	c := *a
	*P(&c).checksum() = ""
	sum, err := checksumOf(&c)
	if err != nil {
		return nil, err
	}
	*a.checksum() = sum
	b, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// unseal checks the checksum of a, decoded from b, and that b is exactly
// a's canonical encoding.
func unseal[T any, P sealable[T]](b []byte, a P) error {
	c := *a
	*P(&c).checksum() = ""
	sum, err := checksumOf(&c)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if sum != *a.checksum() {
		return fmt.Errorf("%w: manifest checksum mismatch", ErrCorrupt)
	}
	return checkCanonical(b, P(&c))
}

// checkCanonical requires b to be exactly the encoding of the manifest it
// decoded to (m, a copy it may modify). The checksum covers the decoded
// values; this covers every byte too, since encoding/json would otherwise
// accept edits that decode alike (a key's case, spacing, field order).
func checkCanonical(b []byte, m encoder) error {
	enc, err := m.Encode()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if !bytes.Equal(enc, b) {
		return fmt.Errorf("%w: manifest is not in canonical form (edited?)", ErrCorrupt)
	}
	return nil
}
