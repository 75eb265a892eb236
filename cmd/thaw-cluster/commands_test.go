package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestKillRefusesBadInput: kill takes a node name, reads its pid file,
// and refuses anything else without signalling anyone.
func TestKillRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "node-1", "run"), 0o700)
	os.WriteFile(filepath.Join(dir, "node-1", "run", "thawd.pid"), []byte("1\n"), 0o600)
	os.MkdirAll(filepath.Join(dir, "node-2", "run"), 0o700)
	os.WriteFile(filepath.Join(dir, "node-2", "run", "thawd.pid"), []byte("zz\n"), 0o600)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"kill", "--dir", dir, "../etc"}, "want a node name"},
		{[]string{"kill", "--dir", dir, "node-9"}, "not running"},
		{[]string{"kill", "--dir", dir, "node-1"}, "not a pid"}, // never init
		{[]string{"kill", "--dir", dir, "node-2"}, "not a pid"},
		{[]string{"kill", "node-1"}, "dir"},
		{[]string{"up"}, "--dir is required"},
		{[]string{"up", "--dir", dir, "--nodes", "0", "--thawd", "/bin/true", "--image", dir}, "want 1 to 200"},
		{[]string{"up", "--dir", dir, "--thawd", "/bin/true", "--image", dir, "--minio", dir, "--store-rtt", "-1ms", "--store-rate", "-5", "--chunk-size", "1000"},
			"not an executable MinIO"},
		{[]string{"up", "--dir", dir, "--thawd", "/bin/true", "--image", dir, "--minio", "/bin/true", "--store-rtt", "-1ms"}, "round trip -1ms"},
		{[]string{"up", "--dir", dir, "--thawd", "/bin/true", "--image", dir, "--minio", "/bin/true", "--store-rate", "-5"}, "rate -5"},
		{[]string{"up", "--dir", dir, "--thawd", "/bin/true", "--image", dir, "--minio", "/bin/true", "--chunk-size", "1000"}, "chunk_size 1000"},
	} {
		var stderr bytes.Buffer
		if code := run(context.Background(), c.args, &bytes.Buffer{}, &stderr); code == 0 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, %q; want an error mentioning %q", c.args, code, stderr.String(), c.want)
		}
	}
}

// TestKillKillsTheTree: kill ends the process in the pid file and its
// children.
func TestKillKillsTheTree(t *testing.T) {
	dir := t.TempDir()
	run1 := filepath.Join(dir, "node-1", "run")
	os.MkdirAll(run1, 0o700)
	cmd := exec.Command("sh", "-c", "sleep 60 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(run1, "thawd.pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600)
	time.Sleep(100 * time.Millisecond)
	if code := run(context.Background(), []string{"kill", "--dir", dir, "node-1"}, &bytes.Buffer{}, &bytes.Buffer{}); code != 0 {
		t.Fatalf("kill: exit %d", code)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the process survived kill")
	}
}
