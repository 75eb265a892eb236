package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The volume outlives --timeout (a file system is mounted on it for hours)
// and goes away cleanly on a signal (here: the context's cancellation).
func TestRemoteDiskServesBeyondTimeoutUntilSignalled(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	dir := t.TempDir()
	backing, mnt, settings := filepath.Join(dir, "volume"), filepath.Join(dir, "mnt"), filepath.Join(dir, "storage.json")
	if err := os.WriteFile(backing, bytes.Repeat([]byte{7}, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stderr bytes.Buffer
	done := make(chan int)
	go func() {
		done <- execute(ctx, []string{"--timeout", "1s", "bench", "remote-disk", mnt, "--backing", backing,
			"--latency", "100us", "--settings", settings}, strings.NewReader(""), &bytes.Buffer{}, &stderr)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(settings); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("not mounted: %s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // past --timeout
	b, err := os.ReadFile(filepath.Join(mnt, "disk.img"))
	if err != nil || len(b) != 1<<20 || b[12345] != 7 {
		cancel()
		t.Fatalf("after --timeout: read %d bytes, %v", len(b), err)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
	case <-time.After(40 * time.Second):
		t.Fatal("did not stop")
	}
	if !strings.Contains(stderr.String(), "served") {
		t.Errorf("no summary: %s", stderr.String())
	}
	if m, _ := os.ReadFile("/proc/mounts"); strings.Contains(string(m), mnt) {
		t.Errorf("%s still mounted", mnt)
	}
}
