package registry_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// validRemote builds a sealed remote manifest of a real snapshot directory
// (no store needed: chunk lists are not needed for the checks).
func validRemote(t *testing.T) *registry.RemoteManifest {
	t.Helper()
	root := t.TempDir()
	fx := makeSnapshot(t, root, "snap-f1", baseRegions())
	raw, err := os.ReadFile(filepath.Join(fx.dir, snapshot.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	rm := &registry.RemoteManifest{ID: fx.id, Function: "hello", ChunkSize: cs, Manifest: raw}
	for _, rel := range []string{snapshot.ManifestFile, snapshot.StateFile, snapshot.MemoryFile, "strategies/reap/ws.bin"} {
		fi, err := snapshot.HashFile(filepath.Join(fx.dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		rm.Files = append(rm.Files, registry.RemoteFile{Path: rel, Size: fi.Size, SHA256: fi.SHA256,
			Chunks: []registry.ChunkRef{{Index: 0, SHA256: strings.Repeat("a", 64), Stored: 10}}})
	}
	rm.Prefetch = []string{"strategies/reap/ws.bin"}
	return rm
}

func TestDecodeRemoteManifestRejects(t *testing.T) {
	seal := func(edit func(m *registry.RemoteManifest)) []byte {
		m := validRemote(t)
		edit(m)
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := seal(func(*registry.RemoteManifest) {})
	if _, err := registry.DecodeRemoteManifest(good); err != nil {
		t.Fatalf("valid manifest refused: %v", err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"not json", []byte("{"), "invalid"},
		{"unknown field", []byte(strings.Replace(string(good), `{"magic"`, `{"extra":1,"magic"`, 1)), "unknown field"},
		{"edited after sealing", []byte(strings.Replace(string(good), `"chunk_size":65536`, `"chunk_size":131072`, 1)), "checksum"},
		{"path escapes", seal(func(m *registry.RemoteManifest) { m.Files[3].Path = "../../etc/passwd"; m.Prefetch = nil }), "file path"},
		{"absolute path", seal(func(m *registry.RemoteManifest) { m.Files[3].Path = "/etc/passwd"; m.Prefetch = nil }), "file path"},
		{"other file", seal(func(m *registry.RemoteManifest) { m.Files[3].Path = "strategies/x"; m.Prefetch = nil }), "not a snapshot file"},
		{"dot file", seal(func(m *registry.RemoteManifest) { m.Files[3].Path = "strategies/reap/.tmp"; m.Prefetch = nil }), "file path"},
		{"chunk out of range", seal(func(m *registry.RemoteManifest) { m.Files[2].Chunks[0].Index = 1 << 40 }), "chunk"},
		{"chunks out of order", seal(func(m *registry.RemoteManifest) {
			m.Files[2].Chunks = append(m.Files[2].Chunks, m.Files[2].Chunks[0])
		}), "chunk"},
		{"memory differs", seal(func(m *registry.RemoteManifest) { m.Files[2].Size++ }), "differs"},
		{"file twice", seal(func(m *registry.RemoteManifest) { m.Files = append(m.Files, m.Files[1]) }), "twice"},
		{"other id", seal(func(m *registry.RemoteManifest) { m.ID = "snap-other" }), "do not match"},
		{"tiny chunks", seal(func(m *registry.RemoteManifest) { m.ChunkSize = 4096 }), "chunk size"},
		{"prefetch unknown", seal(func(m *registry.RemoteManifest) { m.Prefetch = []string{"vmstate2"} }), "prefetch"},
		{"layer without its file or input", seal(func(m *registry.RemoteManifest) {
			m.Layer = &registry.Layer{Digest: strings.Repeat("d", 64), Format: "erofs", Lines: []string{"x"}, SHA256: strings.Repeat("e", 64), Bytes: 4096}
		}), "must come together"},
		{"layer in another format", seal(func(m *registry.RemoteManifest) {
			m.Layer = &registry.Layer{Digest: strings.Repeat("d", 64), Format: "squashfs", Lines: []string{"x"}, SHA256: strings.Repeat("e", 64), Bytes: 4096}
		}), "dependency layer"},
		{"layer file without a layer", seal(func(m *registry.RemoteManifest) {
			m.Files = append(m.Files, registry.RemoteFile{Path: registry.LayerPath, Size: 4096, SHA256: strings.Repeat("e", 64)})
		}), "must come together"},
	} {
		_, err := registry.DecodeRemoteManifest(tc.b)
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid with %q", tc.name, err, tc.want)
		}
	}
	var m map[string]any
	_ = json.Unmarshal(good, &m)
	m["format_version"] = 3
	b, _ := json.Marshal(m)
	if _, err := registry.DecodeRemoteManifest(b); !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "format version 3") {
		t.Errorf("newer version: %v", err)
	}
}

func FuzzDecodeRemoteManifest(f *testing.F) {
	f.Add([]byte(`{"magic":"thaw-remote-snapshot","format_version":1}`))
	f.Add([]byte(`{"files":[{"path":"../x","chunks":[{"i":-1}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := registry.DecodeRemoteManifest(b)
		if err != nil {
			if !errors.Is(err, registry.ErrInvalid) {
				t.Fatalf("error not ErrInvalid: %v", err)
			}
			return
		}
		for _, f := range m.Files {
			if strings.Contains(f.Path, "..") || strings.HasPrefix(f.Path, "/") {
				t.Fatalf("accepted path %q", f.Path)
			}
		}
	})
}
