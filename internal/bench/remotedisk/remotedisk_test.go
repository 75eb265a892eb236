package remotedisk

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestValidateReportsEveryProblem(t *testing.T) {
	err := Config{Latency: -time.Millisecond, IOPS: -1, BandwidthMBps: -2}.Validate()
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, want := range []string{"latency", "iops", "bandwidth"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if err := (Config{Latency: 500 * time.Microsecond, IOPS: 16000, BandwidthMBps: 1000}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigJSONInMicroseconds(t *testing.T) {
	c := Config{Latency: 750 * time.Microsecond, IOPS: 16000, BandwidthMBps: 1000}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"latency_us":750,"iops_cap":16000,"bandwidth_mbps_cap":1000}` {
		t.Fatalf("json %s", b)
	}
	var back Config
	if err := json.Unmarshal(b, &back); err != nil || back != c {
		t.Fatalf("round trip %+v, %v", back, err)
	}
}

func TestServeRefusesBadBacking(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, backing := range []string{filepath.Join(dir, "missing"), empty, dir} {
		if _, err := Serve(filepath.Join(dir, "mnt"), backing, Config{}); err == nil {
			t.Errorf("backing %s accepted", backing)
		}
	}
	if _, err := Serve(dir, empty, Config{Latency: 2 * time.Second}); err == nil {
		t.Error("latency of 2s accepted")
	}
}

// serve mounts a 4 MiB volume with known contents; it needs root and /dev/fuse.
func serve(t *testing.T, cfg Config) (*Server, []byte) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	dir := t.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 4<<20/16)
	backing := filepath.Join(dir, "volume")
	if err := os.WriteFile(backing, data, 0o600); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := Serve(mnt, backing, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	return srv, data
}

func TestReadsWaitTheLatencyAndReturnTheBackingBytes(t *testing.T) {
	const latency = 3 * time.Millisecond
	srv, data := serve(t, Config{Latency: latency})
	f, err := os.Open(srv.Image())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for i, off := range []int64{0, 1 << 20, 4<<20 - 4096, 8192} {
		start := time.Now()
		if _, err := f.ReadAt(buf, off); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < latency {
			t.Errorf("read %d took %s, less than the latency %s (served from a cache?)", i, took, latency)
		}
		if !bytes.Equal(buf, data[off:off+4096]) {
			t.Fatalf("read at %d: wrong bytes", off)
		}
	}
	if s := srv.Stats(); s.Reads < 4 || s.ReadBytes < 4*4096 {
		t.Fatalf("stats %+v", s)
	}
}

func TestIOPSCapSpacesRequests(t *testing.T) {
	// 200 IOPS with a burst of one: 20 reads take at least 19 * 5 ms.
	srv, _ := serve(t, Config{IOPS: 200})
	f, err := os.Open(srv.Image())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	start := time.Now()
	for i := range 20 {
		if _, err := f.ReadAt(buf, int64(i)*4096); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took < 19*5*time.Millisecond {
		t.Fatalf("20 reads at 200 IOPS took %s", took)
	}
}

func TestWritesLandInTheBackingFileAndTheSizeIsFixed(t *testing.T) {
	srv, _ := serve(t, Config{Latency: time.Millisecond})
	f, err := os.OpenFile(srv.Image(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("remote"), 100); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 6)
	if _, err := f.ReadAt(got, 100); err != nil || string(got) != "remote" {
		t.Fatalf("read back %q, %v", got, err)
	}
	if _, err := f.WriteAt([]byte("x"), 4<<20); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("write past the end: %v, want ENOSPC", err)
	}
	if err := f.Truncate(1 << 20); !errors.Is(err, syscall.EPERM) {
		t.Errorf("truncate: %v, want EPERM", err)
	}
	if st, err := f.Stat(); err != nil || st.Size() != 4<<20 {
		t.Errorf("size after refused truncate: %v, %v", st, err)
	}
}
