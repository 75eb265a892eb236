// Package snapshot is thaw's on-disk snapshot format: a directory holding
// QEMU's device state, the raw guest memory file and a manifest that
// describes and checksums both. See docs/snapshot-format.md.
//
// Critical invariant: a snapshot directory is visible under its final name
// only when every file in it is complete and fsynced (written under a
// temporary name, then renamed), and a snapshot is only restored after its
// manifest checksum, file sizes, file digests and input digests match.
package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Magic identifies a thaw snapshot manifest.
const Magic = "thaw-snapshot"

// FormatVersion is the newest version of the layout described here. It
// changes only when the format does, independently of thaw releases.
// Loading refuses a newer version rather than guessing. A manifest is
// written in the oldest version that can say what it holds: 1 unless the
// snapshot has a dependency layer (inputs.deps, version 2), so readers
// that know only version 1 still read every snapshot without one and
// refuse the others by their version.
const FormatVersion = 2

// File names inside a snapshot directory.
const (
	ManifestFile = "manifest.json"
	StateFile    = "vmstate"
	MemoryFile   = "memory"
)

// Sentinel errors; wrap them so callers can tell the cases apart.
var (
	// ErrMissing means a snapshot file does not exist.
	ErrMissing = errors.New("snapshot file missing")
	// ErrCorrupt means a file's size or checksum does not match the manifest.
	ErrCorrupt = errors.New("snapshot corrupt")
	// ErrIncompatible means the snapshot was made for other inputs, another
	// format version or another accelerator.
	ErrIncompatible = errors.New("snapshot incompatible")
)

// FileInfo describes one file of the snapshot.
type FileInfo struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Allocated is the number of bytes of the file that are not holes
	// (memory files are sparse: pages the guest never wrote are holes).
	Allocated int64 `json:"allocated,omitempty"`
}

// Digest names an input the snapshot depends on.
type Digest struct {
	SHA256 string `json:"sha256"`
}

// Guest is the VM configuration a restore must reproduce exactly.
type Guest struct {
	MemoryMiB int    `json:"memory_mib"`
	VCPUs     int    `json:"vcpus"`
	Machine   string `json:"machine"`
	Cmdline   string `json:"cmdline"`
}

// VMM says which monitor produced the device state.
type VMM struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Accel   string `json:"accel"`
}

// Inputs are the digests of everything outside the snapshot that the guest
// state depends on. A restore with any other kernel, root filesystem or
// function code would resume a guest whose caches lie to it.
type Inputs struct {
	Kernel   Digest `json:"kernel"`
	Initrd   Digest `json:"initrd"`
	Rootfs   Digest `json:"rootfs"`
	Function Digest `json:"function"`
	// Deps is the function's dependency layer image, attached after the
	// function's disk (format version 2); nil: none.
	Deps *Digest `json:"deps,omitempty"`
}

// version is the format version m is written in.
func (m *Manifest) version() int {
	if m.Inputs.Deps != nil {
		return 2
	}
	return 1
}

// Manifest is manifest.json.
type Manifest struct {
	Magic         string              `json:"magic"`
	FormatVersion int                 `json:"format_version"`
	ID            string              `json:"id"`
	Function      string              `json:"function"`
	CreatedAt     time.Time           `json:"created_at"`
	Guest         Guest               `json:"guest"`
	VMM           VMM                 `json:"vmm"`
	Inputs        Inputs              `json:"inputs"`
	Files         map[string]FileInfo `json:"files"`
	// Checksum is the SHA-256 of the manifest encoded with this field empty.
	Checksum string `json:"checksum"`
}

func (m *Manifest) computeChecksum() (string, error) {
	c := *m
	c.Checksum = ""
	b, err := json.Marshal(&c)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Encode seals the manifest with its checksum and returns its JSON.
func (m *Manifest) Encode() ([]byte, error) {
	m.Magic = Magic
	m.FormatVersion = m.version()
	sum, err := m.computeChecksum()
	if err != nil {
		return nil, err
	}
	m.Checksum = sum
	return json.MarshalIndent(m, "", "  ")
}

// DecodeManifest parses and checks a manifest: magic, version, checksum and
// the presence of every required file entry.
func DecodeManifest(b []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: manifest is not valid JSON: %v", ErrCorrupt, err)
	}
	if m.Magic != Magic {
		return nil, fmt.Errorf("%w: manifest magic %q, want %q", ErrCorrupt, m.Magic, Magic)
	}
	if m.FormatVersion > FormatVersion || m.FormatVersion < 1 {
		return nil, fmt.Errorf("%w: format version %d, this thaw reads version %d", ErrIncompatible, m.FormatVersion, FormatVersion)
	}
	sum, err := m.computeChecksum()
	if err != nil {
		return nil, err
	}
	if sum != m.Checksum {
		return nil, fmt.Errorf("%w: manifest checksum mismatch", ErrCorrupt)
	}
	if m.FormatVersion != m.version() {
		return nil, fmt.Errorf("%w: format version %d with inputs of version %d", ErrCorrupt, m.FormatVersion, m.version())
	}
	if m.Inputs.Deps != nil && len(m.Inputs.Deps.SHA256) != 64 {
		return nil, fmt.Errorf("%w: the dependency layer's digest is invalid", ErrCorrupt)
	}
	for _, name := range []string{StateFile, MemoryFile} {
		fi, ok := m.Files[name]
		if !ok {
			return nil, fmt.Errorf("%w: manifest lists no %s file", ErrCorrupt, name)
		}
		if fi.Size <= 0 || len(fi.SHA256) != 64 {
			return nil, fmt.Errorf("%w: manifest entry for %s is invalid", ErrCorrupt, name)
		}
	}
	if size := m.Files[MemoryFile].Size; m.Guest.MemoryMiB <= 0 || size%(1<<20) != 0 || size>>20 != int64(m.Guest.MemoryMiB) {
		return nil, fmt.Errorf("%w: memory file size %d does not match guest memory %d MiB", ErrCorrupt, m.Files[MemoryFile].Size, m.Guest.MemoryMiB)
	}
	return &m, nil
}

// ReadManifest reads dir/manifest.json.
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrMissing, filepath.Join(dir, ManifestFile))
	}
	if err != nil {
		return nil, err
	}
	return DecodeManifest(b)
}
