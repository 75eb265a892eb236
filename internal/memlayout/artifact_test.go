package memlayout

import (
	"bytes"
	"errors"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// buildFaaSnap writes a memory file from spec and its FaaSnap artifact in
// dir/art; it returns the artifact, the memory content and its path.
func buildFaaSnap(t testing.TB, dir, spec string, tail int, order []uint64, opts FaaSnapOptions) (*FaaSnapArtifact, []byte, string) {
	t.Helper()
	mem := filepath.Join(dir, "memory")
	content := writeMem(t, mem, 11, spec, tail)
	a, err := WriteFaaSnap(filepath.Join(dir, "art"), mem, sha(content), order, opts)
	if err != nil {
		t.Fatal(err)
	}
	return a, content, mem
}

func buildREAP(t testing.TB, dir, spec string, tail int, faulted []uint64) (*REAPArtifact, []byte, string) {
	t.Helper()
	mem := filepath.Join(dir, "memory")
	content := writeMem(t, mem, 12, spec, tail)
	a, err := WriteREAP(filepath.Join(dir, "art"), mem, sha(content), faulted)
	if err != nil {
		t.Fatal(err)
	}
	return a, content, mem
}

// checkLoadingSetFile proves that every page of loadingset.bin, read at its
// region's FileOff, equals the memory's page at that guest offset, and that
// every loading-set page (working set and non-zero) is stored.
func checkLoadingSetFile(t *testing.T, a *FaaSnapArtifact, content []byte, order []uint64) {
	t.Helper()
	ls := mustRead(t, a.LoadingSetPath())
	if len(ls)%ps != 0 || int64(len(ls)) != a.LoadingSetFile.Size || sha(ls) != a.LoadingSetFile.SHA256 {
		t.Fatalf("loadingset.bin is %d bytes, manifest %+v", len(ls), a.LoadingSetFile)
	}
	stored := map[uint64]bool{}
	for _, l := range a.LoadingRegions {
		for i := range l.Pages {
			off := l.FileOff + i*PageSize
			if got, want := ls[off:off+PageSize], pageOf(content, l.Start+i); !bytes.Equal(got, want) {
				t.Fatalf("loadingset.bin at %d is not guest page %d", off, l.Start+i)
			}
			stored[l.Start+i] = true
		}
	}
	nz := nonzeroOf(content)
	for _, p := range order {
		if FindRegion(nz, p) >= 0 && !stored[p] {
			t.Fatalf("loading-set page %d not stored", p)
		}
	}
}

// readBack reads the artifact a was written as and checks it reads back
// as a.
func readBack[T any, P manifest[T]](t *testing.T, a P) P {
	t.Helper()
	b, err := readManifest[T, P](a.header().Dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("read back\n%+v\nwrote\n%+v", b, a)
	}
	return b
}

func noTempFiles(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left", e.Name())
		}
	}
}

func TestFaaSnapRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	spec := randomSpec(rng, 700)
	perm := func(n int) []uint64 {
		var o []uint64
		for _, p := range rng.Perm(n) {
			if rng.IntN(3) > 0 {
				o = append(o, uint64(p))
			}
		}
		return o
	}
	for _, tc := range []struct {
		name  string
		spec  string
		tail  int
		order []uint64
		opts  FaaSnapOptions
	}{
		{"defaults", spec, 0, perm(700), FaaSnapOptions{}},
		{"small groups, no merging", spec, 0, perm(700), FaaSnapOptions{GroupSize: 7, MergeGap: -1}},
		{"big merge gap", spec, 0, perm(700), FaaSnapOptions{GroupSize: 3, MergeGap: 1000}},
		{"empty working set", spec, 0, nil, FaaSnapOptions{}},
		{"all-zero memory", "HHZZHZ", 0, []uint64{0, 1, 2, 3, 4, 5}, FaaSnapOptions{}},
		{"partial last page", "HDDZD", 1234, []uint64{4, 1, 3}, FaaSnapOptions{GroupSize: 1}},
		{"repeated pages", "DDDD", 0, []uint64{3, 3, 0, 3, 0}, FaaSnapOptions{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			a, content, _ := buildFaaSnap(t, dir, tc.spec, tc.tail, tc.order, tc.opts)
			if !reflect.DeepEqual(a.NonzeroRegions, append([]PageRun{}, nonzeroOf(content)...)) {
				t.Fatalf("non-zero regions %v, want %v", a.NonzeroRegions, nonzeroOf(content))
			}
			gs, gap := tc.opts.effective()
			if want := LoadingSet(tc.order, gs, nonzeroOf(content), gap); !reflect.DeepEqual(a.LoadingRegions, append([]LSRegion{}, want...)) {
				t.Fatalf("loading regions %v, want %v", a.LoadingRegions, want)
			}
			b := readBack(t, a)
			if err := b.Verify(int64(len(content)), sha(content), true); err != nil {
				t.Fatal(err)
			}
			checkLoadingSetFile(t, b, content, tc.order)
			noTempFiles(t, a.Dir)
		})
	}
}

func TestREAPRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    string
		tail    int
		faulted []uint64
		runs    []PageRun
	}{
		{"fault order kept", "DDDDDDDDDD", 0, []uint64{5, 6, 7, 2, 3, 9, 0}, []PageRun{{5, 3}, {2, 2}, {9, 1}, {0, 1}}},
		{"zero and hole pages stored", "HZDH", 0, []uint64{0, 1, 2, 3}, []PageRun{{0, 4}}},
		{"repeated faults stored once", "DDDD", 0, []uint64{2, 1, 2, 3, 1}, []PageRun{{2, 1}, {1, 1}, {3, 1}}},
		{"partial last page", "DDE", 99, []uint64{2, 0}, []PageRun{{2, 1}, {0, 1}}},
		{"nothing faulted", "DD", 0, nil, []PageRun{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			a, content, _ := buildREAP(t, dir, tc.spec, tc.tail, tc.faulted)
			if !reflect.DeepEqual(a.Pages, tc.runs) {
				t.Fatalf("runs %v, want %v", a.Pages, tc.runs)
			}
			b := readBack(t, a)
			if err := b.Verify(int64(len(content)), sha(content), true); err != nil {
				t.Fatal(err)
			}
			ws := mustRead(t, b.WorkingSetPath())
			order := b.PageOrder()
			if len(order) != 0 || len(tc.faulted) != 0 {
				if !reflect.DeepEqual(order, dedup(tc.faulted)) {
					t.Fatalf("page order %v", order)
				}
			}
			if len(ws) != len(order)*ps {
				t.Fatalf("ws.bin is %d bytes for %d pages", len(ws), len(order))
			}
			for i, p := range order {
				if !bytes.Equal(ws[i*ps:(i+1)*ps], pageOf(content, p)) {
					t.Fatalf("ws.bin page %d is not guest page %d", i, p)
				}
			}
			noTempFiles(t, a.Dir)
		})
	}
}

