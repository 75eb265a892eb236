package memlayout

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func buildSnapBPF(t testing.TB, dir, spec string, captured []uint64) (*SnapBPFArtifact, []byte) {
	t.Helper()
	mem := filepath.Join(dir, "memory")
	content := writeMem(t, mem, 7, spec, 0)
	a, err := WriteSnapBPF(filepath.Join(dir, "snapbpf"), mem, sha(content), captured, uint64(len(captured)), 0)
	if err != nil {
		t.Fatal(err)
	}
	return a, content
}

func TestSnapBPFRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name     string
		spec     string
		captured []uint64
		ranges   []PageRun
		free     uint64
		outside  uint64
	}{
		{"capture order kept, runs coalesced", "DDDDDDDDDD", []uint64{5, 6, 7, 2, 3, 9, 0}, []PageRun{{5, 3}, {2, 2}, {9, 1}, {0, 1}}, 0, 0},
		{"holes filtered, written zeros kept", "HZDH", []uint64{0, 1, 2, 3}, []PageRun{{1, 2}}, 2, 0},
		{"repeats once, at first arrival", "DDDD", []uint64{2, 1, 2, 3, 1}, []PageRun{{2, 1}, {1, 1}, {3, 1}}, 0, 0},
		{"beyond the file", "DD", []uint64{1, 5, 0}, []PageRun{{1, 1}, {0, 1}}, 0, 1},
		{"nothing captured", "DD", nil, []PageRun{}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, content := buildSnapBPF(t, t.TempDir(), tc.spec, tc.captured)
			if !reflect.DeepEqual(a.Ranges, tc.ranges) || a.Capture.FreePages != tc.free || a.Capture.OutsidePages != tc.outside {
				t.Fatalf("ranges %v free %d outside %d, want %v %d %d", a.Ranges, a.Capture.FreePages,
					a.Capture.OutsidePages, tc.ranges, tc.free, tc.outside)
			}
			b := readBack(t, a)
			if err := b.Verify(int64(len(content)), sha(content)); err != nil {
				t.Fatal(err)
			}
			if err := b.Verify(int64(len(content)), sha([]byte("other"))); !errors.Is(err, ErrMismatch) {
				t.Fatalf("verify against another memory: %v", err)
			}
			noTempFiles(t, a.Dir)
		})
	}
}

func TestSnapBPFReadersReject(t *testing.T) {
	a, _ := buildSnapBPF(t, t.TempDir(), "DDDDHHDD", []uint64{0, 1, 4, 6})
	path := filepath.Join(a.Dir, SnapBPFManifestFile)
	orig := mustRead(t, path)
	for name, edit := range map[string]func([]byte) []byte{
		"flipped byte": func(b []byte) []byte { b[len(b)/2] ^= 0x5a; return b },
		"truncated":    func(b []byte) []byte { return b[:len(b)/2] },
		"newer version": func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"format_version":1`), []byte(`"format_version":9`), 1)
		},
		"spaced": func(b []byte) []byte { return bytes.Replace(b, []byte(`,"`), []byte(`, "`), 1) },
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(path, edit(append([]byte(nil), orig...)), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := ReadSnapBPF(a.Dir); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	// Ranges that do not hold the kept pages are refused even when sealed.
	c := *a
	c.Ranges = []PageRun{{0, 2}}
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeSnapBPF(b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("inconsistent counts: %v", err)
	}
}

func TestDataRegions(t *testing.T) {
	dir := t.TempDir()
	mem := filepath.Join(dir, "memory")
	writeMem(t, mem, 1, "HHDDZHHHDH", 0)
	got, err := DataRegions(mem)
	if err != nil {
		t.Fatal(err)
	}
	// Written zeros are data to SEEK_DATA; holes are not.
	if want := []PageRun{{2, 3}, {8, 1}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("data regions %v, want %v", got, want)
	}
}

func FuzzDecodeSnapBPFManifest(f *testing.F) {
	a, _ := buildSnapBPF(f, f.TempDir(), "DDHHDDDD", []uint64{7, 0, 1, 2, 5})
	fuzzManifest(f, []*SnapBPFArtifact{a}, nil, func(*testing.T, *SnapBPFArtifact) {})
}
