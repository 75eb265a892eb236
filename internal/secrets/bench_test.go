package secrets

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's CPU time (user and system): on a shared
// machine it says more than the wall time what the scan costs.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchScanner is a scanner for n secrets of 24 characters, every form.
func benchScanner(n int) *Scanner {
	rng := rand.New(rand.NewPCG(5, 6))
	var pats []Pattern
	for i := range n {
		v := make([]byte, 24)
		for j := range v {
			v[j] = byte('!' + rng.IntN(94))
		}
		pats = append(pats, Patterns(fmt.Sprintf("s%d", i), v)...)
	}
	return NewScanner(pats)
}

// memoryLike fills b as guest memory looks: pages of zeros, of text and
// of random bytes (pointers, compressed data).
func memoryLike(b []byte) {
	rng := rand.New(rand.NewPCG(7, 8))
	text := []byte("def handle(event):\n    return {'status': 'ok', 'items': [1, 2, 3]}\n/usr/lib/python3/dist-packages ")
	for p := 0; p < len(b); p += 4096 {
		page := b[p:min(p+4096, len(b))]
		switch rng.IntN(3) {
		case 0: // zeros
		case 1:
			for i := range page {
				page[i] = text[(p+i)%len(text)]
			}
		default:
			for i := range page {
				page[i] = byte(rng.Uint32())
			}
		}
	}
}

// BenchmarkScanFile is the snapshot scan's speed on a 512 MiB memory file
// with no hole (the worst case: a guest that touched all its memory), in
// the page cache, for 16 secrets (144 patterns); docs/bench/secrets.md.
func BenchmarkScanFile(b *testing.B) {
	const size = 512 << 20
	path := filepath.Join(b.TempDir(), "memory")
	data := make([]byte, size)
	memoryLike(data)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
	data = nil
	for _, n := range []int{1, 16, 256} {
		sc := benchScanner(n)
		b.Run(fmt.Sprintf("secrets=%d", n), func(b *testing.B) { benchScanFile(b, sc, path, size) })
	}
}

// BenchmarkScanBytes is the scan's speed on memory, without the reads.
func BenchmarkScanBytes(b *testing.B) {
	data := make([]byte, 64<<20)
	memoryLike(data)
	sc := benchScanner(16)
	b.SetBytes(int64(len(data)))
	cpu0 := cpuTime()
	defer func() { b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op") }()
	for b.Loop() {
		if f := sc.Bytes(data); f != nil {
			b.Fatal(f)
		}
	}
}

// BenchmarkScanSparseFile is the scan of a 512 MiB memory file as a
// snapshot writes it: a fifth of its pages hold data, scattered one to a
// few pages at a time (thousands of extents), the rest are holes.
func BenchmarkScanSparseFile(b *testing.B) {
	const size = 512 << 20
	path := filepath.Join(b.TempDir(), "memory")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	page := make([]byte, 4096)
	var data int64
	for off := int64(0); off < size; off += 4096 * int64(1+rng.IntN(9)) {
		for n := 1 + rng.IntN(3); n > 0 && off < size; n-- {
			memoryLike(page)
			page[0] = 1 // never a zero page
			if _, err := f.WriteAt(page, off); err != nil {
				b.Fatal(err)
			}
			data += 4096
			off += 4096
		}
	}
	f.Close()
	sc := benchScanner(16)
	b.ReportMetric(float64(data>>20), "data-MiB")
	benchScanFile(b, sc, path, size)
}

// benchScanFile scans the size-byte file at path with sc, b.N times, and
// reports the CPU time a scan takes.
func benchScanFile(b *testing.B, sc *Scanner, path string, size int64) {
	b.SetBytes(size)
	cpu0 := cpuTime()
	for b.Loop() {
		if err := sc.File(context.Background(), path, "memory"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
}

// BenchmarkScanFileAt scans the file THAW_SCAN_FILE names (a real
// snapshot's memory file) for 16 secrets; skipped without it.
func BenchmarkScanFileAt(b *testing.B) {
	path := os.Getenv("THAW_SCAN_FILE")
	if path == "" {
		b.Skip("THAW_SCAN_FILE is not set: give a snapshot's memory file")
	}
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	sc := benchScanner(16)
	b.SetBytes(fi.Size())
	cpu0 := cpuTime()
	for b.Loop() {
		if err := sc.File(context.Background(), path, "memory"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
}

// Bytes looks for every pattern in b; the first occurrence, or nil.
func (sc *Scanner) Bytes(b []byte) *Found { return sc.scan(b, 0, 0, len(b)) }
