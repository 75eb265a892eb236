package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
)

// thawd is the real daemon binary running as a subprocess on a socket.
type thawd struct {
	cmd  *exec.Cmd
	sock string
	out  *bytes.Buffer
	done chan struct{}
}

// startThawd runs bin/thawd on dataDir with a Unix socket in a private
// directory, and waits until it answers (or fails: then err says why).
func startThawd(t *testing.T, dataDir string, args ...string) (*thawd, error) {
	t.Helper()
	return startThawdBinary(t, repoPath("bin/thawd"), dataDir, args...)
}

// startThawdBinary is startThawd of the daemon binary bin.
func startThawdBinary(t *testing.T, bin, dataDir string, args ...string) (*thawd, error) {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "thawd-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	d := &thawd{sock: filepath.Join(sockDir, "thawd.sock"), out: &bytes.Buffer{}, done: make(chan struct{})}
	all := append([]string{"--data-dir", dataDir, "--image", imageDir(t), "--accel", "tcg", "--listen", d.sock,
		"--shim", repoPath("shim/build/libthaw_shim.so"), "--store-dir", storeDir(t, dataDir), "--memory", "256"}, args...)
	d.cmd = exec.Command(bin, all...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start thawd (make build first): %v", err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	t.Cleanup(d.kill)
	c := client.New("unix:" + d.sock)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-d.done:
			return d, fmt.Errorf("thawd exited: %s", d.out)
		default:
		}
		if _, err := c.Info(context.Background()); err == nil {
			return d, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return d, fmt.Errorf("thawd did not answer: %s", d.out)
}

func (d *thawd) kill() {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

// A second daemon on a data directory in use refuses before it touches
// anything: the first one's VM lives on, its half-written snapshot stays,
// its API still answers.
func TestSecondDaemonTouchesNothing(t *testing.T) {
	parallel(t)
	dataDir := t.TempDir()
	e := startEnv(t, dataDir)
	ctx := ctxT(t)
	vm := bootFunction(t, e.c, "probe", "e2e/testdata/probe")
	tmp := filepath.Join(dataDir, "snapshots", ".tmp-snap-0123456789ab")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	d, err := startThawd(t, dataDir)
	if err == nil || !strings.Contains(d.out.String(), "is used by another thawd (pid") {
		t.Fatalf("second daemon: %v", err)
	}
	if _, err := os.Stat(d.sock); !os.IsNotExist(err) {
		t.Errorf("the refused daemon created its socket: %v", err)
	}
	if processGone(vm.PID) {
		t.Fatalf("the first daemon's VM was killed")
	}
	if _, err := os.Stat(tmp); err != nil {
		t.Errorf("the in-progress snapshot directory was removed: %v", err)
	}
	if inv, err := e.c.InvokeVM(ctx, vm.ID, ev(`{"name":"still here"}`), client.InvokeOptions{}); err != nil || !inv.OK {
		t.Fatalf("first daemon after the refusal: %v %+v", err, inv)
	}
}

// stallAfter passes the first n bytes of r on, then blocks for good: the
// daemon is mid-create when it is killed.
type stallAfter struct {
	r io.Reader
	n int
}

func (s *stallAfter) Read(p []byte) (int, error) {
	if s.n <= 0 {
		time.Sleep(time.Hour)
	}
	k, err := s.r.Read(p[:min(len(p), s.n)])
	s.n -= k
	return k, err
}

// kill -9 during a create, and a crash between publishing a snapshot and
// recording it: the next start removes both leftovers.
func TestCrashLeftoversRemovedAtStart(t *testing.T) {
	parallel(t)
	dataDir := t.TempDir()
	d, err := startThawd(t, dataDir)
	if err != nil {
		t.Fatal(err)
	}
	// An archive upload: a gzip header, then a stored block that keeps coming.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.sock)
	}}}
	go func() {
		body := &stallAfter{r: bytes.NewReader(bigArchive(t)), n: 16 << 20}
		req, _ := http.NewRequest("POST", "http://thawd/v1/functions?name=big", body)
		req.Header.Set("Content-Type", "application/gzip")
		hc.Do(req)
	}()
	fnDir := filepath.Join(dataDir, "functions")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m, _ := filepath.Glob(filepath.Join(fnDir, ".tmp-big-*", "code", "big", "*")); len(m) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the create never started writing: %s", d.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.kill()
	orphan := filepath.Join(dataDir, "snapshots", "snap-0123456789ab")
	if err := os.MkdirAll(orphan, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(orphan, "memory"), make([]byte, 1<<20), 0o600)
	if _, err := startThawd(t, dataDir); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(fnDir, ".tmp-*")); len(m) > 0 {
		t.Errorf("left after restart: %v", m)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Errorf("unrecorded snapshot directory survived: %v", err)
	}
}