func TestRewriteReplaces(t *testing.T) {
	dir := t.TempDir()
	a, content, mem := buildFaaSnap(t, dir, "DDDDDDDD", 0, []uint64{1, 2}, FaaSnapOptions{})
	b, err := WriteFaaSnap(a.Dir, mem, "", []uint64{5, 6, 7}, FaaSnapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := ReadFaaSnap(a.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(b, c) || c.Memory.SHA256 != sha(content) {
		t.Fatalf("rewrite not read back")
	}
	checkLoadingSetFile(t, c, content, []uint64{5, 6, 7})
	noTempFiles(t, a.Dir)
}

func TestWriteRejects(t *testing.T) {
	dir := t.TempDir()
	mem := filepath.Join(dir, "memory")
	writeMem(t, mem, 1, "DDDD", 10) // 4 pages, the last partial
	other := sha([]byte("other"))
	for _, tc := range []struct {
		name  string
		write func(out string) error
		is    error
	}{
		{"faasnap page beyond memory", func(out string) error {
			_, err := WriteFaaSnap(out, mem, "", []uint64{0, 4}, FaaSnapOptions{})
			return err
		}, nil},
		{"reap page beyond memory", func(out string) error {
			_, err := WriteREAP(out, mem, "", []uint64{math.MaxUint64})
			return err
		}, nil},
		{"faasnap other memory digest", func(out string) error {
			_, err := WriteFaaSnap(out, mem, other, []uint64{0}, FaaSnapOptions{})
			return err
		}, ErrMismatch},
		{"reap other memory digest", func(out string) error {
			_, err := WriteREAP(out, mem, other, []uint64{0})
			return err
		}, ErrMismatch},
		{"faasnap freed page beyond memory", func(out string) error {
			_, err := WriteFaaSnap(out, mem, "", []uint64{0}, FaaSnapOptions{Freed: []uint64{9}})
			return err
		}, nil},
		{"faasnap bad digest", func(out string) error {
			_, err := WriteFaaSnap(out, mem, "xyz", nil, FaaSnapOptions{})
			return err
		}, nil},
		{"faasnap missing memory", func(out string) error {
			_, err := WriteFaaSnap(out, mem+"-none", "", nil, FaaSnapOptions{})
			return err
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			err := tc.write(out)
			if err == nil || tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
			ents, _ := os.ReadDir(out)
			if len(ents) != 0 {
				t.Errorf("%d files left in %s", len(ents), out)
			}
		})
	}
}

// corruptions of a written artifact directory that its reader must refuse.
type corruption struct {
	name string
	do   func(t *testing.T, dir string)
	is   error
}

func fileCorruptions(manifest, data string) []corruption {
	edit := func(name string, f func([]byte) []byte) func(*testing.T, string) {
		return func(t *testing.T, dir string) {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, f(mustRead(t, p)), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	replace := func(old, new string) func([]byte) []byte {
		return func(b []byte) []byte {
			if !bytes.Contains(b, []byte(old)) {
				panic("no " + old + " in " + string(b))
			}
			return bytes.Replace(b, []byte(old), []byte(new), 1)
		}
	}
	return []corruption{
		{"truncated data file", edit(data, func(b []byte) []byte { return b[:len(b)-ps] }), ErrCorrupt},
		{"data file one byte short", edit(data, func(b []byte) []byte { return b[:len(b)-1] }), ErrCorrupt},
		{"data file one byte long", edit(data, func(b []byte) []byte { return append(b, 0) }), ErrCorrupt},
		{"missing data file", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, data)) }, ErrCorrupt},
		{"newer version", edit(manifest, replace(`"format_version":1`, `"format_version":2`)), ErrIncompatible},
		{"newer version with new fields", edit(manifest, replace(`"format_version":1`, `"format_version":3,"hugepages":true`)), ErrIncompatible},
		{"version 0", edit(manifest, replace(`"format_version":1`, `"format_version":0`)), ErrCorrupt},
		{"other page size", edit(manifest, replace(`"page_size":4096`, `"page_size":16384`)), ErrIncompatible},
		{"other magic", edit(manifest, replace(`"magic":"thaw-`, `"magic":"thaw-x`)), ErrCorrupt},
		{"unknown field", edit(manifest, replace(`"magic":`, `"extra":1,"magic":`)), ErrCorrupt},
		{"trailing data", edit(manifest, func(b []byte) []byte { return append(b, "{}"...) }), ErrCorrupt},
		{"empty manifest", edit(manifest, func([]byte) []byte { return nil }), ErrCorrupt},
	}
}

func TestReadersReject(t *testing.T) {
	order := []uint64{3, 9, 4, 20, 21, 0}
	kinds := []struct {
		name, manifest, data string
		build                func(t *testing.T, dir string) string
		read                 func(dir string) error
	}{
		{"faasnap", FaaSnapManifestFile, LoadingSetDataFile, func(t *testing.T, dir string) string {
			a, _, _ := buildFaaSnap(t, dir, "DDDDHHZDDDDDDDDDDDDDDDDDD", 0, order, FaaSnapOptions{GroupSize: 2, MergeGap: 4})
			return a.Dir
		}, func(dir string) error { _, err := ReadFaaSnap(dir); return err }},
		{"reap", REAPManifestFile, WorkingSetDataFile, func(t *testing.T, dir string) string {
			a, _, _ := buildREAP(t, dir, "DDDDHHZDDDDDDDDDDDDDDDDDD", 0, order)
			return a.Dir
		}, func(dir string) error { _, err := ReadREAP(dir); return err }},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			for _, c := range fileCorruptions(k.manifest, k.data) {
				t.Run(c.name, func(t *testing.T) {
					dir := k.build(t, t.TempDir())
					if err := k.read(dir); err != nil {
						t.Fatalf("intact artifact refused: %v", err)
					}
					c.do(t, dir)
					err := k.read(dir)
					if !errors.Is(err, c.is) {
						t.Fatalf("err = %v, want %v", err, c.is)
					}
					if !strings.Contains(err.Error(), dir) {
						t.Errorf("error %q does not name the file", err)
					}
				})
			}
			t.Run("missing manifest", func(t *testing.T) {
				dir := k.build(t, t.TempDir())
				os.Remove(filepath.Join(dir, k.manifest))
				if err := k.read(dir); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("err = %v", err)
				}
			})
			// Flipping any single byte of the manifest is caught.
			t.Run("every flipped manifest byte", func(t *testing.T) {
				dir := k.build(t, t.TempDir())
				p := filepath.Join(dir, k.manifest)
				orig := mustRead(t, p)
				for i := range orig {
					for _, bit := range []byte{0x01, 0x20, 0x80} {
						b := bytes.Clone(orig)
						b[i] ^= bit
						if err := os.WriteFile(p, b, 0o600); err != nil {
							t.Fatal(err)
						}
						if err := k.read(dir); err == nil {
							t.Fatalf("manifest with byte %d (%q) ^ %#x accepted", i, orig[i], bit)
						}
					}
				}
			})
		})
	}
}

