package pagecache

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
)

func TestFillEvictResident(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	data := make([]byte, 4<<20)
	rand.Read(data)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	// 4 MiB of data, a 4 MiB hole, 4 MiB of data.
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 8<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()

	if err := Evict(path); err != nil {
		t.Fatal(err)
	}
	res, pages, err := Resident(path)
	if err != nil {
		t.Fatal(err)
	}
	if pages != 3*1024 {
		t.Fatalf("pages = %d", pages)
	}
	if res > pages/4 { // eviction is advisory, but a clean file of ours drops
		t.Fatalf("%d of %d pages resident after Evict", res, pages)
	}
	n, err := Fill(path)
	if err != nil {
		t.Fatal(err)
	}
	if n != 8<<20 {
		t.Fatalf("Fill read %d bytes, want the 8 MiB of data (holes skipped)", n)
	}
	if res, _, _ = Resident(path); res < 2*1024 {
		t.Fatalf("only %d pages resident after Fill", res)
	}
	if err := EvictAll(path, filepath.Join(t.TempDir(), "missing")); err != nil {
		t.Fatalf("EvictAll with a missing file: %v", err)
	}
}

func TestMincoreRejectsShortVector(t *testing.T) {
	b := make([]byte, 3*4096)
	if err := Mincore(b, make([]byte, 2)); err == nil {
		t.Fatal("short vector accepted")
	}
}
