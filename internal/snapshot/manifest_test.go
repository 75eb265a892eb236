package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// hexOf returns a deterministic, well-formed SHA-256 hex string for s.
func hexOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// testManifest returns a manifest that DecodeManifest accepts once sealed.
func testManifest() *Manifest {
	return &Manifest{
		ID:        "snap-2b90cd00dc32",
		Function:  "hello",
		CreatedAt: time.Date(2026, 11, 22, 2, 59, 35, 786000000, time.UTC),
		Guest: Guest{MemoryMiB: 256, VCPUs: 1, Machine: "pc",
			Cmdline: "console=ttyS0 root=/dev/vda ro thaw.function=hello"},
		VMM: VMM{Name: "qemu", Version: "7.2.22", Accel: "tcg"},
		Inputs: Inputs{
			Kernel:   Digest{SHA256: hexOf("kernel")},
			Initrd:   Digest{SHA256: hexOf("initrd")},
			Rootfs:   Digest{SHA256: hexOf("rootfs")},
			Function: Digest{SHA256: hexOf("function")},
		},
		Files: map[string]FileInfo{
			StateFile:  {Size: 561234, SHA256: hexOf("vmstate")},
			MemoryFile: {Size: 256 << 20, SHA256: hexOf("memory"), Allocated: 104202240},
		},
	}
}

// seal encodes m exactly as it is (unlike Encode, it keeps m's magic and
// format version) with the checksum computed the way docs/snapshot-format.md
// describes it: SHA-256 of the JSON encoding with "checksum" empty. Tests use
// it to build manifests that pass the checksum but break another rule.
func seal(t *testing.T, m *Manifest) []byte {
	t.Helper()
	c := *m
	c.Checksum = ""
	b, err := json.Marshal(&c)
	if err != nil {
		t.Fatalf("marshal manifest: %v", err)
	}
	sum := sha256.Sum256(b)
	c.Checksum = hex.EncodeToString(sum[:])
	out, err := json.MarshalIndent(&c, "", "  ")
	if err != nil {
		t.Fatalf("marshal manifest: %v", err)
	}
	return out
}

// manifestDiff describes how two manifests differ, "" if they hold the same
// content. Times are compared as instants (their *time.Location may differ).
func manifestDiff(a, b *Manifest) string {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return "created_at " + a.CreatedAt.String() + " != " + b.CreatedAt.String()
	}
	ca, cb := *a, *b
	ca.CreatedAt, cb.CreatedAt = time.Time{}, time.Time{}
	if !reflect.DeepEqual(ca, cb) {
		ja, _ := json.Marshal(ca)
		jb, _ := json.Marshal(cb)
		return string(ja) + "\n!=\n" + string(jb)
	}
	return ""
}

func TestEncodeDecodeManifestRoundTrip(t *testing.T) {
	m := testManifest()
	m.Magic, m.FormatVersion, m.Checksum = "stale", 99, "stale" // Encode must overwrite all three
	b, err := m.Encode()
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	if m.Magic != Magic || m.FormatVersion != 1 || len(m.Checksum) != 64 {
		t.Fatalf("Encode left magic=%q version=%d checksum=%q", m.Magic, m.FormatVersion, m.Checksum)
	}
	got, err := DecodeManifest(b)
	if err != nil {
		t.Fatalf("DecodeManifest(Encode()): %v\n%s", err, b)
	}
	if d := manifestDiff(m, got); d != "" {
		t.Fatalf("decoded manifest differs from the encoded one:\n%s", d)
	}
	// Encoding the decoded manifest again is byte-identical: the format is
	// deterministic, so a manifest can be rewritten without changing.
	b2, err := got.Encode()
	if err != nil {
		t.Fatalf("re-Encode: %v", err)
	}
	if !bytes.Equal(b, b2) {
		t.Fatalf("re-encoding changed the manifest:\n%s\n---\n%s", b, b2)
	}
}

// A snapshot with a dependency layer is written in version 2 (a version 1
// reader refuses it by its version), one without in version 1.
func TestManifestVersionFollowsTheLayer(t *testing.T) {
	m := testManifest()
	m.Inputs.Deps = &Digest{SHA256: hexOf("layer")}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if m.FormatVersion != 2 {
		t.Fatalf("a manifest with a layer is version %d, want 2", m.FormatVersion)
	}
	got, err := DecodeManifest(b)
	if err != nil {
		t.Fatalf("DecodeManifest: %v", err)
	}
	if got.Inputs.Deps == nil || got.Inputs.Deps.SHA256 != hexOf("layer") {
		t.Fatalf("decoded deps input = %+v", got.Inputs.Deps)
	}
	plain, err := testManifest().Encode()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(plain, []byte(`"deps"`)) || !bytes.Contains(plain, []byte(`"format_version": 1`)) {
		t.Fatalf("a manifest without a layer changed:\n%s", plain)
	}
}