func TestVerify(t *testing.T) {
	dir := t.TempDir()
	a, content, _ := buildFaaSnap(t, dir, "DDDDDDDD", 0, []uint64{1, 2, 6}, FaaSnapOptions{})
	r, rcontent, _ := buildREAP(t, t.TempDir(), "DDDDDDDD", 0, []uint64{1, 2, 6})
	size, sum := int64(len(content)), sha(content)
	rsize, rsum := int64(len(rcontent)), sha(rcontent)
	for _, tc := range []struct {
		name   string
		verify func(full bool) error
		want   error
	}{
		{"faasnap ok", func(full bool) error { return a.Verify(size, sum, full) }, nil},
		{"faasnap other digest", func(full bool) error { return a.Verify(size, sha([]byte("x")), full) }, ErrMismatch},
		{"faasnap other size", func(full bool) error { return a.Verify(size+PageSizeInt, sum, full) }, ErrMismatch},
		{"reap ok", func(full bool) error { return r.Verify(rsize, rsum, full) }, nil},
		{"reap other digest", func(full bool) error { return r.Verify(rsize, sum, full) }, ErrMismatch},
	} {
		for _, full := range []bool{false, true} {
			if err := tc.verify(full); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Errorf("%s full=%v: %v, want %v", tc.name, full, err, tc.want)
			}
		}
	}
	// Same size, one flipped bit: only a full verify sees it.
	for _, f := range []struct {
		path   string
		verify func(full bool) error
	}{
		{a.LoadingSetPath(), func(full bool) error { return a.Verify(size, sum, full) }},
		{r.WorkingSetPath(), func(full bool) error { return r.Verify(rsize, rsum, full) }},
	} {
		b := mustRead(t, f.path)
		b[len(b)/2] ^= 4
		if err := os.WriteFile(f.path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := f.verify(false); err != nil {
			t.Errorf("%s: quick verify: %v", f.path, err)
		}
		if err := f.verify(true); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: full verify: %v", f.path, err)
		}
	}
}

const PageSizeInt = int64(PageSize)

