package secrets

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBase64FormsMatchAnyEmbedding: whatever precedes and follows a value
// in an encoded text, the encoding contains one of its base64 forms.
func TestBase64FormsMatchAnyEmbedding(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 8; n < 40; n++ {
		value := make([]byte, n)
		for i := range value {
			value[i] = byte(32 + rng.IntN(95))
		}
		pats := Patterns("s", value)
		for pre := 0; pre < 7; pre++ {
			for post := 0; post < 4; post++ {
				in := append(append(randBytes(rng, pre), value...), randBytes(rng, post)...)
				for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding} {
					text := []byte(enc.EncodeToString(in))
					if f := NewScanner(pats).Bytes(text); f == nil || !strings.HasPrefix(f.Form, "base64") {
						t.Fatalf("value of %d bytes after %d and before %d bytes: not found in %s (%+v)", n, pre, post, text, f)
					}
				}
			}
		}
		for _, enc := range []string{hex.EncodeToString(value), strings.ToUpper(hex.EncodeToString(value))} {
			if f := NewScanner(pats).Bytes([]byte("xx" + enc + "yy")); f == nil || !strings.EqualFold(f.Form, "hex") {
				t.Fatalf("hex form not found: %+v", f)
			}
		}
	}
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func TestPythonStrForms(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  []byte
	}{
		{"ascii only value", nil},
		{"caf\u00e9-au-lait", []byte("caf\xe9-au-lait")},
		{"\u0100\u0101-wide", []byte{0x00, 0x01, 0x01, 0x01, '-', 0, 'w', 0, 'i', 0, 'd', 0, 'e', 0}},
		{"astral \U0001f600 value", nil},
	} {
		if got := pythonStr([]byte(tc.value)); !bytes.Equal(got, tc.want) {
			t.Errorf("pythonStr(%q) = %x, want %x", tc.value, got, tc.want)
		}
	}
}

// TestScannerFindsEveryOffset plants each pattern at every alignment in
// random data and compares with a naive search.
func TestScannerFindsEveryOffset(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var pats []Pattern
	for i := range 20 {
		pats = append(pats, Patterns("secret-"+string(rune('a'+i)), []byte(strings.Repeat(string(rune('A'+i)), 3)+"-value-"+hex.EncodeToString(randBytes(rng, 4))))...)
	}
	sc := NewScanner(pats)
	data := randBytes(rng, 1<<16)
	if f := sc.Bytes(data); f != nil {
		t.Fatalf("random data: false positive %+v", f)
	}
	for _, p := range pats {
		for off := 4096; off < 4100; off++ {
			buf := bytes.Clone(data)
			copy(buf[off:], p.Bytes)
			f := sc.Bytes(buf)
			if f == nil || f.Offset != int64(off) || f.Secret != p.Secret {
				t.Fatalf("%s (%s) at %d: found %+v", p.Secret, p.Form, off, f)
			}
		}
		// At the very start and the very end.
		for _, off := range []int{0, len(data) - len(p.Bytes)} {
			buf := bytes.Clone(data)
			copy(buf[off:], p.Bytes)
			if f := sc.Bytes(buf); f == nil || f.Offset != int64(off) {
				t.Fatalf("%s at %d: found %+v", p.Form, off, f)
			}
		}
	}
}

// TestFileScanAcrossChunksAndHoles writes sparse files with a value
// straddling the read chunks' boundary, after holes and at the end.
func TestFileScanAcrossChunksAndHoles(t *testing.T) {
	value := []byte("hunter2-but-longer")
	sc := NewScanner(Patterns("pw", value))
	var b64 []byte
	for _, p := range Patterns("pw", value) {
		if p.Form == "base64" && b64 == nil {
			b64 = p.Bytes
		}
	}
	for _, tc := range []struct {
		name string
		at   int64
		what []byte
	}{
		{"chunk boundary", scanChunk - 5, value},
		{"second chunk start", scanChunk, value},
		{"after a hole", 3*scanChunk + 4096 + 1, b64},
		{"file end", 5*scanChunk - int64(len(value)), value},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "memory")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(5 * scanChunk); err != nil {
				t.Fatal(err)
			}
			// Some data before, so there are extents and holes.
			if _, err := f.WriteAt(bytes.Repeat([]byte{0x5a}, 8192), 4096); err != nil {
				t.Fatal(err)
			}
			if err := sc.File(context.Background(), path, "memory"); err != nil {
				t.Fatalf("before planting: %v", err)
			}
			if _, err := f.WriteAt(tc.what, tc.at); err != nil {
				t.Fatal(err)
			}
			f.Close()
			err = sc.File(context.Background(), path, "memory")
			var found *Found
			if !errors.As(err, &found) || !errors.Is(err, ErrFound) || found.Offset != tc.at || found.File != "memory" {
				t.Fatalf("want found at %d, got %v", tc.at, err)
			}
			// The same with reads, as for a file that cannot be mapped.
			rf, _ := os.Open(path)
			defer rf.Close()
			if rerr := sc.read(context.Background(), rf, 5*scanChunk); !errors.As(rerr, &found) || found.Offset != tc.at {
				t.Fatalf("with reads: want found at %d, got %v", tc.at, rerr)
			}
			if strings.Contains(err.Error(), string(value)) || !strings.Contains(err.Error(), `"pw"`) {
				t.Errorf("message %q: should name the secret, never the value", err)
			}
		})
	}
}

func TestDirScanNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "strategies", "reap"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"state": "device state", "memory": "guest memory",
		"strategies/reap/ws": "working set with s3cr3t-value-x inside"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	err := NewScanner(Patterns("tok", []byte("s3cr3t-value-x"))).Dir(context.Background(), dir)
	var found *Found
	if !errors.As(err, &found) || found.File != filepath.Join("strategies", "reap", "ws") || found.Offset != 17 {
		t.Fatalf("got %v", err)
	}
	if err := NewScanner(nil).Dir(context.Background(), dir); err != nil {
		t.Fatalf("empty scanner: %v", err)
	}
}

func TestScanHonoursContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, bytes.Repeat([]byte{1}, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := NewScanner(Patterns("a", []byte("abcdefghij"))).File(ctx, path, "f"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled scan: %v", err)
	}
}

// FuzzScanner compares the scanner with bytes.Index on arbitrary data.
func FuzzScanner(f *testing.F) {
	f.Add([]byte("some text with hunter2-longer inside"), []byte("hunter2-longer"), uint8(3))
	f.Add(bytes.Repeat([]byte{0}, 64), []byte("\x00\x00\x00\x00\x00\x00\x00\x01"), uint8(0))
	f.Fuzz(func(t *testing.T, data, value []byte, skip uint8) {
		if len(value) < minPatternLen || len(value) > 64 {
			return
		}
		sc := NewScanner([]Pattern{{Secret: "v", Form: "raw", Bytes: value}})
		// Scanning from an aligned index: occurrences whose aligned window
		// is at or after it, those starting at from-3 or later.
		from := 4 * (int(skip) % 3)
		got := sc.scan(data, 0, from, len(data))
		want := -1
		for s := 0; s+len(value) <= len(data); s++ {
			if (s+3)&^3 >= from && bytes.Equal(data[s:s+len(value)], value) {
				want = s
				break
			}
		}
		switch {
		case want < 0 && got != nil:
			t.Fatalf("found %+v, naive search found nothing", got)
		case want >= 0 && got == nil:
			t.Fatalf("found nothing, want offset %d", want)
		case got != nil:
			// Occurrences sharing the first one's aligned window may be
			// reported instead of it.
			o := int(got.Offset)
			if !bytes.Equal(data[o:o+len(value)], value) || (o+3)&^3 != (want+3)&^3 {
				t.Fatalf("found %+v, want offset %d", got, want)
			}
		}
	})
}

// TestFileScanOfManyExtents: a file of many small extents (read together
// in batches) is searched whole, mapped and with reads.
func TestFileScanOfManyExtents(t *testing.T) {
	value := []byte("many-extents-secret")
	sc := NewScanner(Patterns("x", value))
	path := filepath.Join(t.TempDir(), "memory")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	const pages = 4096
	if err := f.Truncate(pages * 4096); err != nil {
		t.Fatal(err)
	}
	page := bytes.Repeat([]byte{0x11}, 4096)
	for p := int64(0); p < pages; p += 2 { // data, hole, data, hole...
		if _, err := f.WriteAt(page, p*4096); err != nil {
			t.Fatal(err)
		}
	}
	at := int64(3001*4096 - 7) // across a data page's end into the hole after it
	if _, err := f.WriteAt(value, at); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var found *Found
	if err := sc.File(context.Background(), path, "memory"); !errors.As(err, &found) || found.Offset != at {
		t.Fatalf("mapped: %v", err)
	}
	rf, _ := os.Open(path)
	defer rf.Close()
	if err := sc.read(context.Background(), rf, pages*4096); !errors.As(err, &found) || found.Offset != at {
		t.Fatalf("with reads: %v", err)
	}
}
