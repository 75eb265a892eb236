package memlayout

import (
	"crypto/sha256"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/snapshot"
)

func TestZeroScan(t *testing.T) {
	dir := t.TempDir()
	holes := holesSupported(t, dir)
	big := strings.Repeat("H", 300) + "DDZ" + strings.Repeat("D", 300) + strings.Repeat("H", 100) + "E"
	for _, tc := range []struct {
		name      string
		spec      string
		tail      int
		want      []PageRun
		holePages uint64 // when the file system reports holes
	}{
		{"empty", "", 0, nil, 0},
		{"all holes", "HHHH", 0, nil, 4},
		{"explicit zeros", "ZZZ", 0, nil, 0},
		{"one data page", "D", 0, []PageRun{{0, 1}}, 0},
		{"mixed", "DDZHDEFZH", 0, []PageRun{{0, 2}, {4, 3}}, 2},
		{"last byte of a page", "ZZEZ", 0, []PageRun{{2, 1}}, 0},
		{"first byte of a page", "HHFH", 0, []PageRun{{2, 1}}, 3},
		{"hole then data", "HHHHDD", 0, []PageRun{{4, 2}}, 4},
		{"partial last page non-zero", "HDD", 100, []PageRun{{1, 2}}, 1},
		{"partial last page zero", "DDZ", 1, []PageRun{{0, 2}}, 0},
		{"partial last page hole", "DDH", 4095, []PageRun{{0, 2}}, 1},
		{"partial only page", "E", 7, []PageRun{{0, 1}}, 0},
		{"partial only page zero", "Z", 7, nil, 0},
		{"crosses 1 MiB chunks", big, 0, []PageRun{{300, 2}, {303, 300}, {703, 1}}, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			content := writeMem(t, path, 1, tc.spec, tc.tail)
			got, st, err := ZeroScan(path)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("nonzero = %v, want %v", got, tc.want)
			}
			if ref := nonzeroOf(content); !reflect.DeepEqual(got, ref) {
				t.Fatalf("nonzero = %v, reference %v", got, ref)
			}
			pages := PagesOf(int64(len(content)))
			if st.Size != int64(len(content)) || st.Pages != pages || st.NonzeroPages != CountPages(tc.want) ||
				st.ZeroPages != pages-CountPages(tc.want) || st.Regions != len(tc.want) {
				t.Errorf("stats %+v", st)
			}
			if st.ReadBytes > st.Size || st.HolePages > st.ZeroPages {
				t.Errorf("stats %+v", st)
			}
			if holes && st.HolePages != tc.holePages {
				t.Errorf("hole pages %d, want %d", st.HolePages, tc.holePages)
			}
			if holes && st.ReadBytes != st.Size-int64(min(tc.holePages*PageSize, uint64(st.Size))) && tc.tail == 0 {
				t.Errorf("read %d bytes of %d with %d hole pages", st.ReadBytes, st.Size, tc.holePages)
			}
		})
	}
}

// TestZeroScanRandom compares ZeroScan with the reference on random files,
// and the digest scanFile computes on the way with snapshot.HashFile.
func TestZeroScanRandom(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 20 {
		path := filepath.Join(dir, "mem"+string(rune('a'+i)))
		tail := 0
		if i%3 == 0 {
			tail = 1 + rng.IntN(ps-1)
		}
		content := writeMem(t, path, uint64(i), randomSpec(rng, 1+rng.IntN(800)), tail)
		h := sha256.New()
		got, _, err := scanFile(path, h)
		if err != nil {
			t.Fatal(err)
		}
		if want := nonzeroOf(content); !reflect.DeepEqual(got, want) {
			t.Fatalf("file %d: nonzero = %v, want %v", i, got, want)
		}
		fi, err := snapshot.HashFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if hexSum(h) != fi.SHA256 || fi.SHA256 != sha(content) {
			t.Fatalf("file %d: digest %s, HashFile %s", i, hexSum(h), fi.SHA256)
		}
	}
}

func TestZeroScanErrors(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := ZeroScan(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("missing file: %v", err)
	}
	if _, _, err := ZeroScan(dir); err == nil {
		t.Errorf("directory accepted")
	}
}

func BenchmarkZeroScan512MiB(b *testing.B) {
	path := filepath.Join(b.TempDir(), "mem")
	rng := rand.New(rand.NewPCG(1, 1))
	writeMem(b, path, 1, randomSpec(rng, 512<<20/ps), 0)
	b.SetBytes(512 << 20)
	for b.Loop() {
		if _, _, err := ZeroScan(path); err != nil {
			b.Fatal(err)
		}
	}
}