// TestDecodeFaaSnapStructure re-seals manifests (valid checksum) with one
// structural defect each and expects DecodeFaaSnap to refuse them.
func TestDecodeFaaSnapStructure(t *testing.T) {
	dir := t.TempDir()
	// Pages: 0..3 data, 4..5 holes, 6 zero, 7..24 data.
	orig, _, _ := buildFaaSnap(t, dir, "DDDDHHZDDDDDDDDDDDDDDDDDD", 0, []uint64{3, 9, 4, 20, 21, 0, 5}, FaaSnapOptions{GroupSize: 2, MergeGap: 4})
	if len(orig.LoadingRegions) < 3 || len(orig.NonzeroRegions) != 2 {
		t.Fatalf("unexpected fixture %+v", orig)
	}
	for _, tc := range []struct {
		name string
		mut  func(a *FaaSnapArtifact)
	}{
		{"memory size 0", func(a *FaaSnapArtifact) { a.Memory.Size = 0 }},
		{"memory digest not hex", func(a *FaaSnapArtifact) { a.Memory.SHA256 = strings.ToUpper(a.Memory.SHA256) }},
		{"group size 0", func(a *FaaSnapArtifact) { a.GroupSize = 0 }},
		{"empty non-zero region", func(a *FaaSnapArtifact) { a.NonzeroRegions[0].Pages = 0 }},
		{"non-zero region beyond memory", func(a *FaaSnapArtifact) { a.NonzeroRegions[1].Pages++ }},
		{"non-zero region overflows", func(a *FaaSnapArtifact) { a.NonzeroRegions[1] = PageRun{math.MaxUint64, 2} }},
		{"non-zero regions overlap", func(a *FaaSnapArtifact) { a.NonzeroRegions[0].Pages = 8 }},
		{"non-zero regions adjacent", func(a *FaaSnapArtifact) { a.NonzeroRegions[0].Pages = 7 }},
		{"non-zero regions unsorted", func(a *FaaSnapArtifact) {
			a.NonzeroRegions[0], a.NonzeroRegions[1] = a.NonzeroRegions[1], a.NonzeroRegions[0]
		}},
		{"loading region file offset gap", func(a *FaaSnapArtifact) { a.LoadingRegions[1].FileOff += PageSize }},
		{"loading region file offset unaligned", func(a *FaaSnapArtifact) { a.LoadingRegions[0].FileOff = 1 }},
		{"loading regions out of order", func(a *FaaSnapArtifact) {
			l := a.LoadingRegions
			l[0], l[1] = l[1], l[0]
			l[0].FileOff, l[1].FileOff = 0, l[0].Pages*PageSize
		}},
		{"loading region starts on a zero page", func(a *FaaSnapArtifact) {
			for i, l := range a.LoadingRegions {
				if l.Start == 0 { // 0..3: move to 4..
					a.LoadingRegions[i].Start = 4
				}
			}
		}},
		{"loading region beyond memory", func(a *FaaSnapArtifact) {
			last := &a.LoadingRegions[len(a.LoadingRegions)-1]
			last.Pages += 100
			a.LoadingSetFile.Size += 100 * PageSizeInt
			a.Stats.GapPages += 100
		}},
		{"loading region group beyond working set", func(a *FaaSnapArtifact) {
			a.LoadingRegions[len(a.LoadingRegions)-1].Group = 1000
		}},
		{"loading regions overlap", func(a *FaaSnapArtifact) {
			a.LoadingRegions = append(a.LoadingRegions, a.LoadingRegions[len(a.LoadingRegions)-1])
			l := &a.LoadingRegions[len(a.LoadingRegions)-1]
			l.Group = a.LoadingRegions[len(a.LoadingRegions)-2].Group + 1
			l.FileOff = uint64(a.LoadingSetFile.Size)
			a.LoadingSetFile.Size += int64(l.Pages * PageSize)
			a.Stats.GapPages += l.Pages
			a.Stats.RegionsAfterMerge++
			a.Stats.RegionsBeforeMerge++
			a.Stats.WorkingSetPages += 10
			a.Stats.ZeroPagesInWorkingSet += 10
		}},
		{"loading-set file size", func(a *FaaSnapArtifact) { a.LoadingSetFile.Size += PageSizeInt }},
		{"loading-set file negative size", func(a *FaaSnapArtifact) { a.LoadingSetFile.Size = -1 }},
		{"loading-set digest", func(a *FaaSnapArtifact) { a.LoadingSetFile.SHA256 = "" }},
		{"stats working set", func(a *FaaSnapArtifact) { a.Stats.WorkingSetPages++ }},
		{"stats loading set", func(a *FaaSnapArtifact) { a.Stats.LoadingSetPages++; a.Stats.ZeroPagesInWorkingSet-- }},
		{"stats gap pages", func(a *FaaSnapArtifact) { a.Stats.GapPages++ }},
		{"stats regions after merge", func(a *FaaSnapArtifact) { a.Stats.RegionsAfterMerge++ }},
		{"stats regions before merge", func(a *FaaSnapArtifact) { a.Stats.RegionsBeforeMerge = 1000 }},
	} {
		t.Run(tc.name, func(t *testing.T) { rejectsMutated(t, orig, DecodeFaaSnap, tc.mut) })
	}
}

