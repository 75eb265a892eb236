package uffd

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Benchmarks: go test -run '^$' -bench . -benchtime 5x ./internal/uffd
// Each iteration maps a fresh 64 MiB region (setup not timed) and faults or
// prefetches all of it.

const benchPages = 16384 // 64 MiB

func BenchmarkServe(b *testing.B) {
	for _, c := range []struct {
		name    string
		workers int
		how     func(uint64) access
	}{
		{"load/1thread", 1, nil},
		{"load/4threads", 4, nil},
		{"store/1thread", 1, func(uint64) access { return writeAccess }},
		{"gup/1thread", 1, func(uint64) access { return gupAccess }},
	} {
		b.Run(c.name, func(b *testing.B) {
			mf := newMemFile(b, benchPages, benchPages, 30)
			var faults, served uint64
			var faultTime, elapsed time.Duration
			for b.Loop() {
				b.StopTimer()
				r := newTestRegion(b, benchPages, 0, false)
				s := newServer(b, r.Mapping, mf, Options{})
				stop := startServe(b, s)
				b.StartTimer()
				elapsed += touchPages(b, r, mf.want, allPages(benchPages), c.workers, c.how)
				b.StopTimer()
				stop()
				st := s.Stats()
				faults += st.Faults
				served += st.Served
				faultTime += st.FaultTime
				s.Close()
				r.Mapping.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(served)/elapsed.Seconds(), "pages/s")
			b.ReportMetric(float64(faultTime.Nanoseconds())/float64(max(faults, 1))/1e3, "µs/fault")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func BenchmarkPrefetch(b *testing.B) {
	mf := newMemFile(b, benchPages, benchPages, 31)
	for _, c := range []struct {
		name     string
		pages    []uint64
		buffered bool
	}{
		{"sorted", allPages(benchPages), false},
		{"shuffled", shuffled(allPages(benchPages), 32), false},
		{"sorted-buffered", allPages(benchPages), true},
	} {
		b.Run(c.name, func(b *testing.B) {
			wsFile := writeWS(b, "", mf, c.pages)
			var read, install time.Duration
			var copies uint64
			n := 0
			for b.Loop() {
				b.StopTimer()
				r := newTestRegion(b, benchPages, 0, false)
				s := newServer(b, r.Mapping, mf, Options{})
				if c.buffered {
					s.openFile = func(path string, flags int, perm uint32) (int, error) {
						return unix.Open(path, flags&^unix.O_DIRECT, perm)
					}
				}
				b.StartTimer()
				st, err := s.Prefetch(wsFile, c.pages)
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				if st.PrefetchPages != benchPages {
					b.Fatalf("installed %d", st.PrefetchPages)
				}
				read += st.PrefetchReadTime
				install += st.PrefetchInstallTime
				copies += st.PrefetchCopies
				n++
				s.Close()
				r.Mapping.Close()
				b.StartTimer()
			}
			mib := float64(benchPages*PageSize) / (1 << 20)
			b.ReportMetric(float64(read.Microseconds())/float64(n)/1e3, "read-ms")
			b.ReportMetric(float64(install.Microseconds())/float64(n)/1e3, "install-ms")
			b.ReportMetric(mib/(install.Seconds()/float64(n)), "install-MiB/s")
			b.ReportMetric(float64(copies)/float64(n), "copies")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// TestHugepageRegion: with MADV_HUGEPAGE on the registered mapping, missing
// faults still arrive per 4 KiB page (the kernel hands the fault to
// userfaultfd before allocating a huge page) and UFFDIO_COPY installs 4 KiB
// pages, so the region ends up without THP; everything must still match.
func TestHugepageRegion(t *testing.T) {
	const pages = 2048 // 8 MiB, at least two 2 MiB extents
	mf := newMemFile(t, pages, pages, 33)
	r := newTestRegion(t, pages, 0, true)
	s := newServer(t, r.Mapping, mf, Options{})
	stop := startServe(t, s)
	touchPages(t, r, mf.want, allPages(pages), 2, func(p uint64) access {
		if p%2 == 0 {
			return writeAccess
		}
		return readAccess
	})
	checkContents(t, r, mf.want)
	stop()
	st := s.Stats()
	thp := anonHugePagesKB(t, r.Addr)
	t.Logf("MADV_HUGEPAGE region: %d faults, %d served, AnonHugePages %s kB", st.Faults, st.Served, thp)
	if st.Served != pages {
		t.Errorf("served %d, want %d (one per 4 KiB page)", st.Served, pages)
	}
}

// anonHugePagesKB returns the AnonHugePages field of the smaps entry that
// starts at or contains addr.
func anonHugePagesKB(t *testing.T, addr uint64) string {
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return "?"
	}
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			lohi := strings.SplitN(f[0], "-", 2)
			lo, _ := strconv.ParseUint(lohi[0], 16, 64)
			hi, _ := strconv.ParseUint(lohi[1], 16, 64)
			in = addr >= lo && addr < hi
			continue
		}
		if in && strings.HasPrefix(line, "AnonHugePages:") {
			return strings.Fields(line)[1]
		}
	}
	return "?"
}