// bigArchive is a tar.gz (stored, not compressed) with a 48 MiB file.
func bigArchive(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.NoCompression)
	tw := tar.NewWriter(gz)
	data := make([]byte, 48<<20)
	tw.WriteHeader(&tar.Header{Name: "payload.bin", Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg})
	tw.Write(data)
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// Through the real Unix socket, a member of the socket group (trusted to
// create functions from host directories) still cannot have the daemon read
// a file they could not read themselves, nor a directory outside the
// configured roots; over TCP, even with the token, no caller may.
func TestLocalUserCannotReadRootsFilesThroughTheDaemon(t *testing.T) {
	parallel(t)
	root := t.TempDir()
	os.Chmod(root, 0o755)
	fn := filepath.Join(root, "fn")
	os.MkdirAll(fn, 0o755)
	os.WriteFile(filepath.Join(fn, "handler.py"), []byte("def handle(e):\n    return open('z-secret').read()\n"), 0o644)
	os.WriteFile(filepath.Join(fn, "z-secret"), []byte("root only"), 0o600)
	// Explicit modes: a daemon in this test process set its umask to 077.
	os.Chmod(fn, 0o755)
	os.Chmod(filepath.Join(fn, "handler.py"), 0o644)
	d, err := startThawd(t, t.TempDir(), "--socket-group", "nogroup", "--function-roots", root)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(d.sock), 0o755)
	thaw := func(uid uint32, args ...string) (string, error) {
		cmd := exec.Command(repoPath("bin/thaw"), args...)
		cmd.Env = []string{"THAW_URL=unix:" + d.sock, "PATH=/usr/bin:/bin"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: 65534, Groups: []uint32{}}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := thaw(65534, "function", "create", "stolen", "--dir", fn, "--server-dir")
	if err == nil || !strings.Contains(out, "z-secret is not readable by uid 65534") {
		t.Fatalf("nobody had the daemon read a root-only file: %v\n%s", err, out)
	}
	out, err = thaw(65534, "function", "create", "elsewhere", "--dir", repoPath("functions/hello"), "--server-dir")
	if err == nil || !strings.Contains(out, "not under a function root") {
		t.Fatalf("a directory outside the roots was accepted: %v\n%s", err, out)
	}
	out, err = thaw(0, "function", "create", "fromroot", "--dir", fn, "--server-dir")
	if err != nil {
		t.Fatalf("root could not create from the function root: %v\n%s", err, out)
	}
	// The in-process harness serves TCP with a token: never trusted for directories.
	e := startEnvWith(t, t.TempDir(), func(c *daemon.Config) { c.FunctionRoots = []string{root} })
	_, err = e.c.CreateFunctionFromServerDir(ctxT(t), "overtcp", fn, 256, 1)
	wantAPIError(t, err, client.ErrForbidden, 403, "Unix socket")
}

// Bounds on real VMs: the live-VM limit answers 429; a function of
// thousands of small files builds and its guest sees all of them; nothing
// the daemon wrote is readable by group or others.
func TestBoundsAndModes(t *testing.T) {
	parallel(t)
	dataDir := t.TempDir()
	e := startEnvWith(t, dataDir, func(c *daemon.Config) { c.MaxVMs, c.AdmissionTimeout = 1, 500*time.Millisecond })
	ctx := ctxT(t)
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "handler.py"), []byte(`import os
def handle(event):
    n = 0
    for _, _, files in os.walk("."):
        n += len(files)
    return {"files": n}
`), 0o644)
	for i := range 3000 {
		dir := filepath.Join(src, "data", fmt.Sprintf("d%02d", i%30))
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), []byte("x"), 0o644)
	}
	if _, err := e.c.CreateFunctionFromDir(ctx, "many", src, 256, 1); err != nil {
		t.Fatalf("create a function of 3000 files: %v", err)
	}
	vm, err := e.c.BootVM(ctx, "many")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := e.c.InvokeVM(ctx, vm.ID, ev(`{}`), client.InvokeOptions{})
	if err != nil || !inv.OK || string(inv.Result) != `{"files": 3001}` && !strings.Contains(string(inv.Result), `"files":3001`) && !strings.Contains(string(inv.Result), `"files": 3001`) {
		t.Fatalf("guest saw %s (%v)", inv.Result, err)
	}
	snap, err := e.c.CreateSnapshot(ctx, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.c.BootVM(ctx, "many")
	wantAPIError(t, err, client.ErrTooMany, 429, "limits: 1 VMs")
	_, err = e.c.InvokeSnapshot(ctx, snap.ID, ev(`{}`), client.InvokeOptions{})
	wantAPIError(t, err, client.ErrTooMany, 429, "--max-vms")
	if err := e.c.DeleteVM(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	if inv, err := e.c.InvokeSnapshot(ctx, snap.ID, ev(`{}`), client.InvokeOptions{}); err != nil || !inv.OK {
		t.Fatalf("cold invocation once a VM slot is free: %v", err)
	}
	err = filepath.WalkDir(dataDir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := de.Info()
		if err != nil {
			return nil // a file going away under the walk
		}
		if info.Mode().Perm()&0o077 != 0 && p != dataDir {
			t.Errorf("%s has mode %04o: group or others can reach it", p, info.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