// rejectsMutated fails t unless decode refuses as corrupt orig changed by
// mut (on a deep copy: orig decoded from its encoding).
func rejectsMutated[A interface{ Encode() ([]byte, error) }](t *testing.T, orig A, decode func([]byte) (A, error), mut func(A)) {
	t.Helper()
	b, err := orig.Encode()
	if err != nil {
		t.Fatal(err)
	}
	a, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	mut(a)
	if b, err = a.Encode(); err != nil {
		t.Fatal(err)
	}
	_, err = decode(b)
	t.Log(err)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v\n%s", err, b)
	}
}

func TestDecodeREAPStructure(t *testing.T) {
	orig, _, _ := buildREAP(t, t.TempDir(), "DDDDDDDDDD", 0, []uint64{5, 6, 1, 2, 9})
	for _, tc := range []struct {
		name string
		mut  func(a *REAPArtifact)
	}{
		{"memory size negative", func(a *REAPArtifact) { a.Memory.Size = -4096 }},
		{"empty run", func(a *REAPArtifact) { a.Pages[0].Pages = 0 }},
		{"run beyond memory", func(a *REAPArtifact) { a.Pages[2].Pages = 2; a.WSFile.Size += PageSizeInt }},
		{"run overflows", func(a *REAPArtifact) { a.Pages[2] = PageRun{math.MaxUint64, 1} }},
		{"page twice", func(a *REAPArtifact) { a.Pages[1] = PageRun{5, 2} }},
		{"run continues the previous", func(a *REAPArtifact) { a.Pages[1] = PageRun{7, 2} }},
		{"ws file size", func(a *REAPArtifact) { a.WSFile.Size -= PageSizeInt }},
		{"ws digest", func(a *REAPArtifact) { a.WSFile.SHA256 = "00" }},
	} {
		t.Run(tc.name, func(t *testing.T) { rejectsMutated(t, orig, DecodeREAP, tc.mut) })
	}
}

// TestWriteFaaSnapTechniquesOff builds the ablation's artifacts: freed-page
// filtering off keeps freed (zero) working-set pages in the loading set and
// maps them from the memory file; merging off keeps every run its own region.
func TestWriteFaaSnapTechniquesOff(t *testing.T) {
	const spec = "DDZZDDDHHHDDZD" // pages 2,3 zero (freed), 7-9 holes
	order := []uint64{0, 1, 2, 3, 4, 5, 6, 10, 11, 12, 13}
	full, content, _ := buildFaaSnap(t, t.TempDir(), spec, 0, order, FaaSnapOptions{})
	if got := full.Stats.LoadingSetPages; got != 8 {
		t.Fatalf("full: %d loading-set pages, want 8", got)
	}
	if len(full.LoadingRegions) != 1 || full.LoadingRegions[0] != (LSRegion{Start: 0, Pages: 14}) {
		t.Fatalf("full: regions %+v, want one merged region over all 14 pages", full.LoadingRegions)
	}

	dir := t.TempDir()
	freed, _, _ := buildFaaSnap(t, dir, spec, 0, order, FaaSnapOptions{Freed: []uint64{3, 2, 3}, MergeGap: -1})
	checkLoadingSetFile(t, freed, content, order)
	if got := freed.Stats.LoadingSetPages; got != 10 {
		t.Fatalf("freed off: %d loading-set pages, want 10 (the freed pages kept)", got)
	}
	want := []PageRun{{0, 7}, {10, 2}, {13, 1}}
	if !reflect.DeepEqual(freed.NonzeroRegions, want) {
		t.Fatalf("freed off: non-zero regions %+v", freed.NonzeroRegions)
	}
	var got []PageRun
	for _, l := range freed.LoadingRegions {
		got = append(got, l.PageRun())
	}
	if !reflect.DeepEqual(got, want) || freed.Stats.GapPages != 0 {
		t.Fatalf("merge off: regions %+v (gap pages %d), want %+v unmerged", got, freed.Stats.GapPages, want)
	}
	readBack(t, freed)
	r, err := ReadFaaSnap(freed.Dir)
	if err != nil || r.Verify(int64(len(content)), sha(content), true) != nil {
		t.Fatalf("freed-off artifact does not verify: %v", err)
	}
}