func TestDecodeManifestAcceptsAnyFormattingOfTheSameContent(t *testing.T) {
	// The checksum covers the content, not the layout: compact JSON with the
	// checksum of the indented encoding still decodes.
	m := testManifest()
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		t.Fatal(err)
	}
	got, err := DecodeManifest(compact.Bytes())
	if err != nil {
		t.Fatalf("DecodeManifest(compact): %v", err)
	}
	if d := manifestDiff(m, got); d != "" {
		t.Fatalf("decoded manifest differs:\n%s", d)
	}
}

func TestDecodeManifestRejects(t *testing.T) {
	valid, err := testManifest().Encode()
	if err != nil {
		t.Fatal(err)
	}
	sealed := func(edit func(m *Manifest)) func(t *testing.T) []byte {
		return func(t *testing.T) []byte {
			m := testManifest()
			m.Magic, m.FormatVersion = Magic, 1
			edit(m)
			return seal(t, m)
		}
	}
	raw := func(b []byte) func(t *testing.T) []byte { return func(*testing.T) []byte { return b } }

	tests := []struct {
		name    string
		input   func(t *testing.T) []byte
		want    error
		wantMsg string
	}{
		{name: "empty input", input: raw(nil), want: ErrCorrupt, wantMsg: "not valid JSON"},
		{name: "truncated JSON", input: raw(valid[:len(valid)/2]), want: ErrCorrupt, wantMsg: "not valid JSON"},
		{name: "JSON array instead of object", input: raw([]byte(`[1,2,3]`)), want: ErrCorrupt, wantMsg: "not valid JSON"},
		{name: "wrong type for a field", input: raw([]byte(`{"magic":"thaw-snapshot","format_version":"1"}`)), want: ErrCorrupt, wantMsg: "not valid JSON"},
		{name: "JSON null", input: raw([]byte(`null`)), want: ErrCorrupt, wantMsg: "magic"},
		{name: "empty object", input: raw([]byte(`{}`)), want: ErrCorrupt, wantMsg: "magic"},
		{name: "wrong magic with valid checksum", input: sealed(func(m *Manifest) { m.Magic = "qemu-snapshot" }), want: ErrCorrupt, wantMsg: "magic"},
		{name: "newer format version with valid checksum", input: sealed(func(m *Manifest) { m.FormatVersion = FormatVersion + 1 }), want: ErrIncompatible, wantMsg: "format version 3"},
		{name: "version 2 without a dependency layer", input: sealed(func(m *Manifest) { m.FormatVersion = 2 }), want: ErrCorrupt, wantMsg: "format version 2 with inputs of version 1"},
		{name: "version 1 with a dependency layer", input: sealed(func(m *Manifest) { m.Inputs.Deps = &Digest{SHA256: hexOf("layer")} }), want: ErrCorrupt, wantMsg: "format version 1 with inputs of version 2"},
		{name: "dependency layer digest too short", input: sealed(func(m *Manifest) { m.FormatVersion, m.Inputs.Deps = 2, &Digest{SHA256: "abc"} }), want: ErrCorrupt, wantMsg: "layer's digest is invalid"},
		{name: "format version zero", input: sealed(func(m *Manifest) { m.FormatVersion = 0 }), want: ErrIncompatible},
		{name: "negative format version", input: sealed(func(m *Manifest) { m.FormatVersion = -1 }), want: ErrIncompatible},
		{name: "edited field without re-seal", input: raw(bytes.Replace(valid, []byte(`"vcpus": 1`), []byte(`"vcpus": 2`), 1)), want: ErrCorrupt, wantMsg: "checksum mismatch"},
		{name: "edited file digest without re-seal", input: raw(bytes.Replace(valid, []byte(hexOf("vmstate")), []byte(hexOf("other")), 1)), want: ErrCorrupt, wantMsg: "checksum mismatch"},
		{name: "checksum removed", input: raw(bytes.Replace(valid, []byte(`"checksum": "`), []byte(`"checksum_": "`), 1)), want: ErrCorrupt, wantMsg: "checksum mismatch"},
		{name: "no files at all", input: sealed(func(m *Manifest) { m.Files = nil }), want: ErrCorrupt, wantMsg: "lists no vmstate"},
		{name: "missing vmstate entry", input: sealed(func(m *Manifest) { delete(m.Files, StateFile) }), want: ErrCorrupt, wantMsg: "lists no vmstate"},
		{name: "missing memory entry", input: sealed(func(m *Manifest) { delete(m.Files, MemoryFile) }), want: ErrCorrupt, wantMsg: "lists no memory"},
		{name: "empty vmstate entry", input: sealed(func(m *Manifest) { m.Files[StateFile] = FileInfo{Size: 0, SHA256: hexOf("x")} }), want: ErrCorrupt, wantMsg: "entry for vmstate is invalid"},
		{name: "short memory digest", input: sealed(func(m *Manifest) {
			m.Files[MemoryFile] = FileInfo{Size: 256 << 20, SHA256: "abc"}
		}), want: ErrCorrupt, wantMsg: "entry for memory is invalid"},
		{name: "memory one page short of guest memory", input: sealed(func(m *Manifest) {
			m.Files[MemoryFile] = FileInfo{Size: 256<<20 - 4096, SHA256: hexOf("memory")}
		}), want: ErrCorrupt, wantMsg: "does not match guest memory"},
		{name: "guest memory differs from memory file", input: sealed(func(m *Manifest) { m.Guest.MemoryMiB = 512 }), want: ErrCorrupt, wantMsg: "does not match guest memory"},
		{name: "zero guest memory", input: sealed(func(m *Manifest) { m.Guest.MemoryMiB = 0 }), want: ErrCorrupt, wantMsg: "does not match guest memory"},
		{name: "negative guest memory", input: sealed(func(m *Manifest) { m.Guest.MemoryMiB = -256 }), want: ErrCorrupt, wantMsg: "does not match guest memory"},
		// memory_mib<<20 overflows int64 and wraps around to 1 MiB, so this
		// absurd manifest passes the size check today (bug in DecodeManifest).
		{name: "guest memory whose size in bytes overflows int64", input: sealed(func(m *Manifest) {
			m.Guest.MemoryMiB = 1<<44 + 1
			m.Files[MemoryFile] = FileInfo{Size: 1 << 20, SHA256: hexOf("memory")}
		}), want: ErrCorrupt, wantMsg: "does not match guest memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.input(t)
			m, err := DecodeManifest(in)
			if !errors.Is(err, tt.want) {
				t.Fatalf("DecodeManifest = (%v, %v), want error wrapping %q\ninput: %s", m != nil, err, tt.want, in)
			}
			if m != nil {
				t.Errorf("DecodeManifest returned a manifest along with error %v", err)
			}
			if tt.wantMsg != "" && !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not mention %q", err, tt.wantMsg)
			}
		})
	}
}

func TestSealHelperMatchesEncode(t *testing.T) {
	// Guards the helper the rejection tests rely on: if seal disagreed with
	// Encode, "valid checksum" cases would fail on the checksum instead of
	// the rule they target.
	m := testManifest()
	m.Magic, m.FormatVersion = Magic, 1
	if _, err := DecodeManifest(seal(t, m)); err != nil {
		t.Fatalf("DecodeManifest(seal(valid manifest)): %v", err)
	}
}

func TestReadManifest(t *testing.T) {
	t.Run("missing manifest is ErrMissing", func(t *testing.T) {
		_, err := ReadManifest(t.TempDir())
		if !errors.Is(err, ErrMissing) {
			t.Fatalf("ReadManifest(empty dir) = %v, want ErrMissing", err)
		}
	})
	t.Run("valid manifest", func(t *testing.T) {
		dir := t.TempDir()
		m := testManifest()
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ManifestFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadManifest(dir)
		if err != nil {
			t.Fatalf("ReadManifest: %v", err)
		}
		if d := manifestDiff(m, got); d != "" {
			t.Fatalf("manifest differs:\n%s", d)
		}
	})
	t.Run("corrupt manifest is ErrCorrupt", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ManifestFile), []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadManifest(dir); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("ReadManifest = %v, want ErrCorrupt", err)
		}
	})
}

func FuzzDecodeManifest(f *testing.F) {
	valid, err := testManifest().Encode()
	if err != nil {
		f.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, valid); err != nil {
		f.Fatal(err)
	}
	zoned := testManifest()
	zoned.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("", 5*3600+1800))
	zonedB, err := zoned.Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add(compact.Bytes())
	f.Add(zonedB)
	f.Add(bytes.Replace(valid, []byte(`"vcpus": 1`), []byte(`"vcpus": 2`), 1))
	f.Add(bytes.Replace(valid, []byte(`"format_version": 1`), []byte(`"format_version": 2`), 1))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"magic":"thaw-snapshot","format_version":1,"files":{"memory":{"size":-1}}}`))
	f.Add([]byte(`not json`))

	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b)
		if err != nil {
			if m != nil {
				t.Fatalf("DecodeManifest returned a manifest and error %v", err)
			}
			return
		}
		// Whatever is accepted satisfies the documented invariants...
		if m.Magic != Magic || m.FormatVersion != m.version() {
			t.Fatalf("accepted magic %q version %d", m.Magic, m.FormatVersion)
		}
		for _, name := range []string{StateFile, MemoryFile} {
			if fi, ok := m.Files[name]; !ok || fi.Size <= 0 || len(fi.SHA256) != 64 {
				t.Fatalf("accepted manifest with invalid %s entry %+v", name, fi)
			}
		}
		if mem := m.Files[MemoryFile].Size; mem%(1<<20) != 0 || mem>>20 != int64(m.Guest.MemoryMiB) {
			t.Fatalf("accepted memory file of %d bytes for %d MiB of guest memory", mem, m.Guest.MemoryMiB)
		}
		// ...and re-encodes to a manifest that decodes to the same content.
		want := *m
		b2, err := m.Encode()
		if err != nil {
			t.Fatalf("Encode of an accepted manifest: %v", err)
		}
		m2, err := DecodeManifest(b2)
		if err != nil {
			t.Fatalf("re-encoded manifest is rejected: %v\ninput: %q\nre-encoded: %s", err, b, b2)
		}
		if d := manifestDiff(&want, m2); d != "" {
			t.Fatalf("re-encoded manifest decodes differently:\n%s", d)
		}
	})
}
